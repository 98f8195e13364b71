//! A flow from one source table into one target table (append, replace_where): where it
//! stands before its run — the source's version and columns, the target's last commit,
//! columns and watermark — and the columns it writes, each cast from a source column.

use arrow::datatypes::SchemaRef;
use smelt_engine::schema::column_type;
use smelt_engine::{EngineError, Result};
use smelt_spec::{CastDialect, ColumnType, TableDef, TableName};

use crate::delta::describe::{Last, last_commit, schema_of};
use crate::delta::txn::txn_of;
use crate::iceberg::{Meta, meta};
use crate::places::Places;
use crate::session::Session;
use crate::sql::ident;
use crate::sql::try_cast as cast;

/// Where a table-to-table flow stands before its run.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    /// The source's latest version: what the run reads up to.
    pub(crate) source_version: i64,
    /// The source's schema, as Spark reads it.
    pub(crate) source_schema: SchemaRef,
    /// The target's last commit, when it exists.
    pub(crate) target: Option<Last>,
    /// The target's schema, when it exists.
    pub(crate) target_schema: Option<SchemaRef>,
    /// The source version the target has taken in (its watermark for the flow).
    pub(crate) watermark: Option<i64>,
    /// An Iceberg source's metadata (its version is its current snapshot's sequence number).
    pub(crate) source_meta: Option<Meta>,
}

/// Where flow `name`, from `from` into `into`, stands.
pub(crate) async fn discover(
    s: &Session<'_>,
    places: &Places,
    name: &str,
    (from, into): (&TableName, &TableName),
) -> Result<Tables> {
    let source = places.sql(from);
    let (last, source_meta) = match from.catalog {
        Some(_) => match meta(s, "read the source's snapshots", &source).await? {
            Some(meta) => {
                check_readable(from, &meta)?;
                (Some(meta.last()), Some(meta))
            }
            None => (None, None),
        },
        None => (
            last_commit(s, "read the source's version", &source).await?,
            None,
        ),
    };
    let Some(last) = last else {
        return Err(EngineError::TableNotFound {
            table: from.to_string(),
            location: places.location(from),
            hint: match from.catalog {
                Some(_) => "create the source table in its catalog first, or fix `from:`",
                None => {
                    "create the source table first (as a Delta table), or fix `from:` / `lake:`"
                }
            }
            .into(),
        });
    };
    let source_schema = schema_of(s, "read the source's columns", &source).await?;
    let (target, target_schema, watermark) = self::target(s, places, name, into).await?;
    Ok(Tables {
        source_version: last.version,
        source_schema,
        target,
        target_schema,
        watermark,
        source_meta,
    })
}

/// An Iceberg source the Spark engine reads: format version 2 (version 1 has no sequence
/// numbers to keep a watermark by).
pub(crate) fn check_readable(name: &TableName, meta: &Meta) -> Result<()> {
    if meta.format_version < 2 {
        return Err(EngineError::user(
            format!(
                "`{name}` is an Iceberg table of format version {}: the Spark engine reads version 2",
                meta.format_version
            ),
            format!(
                "upgrade it in Spark: ALTER TABLE {name} SET TBLPROPERTIES ('format-version' = '2')"
            ),
        ));
    }
    Ok(())
}

/// The target `into` of flow `name`: its last commit, schema and the flow's watermark, when
/// it exists.
pub(crate) async fn target(
    s: &Session<'_>,
    places: &Places,
    name: &str,
    into: &TableName,
) -> Result<(Option<Last>, Option<SchemaRef>, Option<i64>)> {
    let target_sql = places.sql(into);
    if into.catalog.is_some() {
        let Some(meta) = meta(s, "read the target's snapshots", &target_sql).await? else {
            return Ok((None, None, None));
        };
        let schema = schema_of(s, "read the target's columns", &target_sql).await?;
        let watermark = meta.watermark(name, &into.to_string())?;
        return Ok((Some(meta.last()), Some(schema), watermark));
    }
    let target = last_commit(s, "read the target's last commit", &target_sql).await?;
    Ok(match &target {
        Some(_) => {
            let schema = schema_of(s, "read the target's columns", &target_sql).await?;
            let watermark = txn_of(
                s,
                &places.location(into),
                name,
                "read the target's watermark",
            )
            .await?;
            (target, Some(schema), watermark)
        }
        None => (None, None, None),
    })
}

