//! SQL table definitions: `CREATE TABLE` (BigQuery and Spark/Databricks spellings) into a
//! typed [`TableDef`], plus the shared SQL script parser.

use std::fmt;
use std::path::Path;

use sqlparser::ast::Spanned;
use sqlparser::ast::{
    ColumnOption, CreateTable, HiveDistributionStyle, Statement, TableConstraint,
};

mod options;

use options::{change_feed_in, refuse_options};
pub use options::{change_feed_option, key_values, understood_option};

use crate::error::{Result, SpecError, SpecErrors};
pub use crate::script::{
    DESCRIBE_FUNCTION, MERGE_SET_ALL, REPLACE_WHERE, UNSET_PREFIX, parse_script, parse_script_spark,
};

pub use crate::name::TableName;

/// Silver column types, in the spellings BigQuery and Spark accept (DESIGN §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// STRING, VARCHAR, TEXT, CHAR.
    String,
    /// BOOL, BOOLEAN.
    Bool,
    /// INT64, BIGINT, LONG.
    Int64,
    /// INT, INTEGER.
    Int32,
    /// SMALLINT.
    Int16,
    /// TINYINT, BYTE.
    Int8,
    /// FLOAT64, DOUBLE.
    Float64,
    /// FLOAT, REAL, FLOAT32.
    Float32,
    /// DECIMAL(p,s); NUMERIC = DECIMAL(38,9).
    Decimal(u8, i8),
    /// DATE.
    Date,
    /// TIMESTAMP: UTC, microseconds.
    Timestamp,
    /// DATETIME, TIMESTAMP_NTZ: no zone, microseconds.
    TimestampNtz,
    /// BYTES, BINARY.
    Binary,
}

impl ColumnType {
    /// Parses a type name as written in DDL or YAML (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        let t = s.trim().to_ascii_uppercase();
        let t = t.replace(' ', "");
        let base = t.split('(').next().unwrap_or("");
        let args: Vec<i64> = t
            .split_once('(')
            .map(|(_, a)| {
                a.trim_end_matches(')')
                    .split(',')
                    .filter_map(|x| x.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        Some(match base {
            "STRING" | "VARCHAR" | "TEXT" | "CHAR" | "CHARACTERVARYING" | "NVARCHAR" => {
                Self::String
            }
            "BOOL" | "BOOLEAN" => Self::Bool,
            "INT64" | "BIGINT" | "LONG" => Self::Int64,
            "INT" | "INTEGER" | "INT32" => Self::Int32,
            "SMALLINT" | "SHORT" | "INT16" => Self::Int16,
            "TINYINT" | "BYTE" | "INT8" => Self::Int8,
            "FLOAT64" | "DOUBLE" | "DOUBLEPRECISION" => Self::Float64,
            "FLOAT" | "REAL" | "FLOAT32" => Self::Float32,
            "NUMERIC" | "DECIMAL" | "DEC" => match args.as_slice() {
                [] => Self::Decimal(38, 9),
                [p] if (1..=38).contains(p) => Self::Decimal(*p as u8, 0),
                [p, s] if (1..=38).contains(p) && (0..=*p).contains(s) => {
                    Self::Decimal(*p as u8, *s as i8)
                }
                _ => return None,
            },
            "DATE" => Self::Date,
            "TIMESTAMP" | "TIMESTAMP_LTZ" | "TIMESTAMPTZ" => Self::Timestamp,
            "DATETIME" | "TIMESTAMP_NTZ" => Self::TimestampNtz,
            "BYTES" | "BINARY" | "VARBINARY" | "BLOB" => Self::Binary,
            _ => return None,
        })
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::String => f.write_str("STRING"),
            Self::Bool => f.write_str("BOOL"),
            Self::Int64 => f.write_str("INT64"),
            Self::Int32 => f.write_str("INT"),
            Self::Int16 => f.write_str("SMALLINT"),
            Self::Int8 => f.write_str("TINYINT"),
            Self::Float64 => f.write_str("FLOAT64"),
            Self::Float32 => f.write_str("FLOAT"),
            Self::Decimal(p, s) => write!(f, "DECIMAL({p},{s})"),
            Self::Date => f.write_str("DATE"),
            Self::Timestamp => f.write_str("TIMESTAMP"),
            Self::TimestampNtz => f.write_str("TIMESTAMP_NTZ"),
            Self::Binary => f.write_str("BYTES"),
        }
    }
}

/// One column of a table definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDef {
    /// Name, case preserved.
    pub name: String,
    /// Type.
    pub ty: ColumnType,
    /// False with `NOT NULL` (or when the column is part of the primary key).
    pub nullable: bool,
}

