//! Tables a flow writes (silver, tombstones, rejects, bronze, targets).

use arrow::array::{BooleanArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use smelt_spec::TableName;

use crate::Result;

/// What a silver write did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WriteStats {
    /// The new silver version.
    pub version: i64,
    /// Files added.
    pub files_added: usize,
    /// Files removed (rewritten).
    pub files_removed: usize,
    /// Bytes of the files added.
    pub bytes_written: u64,
    /// Stored rows removed by [`SilverTable::stage_delete_where`].
    pub rows_removed: usize,
}

/// The watermark to commit with the data: bronze version `version` is applied by `app_id`.
#[derive(Debug, Clone)]
pub struct Watermark {
    /// One per flow, e.g. `smelt/product2`.
    pub app_id: String,
    /// The bronze version applied.
    pub version: i64,
    /// Run id, recorded in the commit for lineage.
    pub run_id: String,
    /// The flow's run report as JSON, recorded in the commit so that an event-log row lost
    /// to a crash can be written later.
    pub report: Option<String>,
    /// More entries (key, JSON text) recorded with the commit and read back by
    /// [`SilverTable::commit_values`], e.g. the files an ingest flow loaded.
    pub extra: Vec<(String, String)>,
}

/// The last commit of a table, as the event log and `smelt status` need it.
#[derive(Debug, Clone)]
pub struct LastCommit {
    /// Commit time, ms since the epoch.
    pub at_ms: i64,
    /// The smelt run that made it, if smelt did.
    pub run_id: Option<String>,
    /// The flow's run report as JSON, as committed.
    pub report: Option<String>,
}

/// A table a flow writes: silver, its tombstones and rejects, an ingest flow's bronze, an
/// append or replace_where target.
#[async_trait]
pub trait SilverTable: Send + Sync {
    /// The silver table.
    fn table(&self) -> &TableName;
    /// Its schema, `None` when it does not exist yet.
    fn schema(&self) -> Option<SchemaRef>;
    /// Its version, `None` when it does not exist yet.
    fn version(&self) -> Option<i64>;
    /// The bronze version last applied by `app_id` (committed with the data).
    async fn watermark(&self, app_id: &str) -> Result<Option<i64>>;
    /// Creates the table (change feed on).
    async fn create(&mut self, schema: SchemaRef) -> Result<()>;
    /// Stored rows whose key equals a row of `keys` (NULL-safe), with the silver columns
    /// `columns`. Row order is unspecified.
    async fn lookup(&self, keys: RecordBatch, columns: &[String]) -> Result<RecordBatch>;
    /// Writes `rows` (silver schema, keys `keys`), invisible until [`commit`]. A run may
    /// stage several times (one per partition of its keys); a key is staged at most once
    /// per run. `replaces[i]` says row `i` replaces a stored row of the same key, which
    /// a [`lookup`] at this version returned; otherwise its key is new.
    ///
    /// [`commit`]: SilverTable::commit
    /// [`lookup`]: SilverTable::lookup
    async fn stage(
        &mut self,
        rows: RecordBatch,
        replaces: &BooleanArray,
        keys: &[String],
    ) -> Result<()>;
    /// A table property (Delta: the table configuration), `None` when unset.
    fn property(&self, key: &str) -> Option<String>;
    /// Sets a table property in the next [`commit`].
    ///
    /// [`commit`]: SilverTable::commit
    async fn set_property(&mut self, key: &str, value: &str) -> Result<()>;
    /// Adds nullable columns, in the next [`commit`] (stored rows read them as NULL);
    /// [`SilverTable::schema`] includes them from now on.
    ///
    /// [`commit`]: SilverTable::commit
    async fn add_columns(&mut self, fields: Vec<arrow::datatypes::Field>) -> Result<()>;
    /// Rewrites every stored row with `schema` — the table's columns, some of a wider
    /// type — in a commit of its own that changes no data (`keys` orders the files).
    async fn widen(&mut self, schema: SchemaRef, keys: &[String]) -> Result<WriteStats>;
    /// Makes the next [`commit`] replace every stored row with the rows staged in this
    /// run (a rebuild, `--full-refresh`).
    ///
    /// [`commit`]: SilverTable::commit
    async fn stage_overwrite(&mut self) -> Result<()>;
    /// Removes the stored rows whose key equals a row of `keys` (the key columns), invisible
    /// until [`commit`]. A [`lookup`] at this version returned those rows.
    ///
    /// [`commit`]: SilverTable::commit
    /// [`lookup`]: SilverTable::lookup
    async fn stage_deletes(&mut self, keys: RecordBatch) -> Result<()>;
    /// Removes the stored rows where `predicate` (over the table's columns) is true, in the
    /// next [`commit`], which also adds the rows staged in this run (Delta's
    /// `replaceWhere`).
    ///
    /// [`commit`]: SilverTable::commit
    async fn stage_delete_where(&mut self, predicate: crate::predicate::Predicate) -> Result<()> {
        let _ = predicate;
        Err(crate::EngineError::Internal(
            "this table does not support replace_where".into(),
        ))
    }
    /// Makes the staged rows visible — replacing the stored rows they replace, removing
    /// the deleted ones — and records `watermark`, in one commit. With nothing staged,
    /// commits the watermark alone.
    async fn commit(&mut self, keys: &[String], watermark: &Watermark) -> Result<WriteStats>;
    /// The values of entry `key` (as given in [`Watermark::extra`]) of every commit made,
    /// oldest first: a ledger (the files a flow loaded) that must outlive log cleanup and
    /// checkpoints.
    async fn commit_values(&self, key: &str) -> Result<Vec<String>>;
    /// Deletes the rows whose timestamp column `column` is before `before_us` (µs since the
    /// epoch, UTC), in a commit of its own; returns how many went. Used to expire
    /// tombstones, where deleting early is safe to repeat.
    async fn expire(&mut self, column: &str, before_us: i64) -> Result<usize>;
    /// The table's last commit, `None` when it does not exist yet.
    async fn last_commit(&self) -> Result<Option<LastCommit>> {
        Ok(None)
    }
}
