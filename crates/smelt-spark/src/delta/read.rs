//! The rows a flow run reads from a Delta table, through Spark, for every flow kind that
//! reads changes (apply, append): the table's history for the commit times, the log entries
//! read (`smelt_log`), then the commits (`smelt_commits`), the files (`smelt_files`) and the
//! rows with their version, file and row position (`smelt_raw`) — the SQL is in
//! [`crate::delta::log`].

use smelt_engine::{EngineError, Result};

use crate::delta::describe::{Commit, history};
use crate::delta::log::{self, Span};
use crate::session::Session;
use crate::sql::delta_path;

/// A Delta table read by a flow run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    /// Its name in the pipeline (for messages).
    pub(crate) name: &'a str,
    /// Its folder or URL, as the cluster sees it.
    pub(crate) location: &'a str,
    /// Its latest version: what the run reads up to.
    pub(crate) version: i64,
    /// Its columns.
    pub(crate) columns: &'a [String],
    /// Whether the rows of files removed without change data are read, as deletes.
    pub(crate) removes: bool,
}

/// The table's history for `span` and its log entries (`smelt_log`): what a check of the
/// commits read needs, before any row is.
pub(crate) async fn open(s: &Session<'_>, src: Source<'_>, span: Span) -> Result<Vec<Commit>> {
    let table = delta_path(src.location);
    let history = history(s, &table, src.version, span, src.name).await?;
    if let Span::Snapshot(_) = span
        && history.first().is_some_and(|c| c.version > 0)
    {
        return Err(EngineError::user(
            format!(
                "`{}`'s log starts at version {}: the Spark engine reads a snapshot from the whole log",
                src.name, history[0].version
            ),
            "run this flow's first run with `--engine embedded`; later runs read increments",
        ));
    }
    s.view(
        "define the log entries read (smelt_log)",
        log::log_view(src.location, span),
    )
    .await?;
    Ok(history)
}

/// The rows of the commits `history` of `span` (`smelt_raw`), after [`open`]: the number of
/// files read and their bytes.
pub(crate) async fn rows(
    s: &Session<'_>,
    src: Source<'_>,
    span: Span,
    history: &[Commit],
) -> Result<(usize, u64)> {
    let commits: Vec<(i64, i64)> = history.iter().map(|c| (c.version, c.at_us)).collect();
    s.view(
        "define the commit times (smelt_commits)",
        log::commits_view(&commits),
    )
    .await?;
    s.view(
        "define the change files (smelt_files)",
        log::files_view(span, src.removes),
    )
    .await?;
    let files = s.read("list the change files", log::files_query()).await?;
    let (kinds, paths, sizes) = (
        files.strings("kind"),
        files.strings("path"),
        files.ints("size"),
    );
    let of = |kind: &str| -> Vec<String> {
        kinds
            .iter()
            .zip(&paths)
            .filter(|(k, _)| k.as_deref() == Some(kind))
            .filter_map(|(_, p)| p.clone())
            .collect()
    };
    let (adds, cdc, removed) = (of("add"), of("cdc"), of("remove"));
    let bronze = src.location;
    let add_glob = log::source_glob(bronze, None, &adds);
    let cdc_glob = log::source_glob(bronze, Some("_change_data"), &cdc);
    let removed_glob = log::source_glob(bronze, None, &removed);
    let add_cols = probe(s, "read the bronze files' columns", &add_glob, &adds).await?;
    let cdc_cols = probe(s, "read the change files' columns", &cdc_glob, &cdc).await?;
    let removed_cols = probe(
        s,
        "read the removed files' columns",
        &removed_glob,
        &removed,
    )
    .await?;
    let sources = log::Sources {
        adds: present(&adds, &add_glob, &add_cols),
        cdc: present(&cdc, &cdc_glob, &cdc_cols),
        removes: present(&removed, &removed_glob, &removed_cols),
    };
    let view = log::raw_view(src.columns, sources);
    s.view("define the change rows (smelt_raw)", view).await?;
    let bytes = sizes.iter().flatten().map(|b| *b as u64).sum();
    Ok((adds.len() + cdc.len() + removed.len(), bytes))
}

/// The glob and columns of `files`, when there are any.
fn present<'a>(
    files: &[String],
    glob: &'a str,
    cols: &'a [String],
) -> Option<(&'a str, &'a [String])> {
    (!files.is_empty()).then_some((glob, cols))
}

/// The columns the Parquet files at `glob` have (none read when there are no `files`).
async fn probe(s: &Session<'_>, what: &str, glob: &str, files: &[String]) -> Result<Vec<String>> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    Ok(s.read(what, log::probe(glob)).await?.names())
}
