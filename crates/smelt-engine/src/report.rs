//! The run report (DESIGN §3.9): one record per flow run.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use smelt_spec::FlowKind;

/// What one flow run did (or, for `smelt plan`, would do).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FlowReport {
    /// Flow name.
    pub flow: String,
    /// Flow kind: `apply`, `ingest`, `append`, `replace_where` or `export`.
    pub kind: ReportKind,
    /// Bronze table.
    pub from: String,
    /// Silver table.
    pub into: String,
    /// Run id (same for every flow of one run).
    pub run_id: String,
    /// `applied`, `up_to_date`, `planned` (dry run), `no_columns` (ingest) or `failed`
    /// (event log only).
    pub status: ReportStatus,
    /// How the source was read: `snapshot` (first run), `incremental`, `rebuild`
    /// (`--full-refresh`), `replay` (`--since`), or `batch` (replace_where); empty for a
    /// failed run.
    pub mode: ReadMode,
    /// Watermark before the run: bronze versions after it were read (`None` = none applied yet).
    pub from_version: Option<i64>,
    /// Bronze version read up to (inclusive).
    pub to_version: i64,
    /// Change rows read.
    pub changes_read: usize,
    /// Bronze columns silver does not have (added with `schema_evolution: add_new_columns`).
    pub new_columns: Vec<String>,
    /// Columns this run added to silver.
    pub columns_added: Vec<String>,
    /// This run rewrote silver with wider column types (`widen_types`).
    pub types_widened: bool,
    /// Changes ignored by kind (update pre-images, bronze deletes).
    pub ignored: usize,
    /// Bronze data files removed without change data (e.g. `TRUNCATE`): deletes, ignored
    /// without reading them.
    pub delete_files_ignored: usize,
    /// Changes dropped because a later change of the same key won.
    pub duplicates_collapsed: usize,
    /// Changes not newer than silver (guard).
    pub stale: usize,
    /// Keys inserted.
    pub inserted: usize,
    /// Keys updated with different data.
    pub updated: usize,
    /// Keys with a newer change but identical data (sequence refreshed only).
    pub unchanged: usize,
    /// Keys deleted from silver (by `apply_as_deletes`, bronze deletes, or `where`).
    pub deleted: usize,
    /// Keys whose latest state fails `where` (removed from silver where stored).
    pub filtered: usize,
    /// Changes matching `apply_as_truncates`.
    pub truncates: usize,
    /// This run emptied silver as of its greatest truncate.
    pub truncated: bool,
    /// Tombstones written: deleted keys, kept with the sequence of their delete.
    pub tombstones_written: usize,
    /// Tombstones older than `tombstone_retention`, removed after the run.
    pub tombstones_expired: usize,
    /// Changes rejected (e.g. NULL in a NOT NULL key column).
    pub rejected: usize,
    /// Values that could not be cast, per silver column (always counted).
    pub cast_failures: BTreeMap<String, usize>,
    /// What cast failures did (`on_cast_error`): `null`, `quarantine` or `fail`.
    pub on_cast_error: String,
    /// Changes that failed each expectation (`expect:`), whatever `on_violation` did.
    pub expectations: BTreeMap<String, usize>,
    /// Changes left out by `on_violation: drop`.
    pub dropped: usize,
    /// Rows written to the rejects table (cast failures, expectations, sequence conflicts).
    pub quarantined: usize,
    /// Keys whose latest changes share a sequence but differ in data.
    pub sequence_conflicts: usize,
    /// Bronze data files read.
    pub files_read: usize,
    /// Bronze bytes read.
    pub bytes_read: u64,
    /// Silver files written.
    pub files_written: usize,
    /// Silver files rewritten (removed).
    pub files_removed: usize,
    /// Silver files kept with a new deletion vector marking the rows replaced
    /// (merge-on-read).
    pub files_marked: usize,
    /// Silver bytes written.
    pub bytes_written: u64,
    /// Key partitions the changes were applied in (more than one when they would not fit
    /// in the memory limit at once).
    pub partitions: usize,
    /// Append: source versions left out because they rewrite rows (`on_rewrite: skip`).
    pub skipped_versions: Vec<i64>,
    /// Replace where: the predicate, placeholders filled in.
    pub predicate: Option<String>,
    /// Replace where: target rows the batch replaced (removed).
    pub rows_replaced: usize,
    /// Export: the partition folder written.
    pub partition: Option<String>,
    /// Ingest: files found in the folder.
    pub files_found: usize,
    /// Ingest: files new since the last run (or changed, with `on_changed_file: reload`).
    pub files_new: usize,
    /// Ingest: files loaded before that have changed since (URLs).
    pub files_changed: Vec<String>,
    /// Ingest: new files left for the next run (`max_files_per_run`).
    pub files_pending: usize,
    /// Ingest, append, replace_where, export: rows written.
    pub rows_written: usize,
    /// Ingest: rows that could not be parsed, quarantined with file, line and reason.
    pub malformed: usize,
    /// Ingest: rows with a value kept in the rescued-data column.
    pub rescued: usize,
    /// Silver version after the run (`None` if nothing exists yet).
    pub silver_version: Option<i64>,
    /// Apply flows with `optimize: auto`: what the optimize after the commit rewrote, when
    /// a file passed the thresholds (silver and tombstones together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimized: Option<crate::ports::OptimizeStats>,
    /// Milliseconds per phase, in order.
    pub phases_ms: Vec<(String, u64)>,
}

