//! Bronze changes: the port a table format implements to be read by flows.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use futures::stream::BoxStream;
use smelt_spec::TableName;

use crate::Result;

/// What reading the bronze changes of one run covered.
#[derive(Debug, Clone, Default)]
pub struct ChangeSet {
    /// Data files read.
    pub files_read: usize,
    /// Bytes of the data files read.
    pub bytes_read: u64,
    /// Bronze data files whose rows were deleted without change data (whole-file deletes
    /// such as `TRUNCATE`, new deletion vectors): deletes, which apply flows ignore unless
    /// they apply bronze deletes, so they are not read.
    pub skipped_delete_files: usize,
}

/// Reads bronze changes. Pinned to the bronze version seen when it was opened, so one
/// run reads one consistent range.
#[async_trait]
pub trait ChangeSource: Send + Sync {
    /// The bronze table.
    fn table(&self) -> &TableName;
    /// The bronze version this source is pinned to (the run's `v`).
    fn version(&self) -> i64;
    /// Bronze columns (without change metadata).
    fn schema(&self) -> SchemaRef;
    /// What [`ChangeSource::read`]`(after)` covers, from the log alone: the data files and
    /// their bytes (what a run plans its memory with), and the delete files it leaves out.
    async fn change_set(&self, after: Option<i64>) -> Result<ChangeSet>;
    /// Bytes of the data files [`ChangeSource::read`]`(after)` reads: what a run plans its
    /// memory with.
    async fn bytes_to_read(&self, after: Option<i64>) -> Result<u64> {
        Ok(self.change_set(after).await?.bytes_read)
    }
    /// The changes in `(after, version]`, in input order (commit version, file order, row
    /// order), a bounded batch at a time: bronze columns followed by the change metadata
    /// columns (`smelt_core::change::metadata_fields`). `after = None` reads the snapshot
    /// at `version`, each row stamped with the version and time of the commit that added
    /// its file. Nothing is read before the stream is polled; dropping it stops the read.
    fn read(&self, after: Option<i64>) -> BoxStream<'_, Result<RecordBatch>>;
    /// The commits in `(after, version]` that rewrite rows (remove data files: update,
    /// delete, merge, overwrite), as (version, operation). A source that is only appended
    /// to has none.
    async fn rewrites(&self, after: i64) -> Result<Vec<(i64, String)>> {
        let _ = after;
        Ok(Vec::new())
    }
    /// The table format's own id of `version`, where it has one besides the version
    /// (Iceberg: the id of the snapshot with that sequence number), for `smelt status`.
    fn snapshot_id(&self, version: i64) -> Option<i64> {
        let _ = version;
        None
    }
    /// Leaves the commits `versions` out of every later [`ChangeSource::read`].
    fn skip_versions(&self, versions: &[i64]) {
        let _ = versions;
    }
    /// The last version committed at or before `timestamp_us` (µs since the epoch), `None`
    /// when the first commit is later: how a replay window (`--since`) becomes versions.
    async fn version_at(&self, timestamp_us: i64) -> Result<Option<i64>> {
        let _ = timestamp_us;
        Err(crate::EngineError::user(
            format!("`{}` cannot be read as of a time", self.table()),
            "run without `--since`/`--until`",
        ))
    }
    /// Pins the source to an earlier `version` (the end of a replay window); a later one
    /// keeps the version it has.
    fn pin(&mut self, version: i64) -> Result<()> {
        let _ = version;
        Err(crate::EngineError::user(
            format!("`{}` cannot be read up to an earlier version", self.table()),
            "run without `--until`",
        ))
    }
}
