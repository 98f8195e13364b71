//! Table maintenance (`smelt optimize`, `smelt vacuum`): what is asked of a table and what
//! it did.

use serde::{Deserialize, Serialize};

/// When [`optimize`](crate::ports::TableSink::optimize) rewrites a data file, and how.
#[derive(Debug, Clone)]
pub struct OptimizePolicy {
    /// A file whose share of rows marked deleted is at least this (0 to 1) is rewritten
    /// without them.
    pub deleted_fraction: f64,
    /// Files with fewer live rows than this are small; two or more are packed together.
    /// `None`: the table's default (a quarter of the rows per file it writes).
    pub small_file_rows: Option<usize>,
    /// The table's primary key (empty when it has none): rewritten rows are written in its
    /// order, so that each file holds a key range of its own.
    pub keys: Vec<String>,
    /// Rewrite every file of a partition whose files' key ranges overlap, in key order
    /// (needs `keys`).
    pub cluster: bool,
    /// Memory for the rows being put in key order; past it they are sorted in runs
    /// spilled to local disk. `None`: no limit.
    pub memory_limit: Option<u64>,
}

impl Default for OptimizePolicy {
    fn default() -> Self {
        Self {
            deleted_fraction: 0.2,
            small_file_rows: None,
            keys: Vec::new(),
            cluster: false,
            memory_limit: None,
        }
    }
}

/// What an optimize did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OptimizeStats {
    /// The table version it committed; `None` when nothing passed the thresholds.
    pub version: Option<i64>,
    /// Data files rewritten (removed).
    pub files_removed: usize,
    /// Data files written.
    pub files_added: usize,
    /// Rows marked deleted that the rewrite dropped from the files.
    pub rows_purged: u64,
    /// Live rows the rewritten files held (and the new ones hold).
    pub rows_rewritten: u64,
    /// Bytes of the files written.
    pub bytes_written: u64,
    /// Partitions (the whole table, unpartitioned) whose files were rewritten in key order
    /// because their key ranges overlapped.
    #[serde(default)]
    pub partitions_clustered: usize,
    /// Bytes the key-order sort spilled to local disk.
    #[serde(default)]
    pub bytes_spilled: u64,
}

/// What [`vacuum`](crate::ports::TableSink::vacuum) may delete.
#[derive(Debug, Clone, Copy)]
pub struct VacuumPlan {
    /// Files that left the table less than this long ago (ms) are kept.
    pub retain_ms: i64,
    /// The oldest version a flow reading the table has still to read (its watermark + 1):
    /// every file that version or a later one needs is kept, however old.
    pub keep_from_version: Option<i64>,
    /// List what would go; delete nothing.
    pub dry_run: bool,
}

/// What a vacuum deleted (or would, on a dry run).
#[derive(Debug, Clone, Default, Serialize)]
pub struct VacuumStats {
    /// Files deleted (paths in the table).
    pub files: Vec<String>,
    /// Files that left the table after this time (ms since the epoch) were kept.
    pub kept_after_ms: i64,
}