/// A table definition from a `CREATE TABLE` statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    /// The table's name.
    pub name: TableName,
    /// Columns in order.
    pub columns: Vec<ColumnDef>,
    /// `PRIMARY KEY (...)` columns (constraint or column option), empty if none.
    pub primary_key: Vec<String>,
    /// Whether the table asks for a change feed: `Some(true)` with
    /// `OPTIONS (enable_change_history = TRUE)` or
    /// `TBLPROPERTIES (delta.enableChangeDataFeed = true)`, `Some(false)` when an option
    /// turns it off, `None` when no option speaks of it.
    pub change_feed: Option<bool>,
    /// `CREATE OR REPLACE`.
    pub or_replace: bool,
    /// `IF NOT EXISTS`.
    pub if_not_exists: bool,
    /// Some column has a type name only BigQuery spells so (`INT64`, `FLOAT64`, `BOOL`,
    /// `BIGNUMERIC`, `BYTES`, `DATETIME`): the default cast dialect is then BigQuery's.
    pub bigquery_types: bool,
}

impl TableDef {
    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// Reads the single `CREATE TABLE` statement of a DDL file.
pub fn parse_table(sql: &str, file: &Path) -> Result<TableDef> {
    let stmts = parse_script(sql).map_err(|e| {
        SpecError::new(file, "", format!("cannot parse the table definition: {e}"))
            .at(line_in_parser_error(&e))
            .hint("the file must hold one CREATE TABLE statement")
    })?;
    let creates: Vec<&CreateTable> = stmts
        .iter()
        .filter_map(|s| match s {
            Statement::CreateTable(c) => Some(c),
            _ => None,
        })
        .collect();
    match creates.as_slice() {
        [one] => {
            let mut def = table_def(one, file)?;
            if let Some(on) = options::change_feed_altered(&stmts, &def.name) {
                def.change_feed = Some(on);
            }
            Ok(def)
        }
        _ => Err(SpecError::new(
            file,
            "",
            format!(
                "expected one CREATE TABLE statement, found {}",
                creates.len()
            ),
        )
        .at(Some(1))
        .hint("put one `CREATE TABLE schema.table (...)` in the file")
        .into()),
    }
}

fn line_in_parser_error(e: &str) -> Option<usize> {
    let rest = e.split("Line: ").nth(1)?;
    rest.split(',').next()?.trim().parse().ok()
}

/// Converts a parsed `CREATE TABLE` into a [`TableDef`], collecting every problem.
pub fn table_def(c: &CreateTable, file: &Path) -> Result<TableDef> {
    let mut errors = Vec::new();
    let name = TableName::from_object_name(&c.name);
    if name.is_none() {
        errors.push(
            SpecError::new(file, "", format!("table name `{}` has no schema", c.name))
                .at(Some(
                    c.name
                        .0
                        .first()
                        .map(|p| span_line(p.span().start.line))
                        .unwrap_or(1),
                ))
                .hint("name tables `schema.table`, e.g. `silver.product2`"),
        );
    }
    let mut primary_key = Vec::new();
    let mut columns: Vec<ColumnDef> = c
        .columns
        .iter()
        .filter_map(|col| column_def(c, col, file, &mut errors, &mut primary_key))
        .collect();
    constraint_keys(c, file, &mut errors, &mut primary_key);
    for k in &primary_key {
        if let Some(c) = columns.iter_mut().find(|c| &c.name == k) {
            c.nullable = false;
        }
    }
    let change_feed = change_feed_in(&c.table_options);
    refuse_clauses(c, file, &mut errors);
    refuse_options(c, file, &mut errors);
    if !errors.is_empty() {
        return Err(SpecErrors(errors));
    }
    Ok(TableDef {
        bigquery_types: bigquery_types(c),
        name: name.expect("checked above"),
        columns,
        primary_key,
        change_feed,
        or_replace: c.or_replace,
        if_not_exists: c.if_not_exists,
    })
}

/// The definition of column `col` of table `c`, the column's name added to
/// `primary_key` when it says PRIMARY KEY; `None` for an unknown type.
fn column_def(
    c: &CreateTable,
    col: &sqlparser::ast::ColumnDef,
    file: &Path,
    errors: &mut Vec<SpecError>,
    primary_key: &mut Vec<String>,
) -> Option<ColumnDef> {
    let type_text = col.data_type.to_string();
    let Some(ty) = ColumnType::parse(&type_text) else {
        errors.push(
            SpecError::new(file, col.name.value.clone(), format!("unknown type `{type_text}` for column `{}`", col.name.value))
                .at(Some(span_line(col.name.span.start.line)))
                .hint("use STRING, BOOL, INT64, INT, SMALLINT, FLOAT64, FLOAT, NUMERIC, DECIMAL(p,s), DATE, TIMESTAMP, DATETIME or BYTES"),
        );
        return None;
    };
    let mut nullable = true;
    for opt in &col.options {
        match &opt.option {
            ColumnOption::NotNull => nullable = false,
            ColumnOption::PrimaryKey(_) => {
                nullable = false;
                primary_key.push(col.name.value.clone());
            }
            ColumnOption::Null => {}
            other => errors.push(
                SpecError::new(file, col.name.value.clone(), format!("`{}`: column `{}`: `{other}` is not supported", c.name, col.name.value))
                    .at(Some(span_line(col.name.span.start.line)))
                    .hint("smelt's columns take a type, NOT NULL and PRIMARY KEY; drop the rest (defaults, generated values, checks, comments)"),
            ),
        }
    }
    Some(ColumnDef {
        name: col.name.value.clone(),
        ty,
        nullable,
    })
}

/// Adds the columns of `PRIMARY KEY (…)` constraints to `primary_key`, reporting those
/// that are not columns of the table.
fn constraint_keys(
    c: &CreateTable,
    file: &Path,
    errors: &mut Vec<SpecError>,
    primary_key: &mut Vec<String>,
) {
    for constraint in &c.constraints {
        if let TableConstraint::PrimaryKey(pk) = constraint {
            for ic in &pk.columns {
                let col = ic.column.expr.to_string();
                let col = col.trim_matches(|c| c == '`' || c == '"').to_string();
                if !c.columns.iter().any(|d| d.name.value == col) {
                    errors.push(
                        SpecError::new(
                            file,
                            "PRIMARY KEY",
                            format!("primary key column `{col}` is not a column of the table"),
                        )
                        .hint("list columns declared above in PRIMARY KEY (...)"),
                    );
                }
                primary_key.push(col);
            }
        }
    }
}

/// Reports the clauses smelt does not carry out (refused, never dropped): the table's
/// kind, location and storage, then its partitioning and clustering.
fn refuse_clauses(c: &CreateTable, file: &Path, errors: &mut Vec<SpecError>) {
    let line = Some(span_line(c.name.span().start.line));
    let layout = [
        (
            c.partition_by.is_some()
                || matches!(
                    c.hive_distribution,
                    HiveDistributionStyle::PARTITIONED { .. }
                ),
            "PARTITION BY / PARTITIONED BY",
        ),
        (
            c.cluster_by.is_some() || c.clustered_by.is_some(),
            "CLUSTER BY / CLUSTERED BY",
        ),
    ];
    let kind = [
        (c.temporary, "TEMPORARY"),
        (c.external, "EXTERNAL"),
        (
            c.location.is_some()
                || c.hive_formats
                    .as_ref()
                    .is_some_and(|h| h.location.is_some()),
            "LOCATION",
        ),
        (
            c.file_format.is_some()
                || c.hive_formats.as_ref().is_some_and(|h| {
                    h.row_format.is_some() || h.storage.is_some() || h.serde_properties.is_some()
                }),
            "STORED AS / ROW FORMAT",
        ),
        (c.like.is_some(), "LIKE"),
        (c.clone.is_some(), "CLONE"),
        (c.comment.is_some(), "COMMENT"),
    ];
    for (_, clause) in kind.iter().filter(|(used, _)| *used) {
        errors.push(
            SpecError::new(file, "", format!("`{}`: {clause} is not supported", c.name))
                .at(line)
                .hint("smelt's tables live in the lake at `schema/table`, with the columns listed; drop the clause"),
        );
    }
    for (_, clause) in layout.iter().filter(|(used, _)| *used) {
        errors.push(
            SpecError::new(file, "", format!("`{}`: {clause} is not supported: smelt's tables are not partitioned or clustered", c.name))
                .at(line)
                .hint("drop the clause; smelt skips files by their statistics, and `smelt optimize` compacts them"),
        );
    }
}

/// Whether some column has a type name only BigQuery spells so (see
/// [`TableDef::bigquery_types`]).
fn bigquery_types(c: &CreateTable) -> bool {
    c.columns.iter().any(|col| {
        matches!(
            col.data_type,
            sqlparser::ast::DataType::Int64
                | sqlparser::ast::DataType::Float64
                | sqlparser::ast::DataType::Bool
                | sqlparser::ast::DataType::BigNumeric(_)
                | sqlparser::ast::DataType::Bytes(_)
                | sqlparser::ast::DataType::Datetime(_)
        )
    })
}

fn span_line(line: u64) -> usize {
    (line as usize).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_SILVER: &str = "CREATE OR REPLACE TABLE `medallion_demo.product2__silver` (
`Id` STRING NOT NULL,
`Name` STRING,
`IsActive` BOOL,
`CreatedDate` TIMESTAMP,
`Price` NUMERIC,
`Amount` DECIMAL(12, 2),
`_ingest_timestamp` TIMESTAMP,
PRIMARY KEY (`Id`) NOT ENFORCED
)
;";

