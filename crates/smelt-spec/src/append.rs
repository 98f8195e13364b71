//! The `append` flow (seed 004): rows added to a table since the watermark, filtered and
//! cast, appended to another.
//!
//! ```yaml
//! flows:
//!   active:
//!     append:
//!       from: bronze.events
//!       into: silver.active_events
//!       where: status = 'active'
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::apply::CastDialect;
use crate::check::Checks;
use crate::ddl::{TableDef, TableName};
use crate::error::SpecError;
use crate::policy::{OnCastError, OnRewrite};

/// An `append` flow: rows added to the source since the watermark, filtered and cast,
/// appended to the target.
#[derive(Debug, Clone)]
pub struct AppendFlow {
    /// Source table.
    pub from: TableName,
    /// Target table.
    pub into: TableName,
    /// SQL predicate over source rows: only rows where it is true are appended.
    pub filter: Option<String>,
    /// The target's definition (`schema:`): rows are cast to it. `None`: source types.
    pub target: Option<TableDef>,
    /// What rewriting source commits do.
    pub on_rewrite: OnRewrite,
    /// What a value that cannot be cast does (`null` or `fail`).
    pub on_cast_error: OnCastError,
    /// Whose rules cast source strings to the target's types (`cast_dialect`): smelt's own
    /// (`lenient`) unless set.
    pub cast_dialect: CastDialect,
    /// Zone of timestamps without an offset.
    pub tz: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAppend {
    from: String,
    into: String,
    #[serde(rename = "where")]
    filter: Option<String>,
    schema: Option<PathBuf>,
    on_rewrite: Option<OnRewrite>,
    on_cast_error: Option<OnCastError>,
    cast_dialect: Option<CastDialect>,
    tz: Option<String>,
}

pub(crate) fn append_flow(
    path: &Path,
    dir: &Path,
    text: &str,
    name: &str,
    raw: RawAppend,
    errors: &mut Vec<SpecError>,
) -> Option<AppendFlow> {
    let before = errors.len();
    let mut c = Checks {
        path,
        text,
        flow: name,
        kind: "append",
        errors,
    };
    let from = c.table("from", &raw.from);
    let into = c.table("into", &raw.into);
    if raw.filter.as_deref().is_some_and(|f| f.trim().is_empty()) {
        c.error(
            "where",
            "`where` is empty",
            "write a SQL predicate over source columns, e.g. `status = 'active'`",
        );
    } else if let Some(Err(e)) = raw.filter.as_deref().map(crate::Predicate::parse) {
        c.error("where", format!("`where`: {}", e.message), &e.hint);
    }
    let target = c.ddl(dir, &raw.schema);
    c.zone("tz", &raw.tz);
    let on_cast_error = c.cast_policy(raw.on_cast_error);
    let ok = c.errors.len() == before;
    Some(AppendFlow {
        from: from?,
        into: into?,
        filter: raw.filter,
        target,
        on_rewrite: raw.on_rewrite.unwrap_or_default(),
        on_cast_error,
        cast_dialect: raw.cast_dialect.unwrap_or(CastDialect::Lenient),
        tz: raw.tz,
    })
    .filter(|_| ok)
}