impl FlowReport {
    /// A report's head: the flow, its kind, what it reads and writes, the run id; the rest
    /// empty.
    pub fn head(flow: &str, kind: ReportKind, from: String, into: String, run_id: &str) -> Self {
        FlowReport {
            flow: flow.to_string(),
            kind,
            from,
            into,
            run_id: run_id.to_string(),
            ..FlowReport::default()
        }
    }

    /// Total cast failures.
    pub fn cast_failures_total(&self) -> usize {
        self.cast_failures.values().sum()
    }
}

/// Generates `as_str` and `Display` (the serialized text) for a report enum.
macro_rules! report_text {
    ($ty:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        impl $ty {
            /// The text the report stores (its JSON value).
            pub fn as_str(&self) -> &'static str {
                match self {
                    $($ty::$variant => $text,)*
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// What a flow run did: [`FlowReport::status`].
///
/// Serialized as snake_case text; [`ReportStatus::Unknown`] is the empty string, and any
/// text this version does not know (a report written by another version) reads as it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportStatus {
    /// The run wrote its changes (`applied`).
    Applied,
    /// Nothing new to read (`up_to_date`).
    UpToDate,
    /// A dry run (`smelt plan`): what the run would do (`planned`).
    Planned,
    /// Ingest: no file named a column, nothing was created (`no_columns`).
    NoColumns,
    /// The run failed (event log only) (`failed`).
    Failed,
    /// Not set (the empty string), or text this version does not know.
    #[default]
    #[serde(rename = "", other)]
    Unknown,
}

report_text!(ReportStatus {
    Applied => "applied",
    UpToDate => "up_to_date",
    Planned => "planned",
    NoColumns => "no_columns",
    Failed => "failed",
    Unknown => "",
});

/// The kind of flow a report is of: [`FlowReport::kind`], as written in the pipeline file.
///
/// Serialized as snake_case text; [`ReportKind::Unknown`] is the empty string, and any
/// text this version does not know reads as it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    /// `apply`: bronze changes applied to silver.
    Apply,
    /// `ingest`: files loaded into bronze.
    Ingest,
    /// `append`: new source rows appended to a table.
    Append,
    /// `replace_where`: a batch replacing the target rows matching a predicate.
    ReplaceWhere,
    /// `export`: table changes written to files.
    Export,
    /// Not set (the empty string), or text this version does not know.
    #[default]
    #[serde(rename = "", other)]
    Unknown,
}

report_text!(ReportKind {
    Apply => "apply",
    Ingest => "ingest",
    Append => "append",
    ReplaceWhere => "replace_where",
    Export => "export",
    Unknown => "",
});

impl From<&FlowKind> for ReportKind {
    fn from(kind: &FlowKind) -> Self {
        match kind {
            FlowKind::Apply(_) => ReportKind::Apply,
            FlowKind::Ingest(_) => ReportKind::Ingest,
            FlowKind::Append(_) => ReportKind::Append,
            FlowKind::ReplaceWhere(_) => ReportKind::ReplaceWhere,
            FlowKind::Export(_) => ReportKind::Export,
        }
    }
}

/// How a flow run read its source: [`FlowReport::mode`].
///
/// Serialized as snake_case text; [`ReadMode::Unknown`] is the empty string (a failed
/// run's report), and any text this version does not know reads as it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadMode {
    /// The whole source, on a first run (`snapshot`).
    Snapshot,
    /// The source versions after the watermark (`incremental`).
    Incremental,
    /// The whole source again, with `--full-refresh` (`rebuild`).
    Rebuild,
    /// The source versions of a `--since` window (`replay`).
    Replay,
    /// One batch (replace_where) (`batch`).
    Batch,
    /// Not known (the empty string: a failed run), or text this version does not know.
    #[default]
    #[serde(rename = "", other)]
    Unknown,
}

report_text!(ReadMode {
    Snapshot => "snapshot",
    Incremental => "incremental",
    Rebuild => "rebuild",
    Replay => "replay",
    Batch => "batch",
    Unknown => "",
});

/// One row of the lake's event log: a flow run, successful or not.
#[derive(Debug, Clone, Serialize)]
pub struct FlowEvent {
    /// What the run did (for a failed run: what was known when it failed).
    pub report: FlowReport,
    /// When the flow started (µs since the epoch, UTC).
    pub started_at_us: i64,
    /// When it finished.
    pub finished_at_us: i64,
    /// The error, for a failed run.
    pub error: Option<String>,
}
