//! `INSERT INTO | OVERWRITE t [(columns)] VALUES … | SELECT …` and Databricks'
//! `INSERT INTO t REPLACE WHERE predicate SELECT …`: the query's rows cast to the table's
//! columns and written in one commit.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, new_null_array};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{Schema, SchemaRef};
use deltalake::DeltaTable;
use deltalake::datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, Statement, TableObject};
use deltalake::protocol::SaveMode;
use smelt_engine::flow::replace_where::describe;
use smelt_engine::predicate::Predicate;
use smelt_spec::TableName;

use super::catalogs::CatalogTables;
use super::{SqlOutput, query, table_name};
use crate::Lake;
use crate::error::{Context, Error, Result};

/// `INSERT INTO | OVERWRITE t [(columns)] VALUES … | SELECT …`, and Databricks'
/// `INSERT INTO t REPLACE WHERE predicate SELECT …`: the rows in one commit.
pub(super) async fn insert(
    lake: &Lake,
    catalogs: &dyn CatalogTables,
    insert: deltalake::datafusion::sql::sqlparser::ast::Insert,
    spark: bool,
) -> Result<SqlOutput> {
    let TableObject::TableName(target) = &insert.table else {
        return Err(Error::user(
            "INSERT INTO a table function is not supported",
            "insert into `schema.table`",
        ));
    };
    let name = table_name(target)?;
    // Databricks' REPLACE WHERE (read as a partition clause by the parser).
    let replace_where = insert.partitioned.as_deref().and_then(replace_where_of);
    // Clauses smelt does not carry out are refused, never dropped.
    let unsupported = [
        (
            insert.partitioned.is_some() && replace_where.is_none(),
            "PARTITION (…)",
            "replace the rows a predicate selects with INSERT INTO t REPLACE WHERE <predicate> SELECT …, or INSERT OVERWRITE the whole table",
        ),
        (
            insert.on.is_some(),
            "ON CONFLICT / ON DUPLICATE KEY",
            "merge by key with an apply flow",
        ),
        (
            insert.returning.is_some() || insert.output.is_some(),
            "RETURNING / OUTPUT",
            "query the table after the INSERT",
        ),
        (
            insert.replace_into || insert.ignore,
            "REPLACE INTO / INSERT IGNORE",
            "merge by key with an apply flow",
        ),
        (
            !insert.assignments.is_empty(),
            "INSERT … SET",
            "write `INSERT INTO t (columns) VALUES (…)`",
        ),
    ];
    if let Some((_, clause, hint)) = unsupported.iter().find(|(used, _, _)| *used) {
        return Err(Error::user(
            format!("INSERT into `{name}` with {clause} is not supported by smelt sql"),
            *hint,
        ));
    }
    let table = lake
        .open_existing(&name, "create it first with CREATE TABLE")
        .await?;
    let state = table.snapshot().context(|| format!("reading `{name}`"))?;
    crate::features::check_writable(&name.to_string(), state)?;
    let Some(source) = insert.source.clone() else {
        return Err(Error::user(
            "INSERT without VALUES or SELECT",
            "add `VALUES (…)` or a SELECT",
        ));
    };
    let columns: Vec<String> = insert
        .columns
        .iter()
        .map(|c| {
            c.0.last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.clone())
                .unwrap_or_else(|| c.to_string())
        })
        .collect();
    let (_, batches) = query(lake, catalogs, Statement::Query(source), spark).await?;
    let mode = match (replace_where, insert.overwrite) {
        (Some(predicate), _) => InsertMode::ReplaceWhere(predicate),
        (None, true) => InsertMode::Overwrite,
        (None, false) => InsertMode::Append,
    };
    insert_rows(&name, table, &columns, batches, mode).await
}

/// How an INSERT writes its rows.
enum InsertMode {
    Append,
    /// `INSERT OVERWRITE`: they replace every row.
    Overwrite,
    /// `INSERT INTO … REPLACE WHERE predicate`: they replace the rows the predicate selects.
    ReplaceWhere(String),
}

/// The predicate of a REPLACE WHERE, as the parser reads it:
/// `PARTITION (__smelt_replace_where = (predicate))`.
fn replace_where_of(partition: &[Expr]) -> Option<String> {
    match partition {
        [
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            },
        ] if matches!(left.as_ref(), Expr::Identifier(i) if i.value == smelt_spec::ddl::REPLACE_WHERE) =>
        {
            let predicate = match right.as_ref() {
                Expr::Nested(p) => p.as_ref(),
                other => other,
            };
            Some(predicate.to_string())
        }
        _ => None,
    }
}

