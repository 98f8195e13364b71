//! Files in and out: the landing folders ingest and replace_where flows read, and the
//! targets export flows write. `smelt-ingest` implements them (local folders and
//! object-store prefixes, CSV, JSON lines and Parquet); the engine runs the flows.
//!
//! They are a port of their own, not part of [`Lake`](super::Lake): a landing folder or an
//! export target is not a table of the lake and may be anywhere.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use smelt_spec::{Compression, ExportFlow, IngestFlow};

use crate::Result;

/// A file of a landing folder, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandingFile {
    /// Where the adapter finds it: a local path, or a path in the folder's object store.
    pub location: String,
    /// Its path below the folder, with `/` separators.
    pub relative: String,
    /// Its URL (`file:///…`, `s3://…`): the `_datasource` value and its identity.
    pub url: String,
    /// Size in bytes when listed.
    pub size: u64,
    /// Modification time when listed, µs since the epoch (UTC).
    pub modified_us: i64,
    /// Values of Hive-style partition folders (`export_timestamp=2026-07-21 10:00:00+09:00/`)
    /// on its path, percent-decoded, outermost first.
    pub partitions: Vec<(String, String)>,
}

/// Rows read from a file: columns named as the file names them.
#[derive(Debug)]
pub struct RawRows {
    /// The columns (text, except Parquet columns kept in their type).
    pub batch: RecordBatch,
    /// 1-based row number of each row in its file.
    pub rows: Vec<i64>,
    /// Per row, fields that have no column name (a CSV line with more fields than
    /// columns), as a JSON object text; `None` when no row has any.
    pub extra: Option<Vec<Option<String>>>,
}

/// A row that cannot be parsed at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// 1-based line in the file.
    pub line: i64,
    /// The line's text, as far as it could be read.
    pub raw: String,
    /// What is wrong.
    pub reason: String,
}

/// What reading a file yields, in file order.
#[derive(Debug)]
pub enum FileRows {
    /// Rows, with the bytes of the file read so far (for progress).
    Rows(RawRows, u64),
    /// A line that does not parse.
    Malformed(Malformed),
}

/// The landing folder of one flow.
#[async_trait]
pub trait Landing: Send + Sync {
    /// The files matching the flow's pattern, sorted by path; hidden files and folders
    /// (`.x`, `_x`: files still being written) are skipped.
    async fn list(&self) -> Result<Vec<LandingFile>>;
    /// The size and modification time (µs) of `file` now, `None` when it is gone.
    async fn stat(&self, file: &LandingFile) -> Result<Option<(u64, i64)>>;
    /// Reads the first `file.size` bytes of `file` as the flow's format says, a bounded
    /// batch at a time. Dropping the stream stops the reading.
    fn read(&self, file: &LandingFile) -> BoxStream<'static, Result<FileRows>>;
}

/// What an export flow has exported, saved next to the exports after each run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExportState {
    /// Source version exported through.
    pub version: Option<i64>,
    /// With `changed_by: <column>`: the greatest value exported, as a SQL literal.
    pub column_max: Option<String>,
    /// Renames (hidden name → final name) of an export whose files are written but not
    /// all visible yet.
    #[serde(default)]
    pub pending: Vec<(String, String)>,
    /// The run that saved this state.
    #[serde(default)]
    pub run_id: Option<String>,
    /// When it was saved, ms since the epoch.
    #[serde(default)]
    pub at_ms: Option<i64>,
    /// That run's report as JSON, for the event-log row a crash may lose.
    #[serde(default)]
    pub report: Option<String>,
    /// Which save this is; 0 before the first.
    #[serde(skip)]
    pub number: u64,
}

/// A file being written to an export target.
#[async_trait]
pub trait ExportFile: Send {
    /// Writes rows.
    async fn write(&mut self, batch: &RecordBatch) -> Result<()>;
    /// Finishes the file.
    async fn close(self: Box<Self>) -> Result<()>;
}

/// The folder an export flow writes to, and its saved state.
#[async_trait]
pub trait ExportTarget: Send + Sync {
    /// The state saved last (`ExportState::default()` before the first save).
    async fn load(&self) -> Result<ExportState>;
    /// The number of the last save, 0 when there is none.
    async fn latest(&self) -> Result<u64>;
    /// Saves `state` as the save after `state.number`, only if no other run saved that one
    /// first (a user error naming the flow otherwise), and sets `state.number`.
    async fn save(&self, state: &mut ExportState) -> Result<()>;
    /// Makes the files of `state.pending` visible (a rename already done is skipped), saves
    /// the state without them, and removes the hidden files of runs that never published.
    async fn publish(&self, state: &mut ExportState) -> Result<()>;
    /// Starts the file at `relative` (below the target).
    async fn create(
        &self,
        relative: &str,
        schema: SchemaRef,
        compression: Compression,
    ) -> Result<Box<dyn ExportFile>>;
    /// The size of the file at `relative`, if it exists.
    async fn size(&self, relative: &str) -> Option<u64>;
}

/// Where landing folders and export targets are opened.
#[async_trait]
pub trait FileStores: Send + Sync {
    /// The landing of `flow`.
    fn landing(&self, flow: &IngestFlow) -> Result<Box<dyn Landing>>;
    /// Whether the landing of `flow` is a local folder that does not exist yet.
    fn landing_missing(&self, flow: &IngestFlow) -> bool {
        flow.url.is_none() && !flow.folder.exists()
    }
    /// The export target of the flow `name`; `create` makes a local folder that does not
    /// exist yet (else that is a user error).
    async fn export_target(
        &self,
        name: &str,
        flow: &ExportFlow,
        create: bool,
    ) -> Result<Box<dyn ExportTarget>>;
    /// Whether the target of `flow` is a local folder that does not exist yet.
    fn target_missing(&self, flow: &ExportFlow) -> bool {
        flow.url.is_none() && !flow.folder.exists()
    }
}