/// One column a table-to-table flow writes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Column {
    pub(crate) name: String,
    /// Its type in the target.
    pub(crate) ty: ColumnType,
    pub(crate) nullable: bool,
    /// Whether the source's type differs: the value is cast.
    pub(crate) cast: bool,
}

/// What a flow asks of its columns.
pub(crate) struct Wanted<'a> {
    /// The target's DDL (`schema:`), for a target not created yet.
    pub(crate) ddl: Option<&'a TableDef>,
    /// Whose rules cast.
    pub(crate) dialect: CastDialect,
    /// The problem of target column `.0` missing from the source, in the embedded engine's
    /// words for the flow kind.
    pub(crate) missing: &'a dyn Fn(&str) -> EngineError,
}

/// The columns `wanted` writes — the target's, else its DDL's, else the source's — each a
/// source column: every problem, in the embedded engine's words where it has them.
pub(crate) fn columns(
    wanted: &Wanted<'_>,
    state: &Tables,
) -> std::result::Result<Vec<Column>, Vec<EngineError>> {
    let mut problems = Vec::new();
    let of_schema = |schema: &SchemaRef| -> Vec<(String, Option<ColumnType>, bool)> {
        schema
            .fields()
            .iter()
            .map(|f| {
                (
                    f.name().clone(),
                    column_type(f.data_type()),
                    f.is_nullable(),
                )
            })
            .collect()
    };
    let declared = match (&state.target_schema, wanted.ddl) {
        (Some(schema), _) => of_schema(schema),
        (None, Some(def)) => def
            .columns
            .iter()
            .map(|c| (c.name.clone(), Some(c.ty), c.nullable))
            .collect(),
        (None, None) => of_schema(&state.source_schema),
    };
    let mut out = Vec::new();
    for (column, ty, nullable) in declared {
        let Ok(source) = state.source_schema.field_with_name(&column) else {
            problems.push((wanted.missing)(&column));
            continue;
        };
        let Some(ty) = ty else {
            problems.push(EngineError::user(
                format!("column `{column}` is of a type the Spark engine does not write yet"),
                "run this flow with `--engine embedded`",
            ));
            continue;
        };
        let from = column_type(source.data_type());
        let casts = from != Some(ty);
        if casts && wanted.dialect != CastDialect::Spark {
            let dialect = match wanted.dialect {
                CastDialect::BigQuery => "bigquery",
                _ => "lenient",
            };
            problems.push(EngineError::user(
                format!(
                    "column `{column}` is cast to {ty} by `cast_dialect: {dialect}`, which is not supported on the Spark engine"
                ),
                "set `cast_dialect: spark` (Spark's own `try_cast`), or run this flow with `--engine embedded`",
            ));
        }
        out.push(Column {
            name: column,
            ty,
            nullable,
            cast: casts,
        });
    }
    match problems.is_empty() {
        true => Ok(out),
        false => Err(problems),
    }
}

/// Column `c` of a source row `r` as the target stores it, and whether its cast failed.
pub(crate) fn typed(c: &Column) -> (String, String) {
    let raw = format!("r.{}", ident(&c.name));
    match c.cast {
        true => cast(&raw, c.ty),
        false => (raw, "false".to_string()),
    }
}

/// Over a source row `r`: which of `columns` is the first whose value does not cast, with
/// that raw value (`CASE … END`: a struct `i`, `raw`), and whether any does not.
pub(crate) fn first_failed(columns: &[Column]) -> (String, String) {
    let casts: Vec<(usize, &Column)> = columns.iter().enumerate().filter(|(_, c)| c.cast).collect();
    let failed: Vec<String> = casts.iter().map(|(_, c)| typed(c).1).collect();
    let which: Vec<String> = casts
        .iter()
        .zip(&failed)
        .map(|((i, c), f)| {
            format!(
                "WHEN {f} THEN named_struct('i', {i}, 'raw', CAST(r.{} AS STRING))",
                ident(&c.name)
            )
        })
        .collect();
    let any = match failed.is_empty() {
        true => "false".to_string(),
        false => failed.join(" OR "),
    };
    (format!("CASE {} END", which.join(" ")), any)
}

/// How a target whose watermark is ahead of its source is set right on Spark: an Iceberg
/// table by a rebuild; a Delta table only by dropping it (its `txn` cannot be lowered).
pub(crate) fn ahead_fix(into: &smelt_spec::TableName) -> smelt_rules::watermark::AheadFix {
    match into.catalog {
        Some(_) => smelt_rules::watermark::AheadFix::FullRefresh,
        None => smelt_rules::watermark::AheadFix::Drop,
    }
}