    #[test]
    fn seed_silver_ddl_is_accepted_as_is() {
        let t = parse_table(SEED_SILVER, Path::new("s.sql")).unwrap();
        assert_eq!(
            t.name,
            TableName::parse("medallion_demo.product2__silver").unwrap()
        );
        assert_eq!(t.primary_key, vec!["Id"]);
        assert_eq!(
            t.columns[0],
            ColumnDef {
                name: "Id".into(),
                ty: ColumnType::String,
                nullable: false
            }
        );
        assert_eq!(t.column("IsActive").unwrap().ty, ColumnType::Bool);
        assert_eq!(t.column("Price").unwrap().ty, ColumnType::Decimal(38, 9));
        assert_eq!(t.column("Amount").unwrap().ty, ColumnType::Decimal(12, 2));
        assert!(t.or_replace);
        assert_eq!(t.change_feed, None);
    }

    #[test]
    fn bigquery_alter_set_options_parses() {
        let stmts = parse_script("ALTER TABLE `medallion_demo.product2__bronze`\nSET OPTIONS (\nenable_change_history = TRUE\n);\nTRUNCATE TABLE `medallion_demo.product2__bronze`;").unwrap();
        assert_eq!(stmts.len(), 2);
        let text = stmts[0].to_string();
        assert!(text.contains("TBLPROPERTIES"), "{text}");
    }

