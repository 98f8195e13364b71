//! What the page shows, as `smelt docs --json` prints it: gathered by the CLI from the
//! pipeline file, the lake and the event log, drawn by [`crate::page`].

use serde::{Deserialize, Serialize};

/// A pipeline, its lake and its history.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Docs {
    /// The pipeline file.
    pub pipeline: String,
    /// The lake (folder or URL).
    pub lake: String,
    /// The engine the file runs on (`embedded`, `spark`).
    pub engine: String,
    /// When the page was made (UTC, `YYYY-MM-DD HH:MM:SS`).
    pub generated_at: String,
    /// The flows, in the file's order.
    pub flows: Vec<FlowDoc>,
    /// Every table a flow reads or writes, sources first.
    pub tables: Vec<TableDoc>,
}

/// One flow.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FlowDoc {
    /// Its name.
    pub name: String,
    /// `apply (SCD1)`, `apply (SCD2)`, `append`, `replace_where`, `ingest`, `export`.
    pub kind: String,
    /// What it reads: tables (`schema.table`, `catalog.ns.table`) or a landing folder.
    pub sources: Vec<String>,
    /// What it writes: a table, or an export folder.
    pub target: String,
    /// Key columns (apply flows).
    pub keys: Vec<String>,
    /// Sequence columns (apply flows).
    pub sequence_by: Vec<String>,
    /// The options the pipeline file sets beyond source, target, keys and sequence, as
    /// written there.
    pub options: Vec<(String, String)>,
    /// The source version applied so far.
    pub watermark: Option<i64>,
    /// The source's version now.
    pub source_version: Option<i64>,
    /// How far behind the flow is, in `behind_unit`.
    pub behind: Option<i64>,
    /// `versions` or `files` (ingest).
    pub behind_unit: String,
    /// Why the flow cannot run, if so (`smelt status`'s problem).
    pub problem: Option<String>,
    /// Every run of the flow in the event log, oldest first.
    pub runs: Vec<RunDoc>,
    /// What the runs rejected, quarantined and kept.
    pub quality: Quality,
}

impl FlowDoc {
    /// The last run's status: `applied`, `up_to_date`, `failed`, … or `never run`.
    pub fn state(&self) -> &str {
        self.runs.last().map_or("never_run", |r| r.status.as_str())
    }
}

/// One run of a flow, from the event log.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunDoc {
    pub run_id: String,
    pub status: String,
    /// UTC, `YYYY-MM-DD HH:MM:SS`.
    pub started_at: String,
    pub duration_ms: i64,
    /// Change rows read (ingest and append: rows written).
    pub rows_in: i64,
    /// Keys inserted and updated (ingest, append: rows written).
    pub applied: i64,
    pub unchanged: i64,
    pub deleted: i64,
    /// Changes rejected or quarantined.
    pub rejected: i64,
    /// The error of a failed run, with its hint.
    pub error: Option<String>,
}

/// A flow's data quality over its runs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Quality {
    /// Values that could not be cast, per run and column.
    pub cast_failures: Vec<Count>,
    /// Changes failing each expectation, per run.
    pub expectations: Vec<Count>,
    /// Rows written to the rejects table, over all runs.
    pub quarantined: i64,
    /// Keys whose latest changes shared a sequence but differed, over all runs.
    pub sequence_conflicts: i64,
    /// Tombstones written, over all runs.
    pub tombstones: i64,
    /// The rejects table, where the flow has one.
    pub rejects_table: Option<String>,
    /// A few rows of it, newest first, each as column/value pairs.
    pub samples: Vec<Vec<(String, String)>>,
}

/// A count of one run (`run`: its start time) for one column or expectation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Count {
    pub run: String,
    pub name: String,
    pub n: i64,
}

/// One table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TableDoc {
    /// `schema.table` or `catalog.namespace.table`.
    pub name: String,
    /// `delta` or `iceberg`.
    pub format: String,
    /// Where it is stored.
    pub location: String,
    /// Whether it exists yet.
    pub exists: bool,
    /// Columns and their types.
    pub columns: Vec<(String, String)>,
    pub rows: Option<i64>,
    pub files: Option<i64>,
    pub bytes: Option<i64>,
    /// The share of stored rows marked deleted (merge-on-read).
    pub deleted_fraction: Option<f64>,
    /// `copy_on_write` or `merge_on_read`, for an apply flow's target.
    pub write_mode: Option<String>,
    /// Whether the table keeps a change feed (Delta's `delta.enableChangeDataFeed`).
    pub change_feed: Option<bool>,
    /// The last versions, newest first.
    pub history: Vec<VersionDoc>,
}

/// One version of a table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VersionDoc {
    pub version: i64,
    /// UTC, `YYYY-MM-DD HH:MM:SS`.
    pub timestamp: String,
    pub operation: String,
}

/// The id of the section of `name`, of `kind` (`flow`, `table`).
pub fn anchor(kind: &str, name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{kind}-{safe}")
}
