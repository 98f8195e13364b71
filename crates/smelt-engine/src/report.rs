//! The run report (DESIGN §3.9): one record per flow run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What one flow run did (or, for `smelt plan`, would do).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FlowReport {
    /// Flow name.
    pub flow: String,
    /// Flow kind: `apply`, `ingest`, `append`, `replace_where` or `export`.
    pub kind: String,
    /// Bronze table.
    pub from: String,
    /// Silver table.
    pub into: String,
    /// Run id (same for every flow of one run).
    pub run_id: String,
    /// `applied`, `up_to_date`, `planned` (dry run) or `failed` (event log only).
    pub status: String,
    /// How the source was read: `snapshot` (first run), `incremental`, `rebuild`
    /// (`--full-refresh`), `replay` (`--since`), or `batch` (replace_where).
    pub mode: String,
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
    /// Milliseconds per phase, in order.
    pub phases_ms: Vec<(String, u64)>,
}

impl FlowReport {
    /// Total cast failures.
    pub fn cast_failures_total(&self) -> usize {
        self.cast_failures.values().sum()
    }
}

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
