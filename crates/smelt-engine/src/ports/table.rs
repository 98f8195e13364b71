//! Tables a flow writes (silver, tombstones, rejects, bronze, targets).

use arrow::array::{BooleanArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use smelt_spec::TableName;

use super::{Aligned, OptimizePolicy, OptimizeStats, VacuumPlan, VacuumStats};
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
    /// Files kept with a new deletion vector (merge-on-read): neither added nor removed.
    pub files_marked: usize,
    /// Bytes of the files added, and of the deletion vectors written.
    pub bytes_written: u64,
    /// Stored rows removed by [`TableSink::stage_delete_where`].
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
    /// [`WatermarkStore::commit_values`], e.g. the files an ingest flow loaded.
    pub extra: Vec<(String, String)>,
    /// The table read and, for an Iceberg source, the snapshot id of `version`: lineage a
    /// format may record with the commit (Iceberg: in the snapshot summary).
    pub source: Option<WatermarkSource>,
}

/// Where a watermark's version comes from.
#[derive(Debug, Clone)]
pub struct WatermarkSource {
    /// The source table (`catalog.namespace.table` or `schema.table`).
    pub table: String,
    /// The snapshot id of the version read, when the source has snapshot ids (Iceberg).
    pub snapshot_id: Option<i64>,
}

