//! The rows a flow run reads from a Delta table, through Spark, for every flow kind that
//! reads changes (apply, append, export): the table's history for the commit times and its
//! layout, the log entries read (`smelt_log`), then the commits (`smelt_commits`), the files
//! (`smelt_files`) and the rows with their version, file and row position (`smelt_raw`) —
//! the SQL is in [`crate::delta::log`], [`crate::delta::parquet`] and
//! [`crate::delta::reader`].

use std::collections::BTreeMap;

use smelt_engine::{EngineError, Result};

use crate::delta::describe::{Commit, history};
use crate::delta::layout::{Layout, layout};
use crate::delta::log::{self, Span};
use crate::delta::parquet::{self, Files};
use crate::delta::reader;
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

/// What [`open`] found: the commits of the span still in the log, and how the table lays
/// out its rows.
#[derive(Debug, Clone)]
pub(crate) struct Opened {
    pub(crate) history: Vec<Commit>,
    layout: Layout,
}

/// The table's history for `span`, its layout and its log entries (`smelt_log`): what a
/// check of the commits read needs, before any row is. A snapshot of a table with deletion
/// vectors (read by Delta's reader) needs no log entry before the ones Delta's log cleanup
/// left; another table's snapshot is read from its whole log.
pub(crate) async fn open(s: &Session<'_>, src: Source<'_>, span: Span) -> Result<Opened> {
    let table = delta_path(src.location);
    let history = history(s, &table, src.version, span, src.name).await?;
    let layout = layout(s, &table, src.location).await?;
    if let (Span::Snapshot(_), false) = (span, layout.reader())
        && let Some(first) = history.first().filter(|c| c.version > 0)
    {
        return Err(EngineError::user(
            format!(
                "`{}`'s log starts at version {} (cleaned up after a checkpoint): the Spark engine reads the snapshot of a table without deletion vectors from its whole log",
                src.name, first.version
            ),
            "run this flow's first run (or `--full-refresh`) with `--engine embedded`; later runs read increments on Spark",
        ));
    }
    s.view(
        "define the log entries read (smelt_log)",
        log::log_view(src.location, span),
    )
    .await?;
    Ok(Opened { history, layout })
}

/// The rows of the commits of `span` (`smelt_raw`), after [`open`]: the number of files read
/// and their bytes.
pub(crate) async fn rows(
    s: &Session<'_>,
    src: Source<'_>,
    span: Span,
    opened: &Opened,
) -> Result<(usize, u64)> {
    let commits: Vec<(i64, i64)> = opened
        .history
        .iter()
        .map(|c| (c.version, c.at_us))
        .collect();
    s.view(
        "define the commit times (smelt_commits)",
        log::commits_view(&commits),
    )
    .await?;
    s.view(
        "define the change files (smelt_files)",
        log::files_view(span, src.removes, opened.layout.reader()),
    )
    .await?;
    let table = delta_path(src.location);
    if let (Span::Snapshot(at), true) = (span, opened.layout.reader()) {
        // Files added before the first commit still in the log: the version before it.
        let older = opened.history.first().map_or(0, |c| (c.version - 1).max(0));
        let part = reader::snapshot_part(&table, src.columns, at, older);
        s.view(
            "define the snapshot's rows (smelt_raw)",
            log::raw_view(src.columns, vec![part]),
        )
        .await?;
        let size = s
            .read(
                "count the snapshot's files",
                reader::snapshot_files(&table, at),
            )
            .await?;
        let files = size.ints("files").first().copied().flatten().unwrap_or(0);
        let bytes = size.ints("bytes").first().copied().flatten().unwrap_or(0);
        return Ok((files as usize, bytes as u64));
    }
    let files = s.read("list the change files", log::files_query()).await?;
    let listed = Listed {
        kinds: files.strings("kind"),
        names: files.strings("name"),
        paths: files.strings("path"),
        ats: files.ints("at"),
    };
    let mut parts = Vec::new();
    let kinds: &[&str] = match opened.layout.reader() {
        // Delta's reader applies the deletion vectors, partitions and column mapping.
        true => &["cdc"],
        false => &["add", "remove", "cdc"],
    };
    for kind in kinds {
        let paths = listed.paths_of(kind);
        let dir = (*kind == "cdc").then_some("_change_data");
        let glob = parquet::source_glob(src.location, dir, &paths);
        if paths.is_empty() {
            continue;
        }
        let what = format!("read the columns of the files ({kind})");
        let present = s.read(&what, parquet::probe(&glob)).await?.names();
        let files = Files {
            kind,
            glob: &glob,
            present: &present,
        };
        parts.push(parquet::part(files, src.columns, &opened.layout));
    }
    if opened.layout.reader() {
        for ((kind, at), names) in listed.by_version() {
            parts.push(match kind.as_str() {
                "add" | "remove" => reader::files_part(&table, src.columns, &kind, at, &names),
                _ => reader::vector_part(&table, src.columns, &kind, at, &names),
            });
        }
    }
    s.view(
        "define the change rows (smelt_raw)",
        log::raw_view(src.columns, parts),
    )
    .await?;
    // As embedded counts them: a file whose rows come back is read where rows are marked.
    let sizes = files.ints("size");
    let counted: Vec<i64> = (0..listed.kinds.len())
        .filter(|&i| listed.kinds[i].as_deref() != Some("dvback"))
        .map(|i| sizes[i].unwrap_or(0))
        .collect();
    Ok((counted.len(), counted.iter().map(|b| *b as u64).sum()))
}

/// The files of a range, as listed by [`log::files_query`].
struct Listed {
    kinds: Vec<Option<String>>,
    names: Vec<Option<String>>,
    paths: Vec<Option<String>>,
    ats: Vec<Option<i64>>,
}

impl Listed {
    /// The paths of the files of `kind`.
    fn paths_of(&self, kind: &str) -> Vec<String> {
        self.kinds
            .iter()
            .zip(&self.paths)
            .filter(|(k, _)| k.as_deref() == Some(kind))
            .filter_map(|(_, p)| p.clone())
            .collect()
    }

    /// The names of the files Delta's reader reads, by kind and the version they are read
    /// at (a deletion vector's change: its commit).
    fn by_version(&self) -> BTreeMap<(String, i64), Vec<String>> {
        let mut out: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
        for i in 0..self.kinds.len() {
            let (Some(kind), Some(name), Some(at)) = (&self.kinds[i], &self.names[i], self.ats[i])
            else {
                continue;
            };
            if kind != "cdc" {
                out.entry((kind.clone(), at))
                    .or_default()
                    .push(name.clone());
            }
        }
        out
    }
}
