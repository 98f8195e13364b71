//! The `replace_where` flow: a batch (a table's snapshot, or new files) atomically
//! replaces the target rows matching a predicate.
//!
//! ```yaml
//! flows:
//!   sales_replace:
//!     replace_where:
//!       from: ./exports/sales/**/*.parquet
//!       format: parquet
//!       into: demo.sales_copy
//!       schema: sales_copy.sql
//!       predicate: "updated_at >= {min(updated_at)}"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::apply::CastDialect;
use crate::check::Checks;
use crate::ddl::{TableDef, TableName};
use crate::error::SpecError;
use crate::ingest::{FileFormat, IngestFlow, RawIngest, ingest_flow};
use crate::policy::OnCastError;

/// Where a `replace_where` batch comes from.
#[derive(Debug, Clone)]
pub enum ReplaceSource {
    /// A table: its whole snapshot is the batch, replaced whenever its version moves.
    Table(TableName),
    /// Files: the files not applied yet are the batch (read like an ingest flow's).
    Files(Box<IngestFlow>),
}

/// A `replace_where` flow: a batch atomically replaces the target rows matching a
/// predicate (Delta's `replaceWhere`).
#[derive(Debug, Clone)]
pub struct ReplaceWhereFlow {
    /// The batch's source.
    pub from: ReplaceSource,
    /// `from` as written.
    pub from_text: String,
    /// Target table.
    pub into: TableName,
    /// The target's definition: batch columns are cast to it.
    pub target: Option<TableDef>,
    /// SQL predicate over target columns, with `{min(col)}` / `{max(col)}` placeholders
    /// for the batch's bounds.
    pub predicate: String,
    /// What a value that cannot be cast does (`null` or `fail`).
    pub on_cast_error: OnCastError,
    /// Whose rules cast batch values to the target's types (`cast_dialect`): smelt's own
    /// lenient rules by default; `spark` is Spark's `try_cast`, which the Spark engine runs.
    pub cast_dialect: CastDialect,
    /// Zone of timestamps without an offset.
    pub tz: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReplaceWhere {
    from: String,
    into: String,
    format: Option<FileFormat>,
    header: Option<bool>,
    sep: Option<String>,
    schema: Option<PathBuf>,
    predicate: String,
    on_cast_error: Option<OnCastError>,
    cast_dialect: Option<CastDialect>,
    tz: Option<String>,
}

pub(crate) fn replace_where_flow(
    path: &Path,
    dir: &Path,
    text: &str,
    name: &str,
    raw: RawReplaceWhere,
    errors: &mut Vec<SpecError>,
) -> Option<ReplaceWhereFlow> {
    let before = errors.len();
    let mut c = Checks {
        path,
        text,
        flow: name,
        kind: "replace_where",
        errors,
    };
    let into = c.table("into", &raw.into);
    let from = match raw.format {
        None => {
            if raw.header.is_some() || raw.sep.is_some() {
                c.error(
                    "format",
                    "`header` and `sep` describe files, and `from` is read as a table",
                    "set `format:` (parquet, csv, json) to read files",
                );
            }
            c.table("from", &raw.from).map(ReplaceSource::Table)
        }
        Some(format) => {
            // Files: the ingest reader's listing and formats, without audit columns.
            let ingest = RawIngest::for_files(&raw.from, &raw.into, format, raw.header, raw.sep);
            let mut inner = Vec::new();
            let files = ingest_flow(path, dir, "", name, ingest, &mut inner);
            for e in inner {
                let leaf = e.field.rsplit('.').next().unwrap_or("from").to_string();
                c.error(&leaf, e.message, e.hint.as_deref().unwrap_or(""));
            }
            files.map(|f| ReplaceSource::Files(Box::new(f)))
        }
    };
    let target = c.ddl(dir, &raw.schema);
    if raw.predicate.trim().is_empty() {
        c.error(
            "predicate",
            "`predicate` is empty",
            "write the rows the batch replaces, e.g. `updated_at >= {min(updated_at)}`",
        );
    } else if let Some(p) = crate::bounds::placeholders(&raw.predicate)
        .into_iter()
        .find(|p| p.quoted)
    {
        c.error(
            "predicate",
            format!(
                "`predicate`: the bound `{}` is inside a string literal, where it is not filled",
                p.text
            ),
            &format!(
                "write it outside the quotes, e.g. `{0} >= {{min({0})}}`: it is filled with a literal of the column's type",
                p.column
            ),
        );
    } else if let Err(e) = crate::Predicate::parse(&crate::bounds::without_bounds(&raw.predicate)) {
        c.error("predicate", format!("`predicate`: {}", e.message), &e.hint);
    }
    c.zone("tz", &raw.tz);
    let on_cast_error = c.cast_policy(raw.on_cast_error);
    let ok = c.errors.len() == before;
    Some(ReplaceWhereFlow {
        from: from?,
        from_text: raw.from,
        into: into?,
        target,
        predicate: raw.predicate,
        on_cast_error,
        cast_dialect: raw.cast_dialect.unwrap_or(CastDialect::Lenient),
        tz: raw.tz,
    })
    .filter(|_| ok)
}