impl WatermarkSource {
    /// Version `version` of `source`.
    pub fn of(source: &dyn super::ChangeSource, version: i64) -> Self {
        Self {
            table: source.table().to_string(),
            snapshot_id: source.snapshot_id(version),
        }
    }
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

/// Where a table keeps the watermarks and ledgers committed with its data (Delta: `txn`
/// actions and commit infos).
#[async_trait]
pub trait WatermarkStore: Send + Sync {
    /// The source version last applied by `app_id` (committed with the data).
    async fn watermark(&self, app_id: &str) -> Result<Option<i64>>;
    /// The values of entry `key` (as given in [`Watermark::extra`]) of every commit made,
    /// oldest first: a ledger (the files a flow loaded) that must outlive log cleanup and
    /// checkpoints.
    async fn commit_values(&self, key: &str) -> Result<Vec<String>>;
    /// The table's last commit, `None` when it does not exist yet (or the format keeps
    /// no commit information).
    async fn last_commit(&self) -> Result<Option<LastCommit>> {
        Ok(None)
    }
}

/// A table as inspection sees it (`smelt status`, a check): what it is, its schema and
/// version, its watermarks and ledgers. Read-only.
#[async_trait]
pub trait TableView: WatermarkStore {
    /// The table.
    fn table(&self) -> &TableName;
    /// Its schema, `None` when it does not exist yet.
    fn schema(&self) -> Option<SchemaRef>;
    /// Its version, `None` when it does not exist yet.
    fn version(&self) -> Option<i64>;
    /// The rows its data files hold that are marked deleted (Delta deletion vectors,
    /// Iceberg position deletes), and all the rows its data files hold; `None` when the
    /// format does not say.
    async fn deleted_rows(&self) -> Result<Option<(u64, u64)>> {
        Ok(None)
    }
}

/// A table a flow writes: an ingest flow's bronze, an append or replace_where target, a
/// rejects table. Rows are staged, then made visible with the watermark in one commit.
/// The extra abilities (properties, schema changes, overwrites, deletes by predicate,
/// expiry) are defaulted to "not supported", for formats that lack them.
#[async_trait]
pub trait TableSink: TableView {
    /// Creates the table (change feed on).
    async fn create(&mut self, schema: SchemaRef) -> Result<()>;
    /// Writes `rows` (the table's schema, keys `keys`), invisible until [`commit`]. A run
    /// may stage several times (one per partition of its keys); a key is staged at most
    /// once per run. `replaces[i]` says row `i` replaces a stored row of the same key,
    /// which a [`lookup`] at this version returned; otherwise its key is new (all false
    /// for a table without keys).
    ///
    /// [`commit`]: TableSink::commit
    /// [`lookup`]: KeyedTable::lookup
    async fn stage(
        &mut self,
        rows: RecordBatch,
        replaces: &BooleanArray,
        keys: &[String],
    ) -> Result<()>;
    /// Makes the staged rows visible — replacing the stored rows they replace, removing
    /// the deleted ones — and records `watermark`, in one commit. With nothing staged,
    /// commits the watermark alone.
    async fn commit(&mut self, keys: &[String], watermark: &Watermark) -> Result<WriteStats>;
    /// A table property (Delta: the table configuration), `None` when unset.
    fn property(&self, key: &str) -> Option<String> {
        let _ = key;
        None
    }
    /// Sets a table property in the next [`commit`](TableSink::commit).
    async fn set_property(&mut self, key: &str, value: &str) -> Result<()> {
        let _ = value;
        Err(unsupported(
            self.table(),
            &format!("table property `{key}`"),
        ))
    }
    /// Adds nullable columns, in the next [`commit`](TableSink::commit) (stored rows read
    /// them as NULL); [`TableSink::schema`] includes them from now on.
    async fn add_columns(&mut self, fields: Vec<arrow::datatypes::Field>) -> Result<()> {
        let _ = fields;
        Err(unsupported(self.table(), "adding columns"))
    }
    /// Rewrites every stored row with `schema` — the table's columns, some of a wider
    /// type — in a commit of its own that changes no data (`keys` orders the files).
    async fn widen(&mut self, schema: SchemaRef, keys: &[String]) -> Result<WriteStats> {
        let _ = (schema, keys);
        Err(unsupported(self.table(), "widening column types"))
    }
    /// Makes the next [`commit`](TableSink::commit) replace every stored row with the rows
    /// staged in this run (a rebuild, `--full-refresh`).
    async fn stage_overwrite(&mut self) -> Result<()> {
        Err(unsupported(self.table(), "overwriting"))
    }
    /// Removes the stored rows where `predicate` (over the table's columns) is true, in the
    /// next [`commit`](TableSink::commit), which also adds the rows staged in this run
    /// (Delta's `replaceWhere`).
    async fn stage_delete_where(&mut self, predicate: crate::predicate::Predicate) -> Result<()> {
        let _ = predicate;
        Err(unsupported(self.table(), "replace_where"))
    }
    /// Makes this run's commits remove the rows they replace or delete merge-on-read: marked
    /// deleted (Iceberg: a position-delete file) instead of rewriting the files holding them.
    async fn write_merge_on_read(&mut self) -> Result<()> {
        Err(unsupported(
            self.table(),
            "merge-on-read writing (`write_mode: merge_on_read`)",
        ))
    }
    /// Whether the table keeps a change feed (`on`, [`smelt_spec::Pipeline::change_feed`]):
    /// a table this run's commit creates has one only when `on`; an existing table
    /// without one gets it in the next commit, which writes change data already. A feed
    /// is never turned off here (readers outside the pipeline may use it). A format whose
    /// changes are its snapshots (Iceberg) has nothing to do.
    async fn keep_change_feed(&mut self, on: bool) -> Result<()> {
        let _ = on;
        Ok(())
    }
    /// Makes this run's merge-on-read commits write no change data: change-feed readers
    /// derive the changes from the rows newly marked deleted and the rows added
    /// (`change_data: derived`).
    async fn derive_change_data(&mut self) -> Result<()> {
        Err(unsupported(
            self.table(),
            "derived change data (`change_data: derived`)",
        ))
    }
    /// Rewrites the data files whose share of deleted rows or whose size passes `policy`,
    /// without their deleted rows, in a commit of its own that changes no data (change
    /// readers skip it).
    async fn optimize(&mut self, policy: &OptimizePolicy) -> Result<OptimizeStats> {
        let _ = policy;
        Err(unsupported(self.table(), "optimize"))
    }
    /// Deletes the files no version `plan` keeps needs: files the table no longer holds,
    /// that left it before the retention (and before `keep_from_version`), and files no
    /// version ever held that are older than the retention (a crashed run's).
    async fn vacuum(&mut self, plan: &VacuumPlan) -> Result<VacuumStats> {
        let _ = plan;
        Err(unsupported(self.table(), "vacuum"))
    }
    /// Deletes the rows whose timestamp column `column` is before `before_us` (µs since the
    /// epoch, UTC), in a commit of its own; returns how many went. Used to expire
    /// tombstones, where deleting early is safe to repeat.
    async fn expire(&mut self, column: &str, before_us: i64) -> Result<usize> {
        let _ = (column, before_us);
        Err(unsupported(self.table(), "expiring rows"))
    }
}

/// A table with keys, as apply flows write it (silver, tombstones): rows looked up and
/// deleted by key.
#[async_trait]
pub trait KeyedTable: TableSink {
    /// Stored rows whose key equals a row of `keys` (NULL-safe), with the columns
    /// `columns`. Row order is unspecified.
    async fn lookup(&self, keys: RecordBatch, columns: &[String]) -> Result<RecordBatch>;
    /// The stored rows of [`lookup`](KeyedTable::lookup) lined up with the rows of
    /// `keys`: per key row, whether a stored row has its key and that row's `columns`
    /// (when stored rows share a key, the later one). By default, looked up and matched
    /// by key; a table that learns the matches while looking can skip that.
    async fn lookup_aligned(&self, keys: RecordBatch, columns: &[String]) -> Result<Aligned> {
        let found = self.lookup(keys.clone(), columns).await?;
        Aligned::by_key(&keys, &found, columns)
    }
    /// Removes the stored rows whose key equals a row of `keys` (the key columns), invisible
    /// until [`commit`](TableSink::commit). A [`lookup`](KeyedTable::lookup) at this
    /// version returned those rows.
    async fn stage_deletes(&mut self, keys: RecordBatch) -> Result<()>;
}

/// Every ability a flow may use on a table it writes: what [`Lake::table`] returns.
///
/// [`Lake::table`]: crate::ports::Lake::table
pub trait LakeTable: KeyedTable {}

impl<T: KeyedTable + ?Sized> LakeTable for T {}

/// The error of an ability a table format lacks.
fn unsupported(table: &TableName, what: &str) -> crate::EngineError {
    crate::EngineError::user(
        format!("`{table}`: {what} is not supported by this table format"),
        "use a Delta table for this flow",
    )
}