/// Writes query rows to `table` in one commit as `mode` says: by position into `columns` (or
/// every column), NULL for the rest, each value cast to the column's type (a value that does
/// not fit fails).
async fn insert_rows(
    name: &TableName,
    table: DeltaTable,
    columns: &[String],
    batches: Vec<RecordBatch>,
    mode: InsertMode,
) -> Result<SqlOutput> {
    let snapshot = table.snapshot().context(|| format!("reading `{name}`"))?;
    let target = snapshot.snapshot().arrow_schema();
    let target: SchemaRef = Arc::new(Schema::new(
        target
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect::<Vec<_>>(),
    ));
    let columns: Vec<String> = if columns.is_empty() {
        target.fields().iter().map(|f| f.name().clone()).collect()
    } else {
        columns.to_vec()
    };
    for c in &columns {
        if target.field_with_name(c).is_err() {
            let names: Vec<&str> = target.fields().iter().map(|f| f.name().as_str()).collect();
            let hint = match smelt_spec::did_you_mean(c, names.iter().copied()) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!("columns are: {}", names.join(", ")),
            };
            return Err(Error::user(
                format!("table `{name}` has no column `{c}`"),
                hint,
            ));
        }
    }
    let strict = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    let mut out = Vec::new();
    let mut rows = 0;
    for batch in batches {
        if batch.num_columns() != columns.len() {
            return Err(Error::user(
                format!(
                    "INSERT INTO `{name}` gives {} values per row for {} columns",
                    batch.num_columns(),
                    columns.len()
                ),
                "list as many values as columns",
            ));
        }
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(target.fields().len());
        for field in target.fields() {
            let array = match columns.iter().position(|c| c == field.name()) {
                Some(i) => {
                    cast_with_options(batch.column(i), field.data_type(), &strict).map_err(|e| {
                        Error::user(
                            format!("INSERT INTO `{name}`: column `{}`: {e}", field.name()),
                            "give a value of the column's type",
                        )
                    })?
                }
                None => new_null_array(field.data_type(), batch.num_rows()),
            };
            arrays.push(array);
        }
        rows += batch.num_rows();
        out.push(
            RecordBatch::try_new(Arc::clone(&target), arrays).map_err(|e| {
                Error::user(
                    format!("INSERT INTO `{name}`: {e}"),
                    "a NOT NULL column got a NULL value",
                )
            })?,
        );
    }
    if let InsertMode::ReplaceWhere(predicate) = &mode {
        inside(name, predicate, &target, &out)?;
        if rows == 0 {
            table
                .delete()
                .with_predicate(predicate.clone())
                .await
                .context(|| format!("replacing rows of `{name}` where {predicate}"))?;
        } else {
            table
                .write(out)
                .with_save_mode(SaveMode::Overwrite)
                .with_replace_where(predicate.clone())
                .await
                .context(|| format!("replacing rows of `{name}` where {predicate}"))?;
        }
        return Ok(SqlOutput::Message(format!(
            "replaced the rows of {name} where {predicate} with {rows} rows"
        )));
    }
    if matches!(mode, InsertMode::Overwrite) {
        if rows == 0 {
            table
                .delete()
                .await
                .context(|| format!("overwriting `{name}`"))?;
        } else {
            table
                .write(out)
                .with_save_mode(SaveMode::Overwrite)
                .await
                .context(|| format!("overwriting `{name}`"))?;
        }
        return Ok(SqlOutput::Message(format!(
            "overwrote {name} with {rows} rows"
        )));
    }
    if rows == 0 {
        return Ok(SqlOutput::Message(format!("inserted 0 rows into {name}")));
    }
    table
        .write(out)
        .with_save_mode(SaveMode::Append)
        .await
        .context(|| format!("inserting into `{name}`"))?;
    Ok(SqlOutput::Message(format!(
        "inserted {rows} rows into {name}"
    )))
}

/// Fails unless `predicate` selects every row of `rows` (of `table`, with `schema`): a
/// REPLACE WHERE writes only rows it replaces, as Databricks requires (delta-rs would fail
/// the write with a dump of its own validation columns).
fn inside(
    table: &TableName,
    predicate: &str,
    schema: &SchemaRef,
    rows: &[RecordBatch],
) -> Result<()> {
    let what = format!("INSERT INTO `{table}` REPLACE WHERE");
    let compiled = Predicate::compile(predicate, schema, &what)?;
    let mut before = 0;
    for batch in rows {
        let pass = compiled.evaluate(batch)?;
        if let Some(i) = (0..pass.len()).find(|&i| !pass.value(i)) {
            return Err(Error::user(
                format!(
                    "{what} {predicate}: row {} of the query is outside the predicate: {}",
                    before + i + 1,
                    describe(batch, i)
                ),
                "every row written must match the predicate: filter the query by it, or widen the predicate; nothing was written",
            ));
        }
        before += batch.num_rows();
    }
    Ok(())
}