    #[test]
    fn type_spellings() {
        for (s, t) in [
            ("INT64", ColumnType::Int64),
            ("bigint", ColumnType::Int64),
            ("LONG", ColumnType::Int64),
            ("INTEGER", ColumnType::Int32),
            ("SMALLINT", ColumnType::Int16),
            ("FLOAT64", ColumnType::Float64),
            ("DOUBLE", ColumnType::Float64),
            ("FLOAT", ColumnType::Float32),
            ("BOOLEAN", ColumnType::Bool),
            ("DATETIME", ColumnType::TimestampNtz),
            ("TIMESTAMP_NTZ", ColumnType::TimestampNtz),
            ("BYTES", ColumnType::Binary),
            ("BINARY", ColumnType::Binary),
            ("DATE", ColumnType::Date),
            ("DECIMAL(18, 2)", ColumnType::Decimal(18, 2)),
            ("NUMERIC(10)", ColumnType::Decimal(10, 0)),
        ] {
            assert_eq!(ColumnType::parse(s), Some(t), "{s}");
        }
        assert_eq!(ColumnType::parse("DECIMAL(40,2)"), None);
        assert_eq!(ColumnType::parse("GEOGRAPHY"), None);
    }

    #[test]
    fn unknown_type_names_column_and_line() {
        let err = parse_table(
            "CREATE TABLE a.b (\n  id STRING,\n  geo GEOGRAPHY\n)",
            Path::new("t.sql"),
        )
        .unwrap_err();
        let e = &err.0[0];
        assert_eq!((e.field.as_str(), e.line), ("geo", Some(3)));
        assert!(
            e.message.contains("unknown type `GEOGRAPHY`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn table_names() {
        assert_eq!(
            TableName::parse("`medallion_demo.x`").unwrap().schema,
            "medallion_demo"
        );
        assert!(TableName::parse("nodot").is_none());
        assert!(TableName::parse("a/b.c").is_none());
    }
}
