//! The Delta tables smelt writes — silver, tombstones, rejects, bronze, targets: the
//! guard's lookup and the copy-on-write upsert that commits data, change data and
//! watermark in one Delta commit (DESIGN §3.8).
//!
//! smelt reads and rewrites silver's files itself instead of running a delta-rs MERGE
//! (DESIGN §9): the keys being written are hashed once
//! ([`KeyIndex`](smelt_core::dedupe::KeyIndex)), every file is probed on its key columns
//! alone, and only files holding one of those keys are decoded and rewritten — file by
//! file, on all cores, so memory stays bounded by a few files whatever the table's size.
//!
//! This module holds the [`DeltaLakeTable`] handle, what it stages and the engine port; the
//! work is done in:
//!
//! * `lookup`: the guard's lookup (probing files on their key columns), skipping files
//!   whose key statistics hold none of the keys (`prune`);
//! * `write`: writing data files, staging rows, the task pool;
//! * `rewrite`: copy-on-write removal of stored rows (upserts, deletes, replace_where,
//!   expiry);
//! * `mark`: merge-on-read removal (deletion vectors);
//! * `schema`: schema evolution (new columns, wider types);
//! * `compact`: folding small files;
//! * `maintain`: `optimize` and `vacuum`;
//! * `cluster`: rewriting a partition's files in key order across them (`optimize
//!   --cluster`), through DataFusion's spilling sort;
//! * `commit`: assembling and making the commit, creating the table;
//! * `watermark`: the `txn` watermark and the commit info beside it, read back (the last
//!   commit).

mod batches;
mod cluster;
mod commit;
mod compact;
mod found;
mod lookup;
mod maintain;
mod mark;
mod prune;
mod rewrite;
mod schema;
mod watermark;
mod write;

use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::{Field, SchemaRef};
use async_trait::async_trait;
use deltalake::DeltaTable;
use deltalake::kernel::{Add, AddCDCFile, Remove};
use smelt_engine::ports::{Aligned, KeyedTable, TableSink, TableView, Watermark, WriteStats};
use smelt_engine::predicate::Predicate;
use smelt_spec::TableName;

use crate::Lake;
use crate::error::{Context, Error, Result};
use crate::parquet::{FileRef, FileRows};
use batches::key_columns;
use lookup::LookedUp;

pub use compact::{ROWS_PER_FILE, SMALL_FILES_TO_COMPACT};
pub use found::FOUND_IN_MEMORY;
pub use smelt_engine::ports::LastCommit;

/// A silver Delta table (it may not exist yet).
pub struct DeltaLakeTable {
    lake: Lake,
    name: TableName,
    table: Option<DeltaTable>,
    /// Schema of a table to create with the first commit (one commit: metadata, data and
    /// watermark, so a failed first run leaves no table behind).
    pending: Option<SchemaRef>,
    /// What the lookups of this version found, so the commit probes only those files.
    looked_up: Mutex<Option<LookedUp>>,
    staged: Staged,
    rows_per_file: usize,
    /// Fold small files in commits that write data (off for append-only bronze tables, whose
    /// rows must keep the commit that added them).
    compact: bool,
    /// Replaced and deleted rows are marked in deletion vectors instead of rewriting the
    /// files that hold them (`write_mode: merge_on_read`).
    merge_on_read: bool,
    /// Whether the table keeps a change feed ([`TableSink::keep_change_feed`]): a table
    /// created has one only then, an existing one without gets it in the next commit.
    change_feed: bool,
    /// Merge-on-read commits write no change data: readers derive the changes from the
    /// deletion vectors and new files (`change_data: derived`).
    derived: bool,
    /// The most bytes of rows a merge-on-read lookup found that wait in memory for the
    /// commit; beyond, they wait in a temporary file.
    found_in_memory: usize,
}

/// An active data file and the action that removes it.
struct ActiveFile {
    /// Its place in the snapshot's file list (log order), for the statistics of
    /// [`prune::files_to_probe`].
    index: usize,
    file: FileRef,
    remove: Remove,
    /// Rows not deleted, from the file's statistics.
    rows: Option<usize>,
    /// The action that added the file (a new deletion vector re-adds it).
    add: Add,
    /// The rows its deletion vector deletes (ascending; empty without one).
    deleted: Arc<[u64]>,
}

/// Written but not committed yet.
#[derive(Default)]
struct Staged {
    adds: Vec<Add>,
    cdc: Vec<AddCDCFile>,
    /// Key columns of the staged rows that replace stored rows.
    replaced: Vec<Vec<ArrayRef>>,
    /// Key columns of the stored rows to delete.
    deleted: Vec<Vec<ArrayRef>>,
    /// The commit replaces every stored row.
    overwrite: bool,
    /// The table's schema with the columns the commit adds.
    evolved: Option<SchemaRef>,
    /// Table properties the commit sets.
    properties: Vec<(String, String)>,
    /// Stored rows matching this predicate are removed (replace_where).
    delete_where: Option<Predicate>,
}

impl DeltaLakeTable {
    /// Opens the silver table if it exists.
    pub async fn open(lake: &Lake, name: &TableName) -> Result<Self> {
        Ok(Self {
            lake: lake.clone(),
            name: name.clone(),
            table: lake.open(name).await?,
            pending: None,
            looked_up: Mutex::new(None),
            staged: Staged::default(),
            rows_per_file: ROWS_PER_FILE,
            compact: true,
            merge_on_read: false,
            change_feed: true,
            derived: false,
            found_in_memory: FOUND_IN_MEMORY,
        })
    }

    /// Opens the table a run writes: fails, naming the feature, when a smelt commit would
    /// not keep a Delta feature the existing table uses (docs/delta.md).
    pub async fn open_for_write(lake: &Lake, name: &TableName) -> Result<Self> {
        lake.check_safe_commits(Some(name)).await?;
        let silver = Self::open(lake, name).await?;
        if let Some(table) = &silver.table {
            let state = table.snapshot().context(|| format!("reading `{name}`"))?;
            crate::features::check_writable(&name.to_string(), state)?;
        }
        Ok(silver)
    }

    /// Never folds small files: for append-only tables (bronze), where a row's commit
    /// version and time are its change metadata and must not move.
    pub fn without_compaction(mut self) -> Self {
        self.compact = false;
        self
    }

    /// Caps the rows of each data file written (default [`ROWS_PER_FILE`]).
    pub fn with_rows_per_file(mut self, rows: usize) -> Self {
        self.rows_per_file = rows.max(1);
        self
    }

    /// Keeps at most `bytes` of the rows a merge-on-read lookup found in memory until the
    /// commit marks them (default [`FOUND_IN_MEMORY`]); beyond, they wait in a temporary
    /// file (in `TMPDIR`), so that the run's writing does not hold them.
    pub fn with_found_in_memory(mut self, bytes: usize) -> Self {
        self.found_in_memory = bytes;
        self
    }

    /// Whether the table keeps a change feed after the next commit: it has one, or the
    /// commit turns it on.
    fn feed_on(&self) -> bool {
        self.change_feed || self.feed_property()
    }

    /// Whether the table's properties turn its change feed on.
    fn feed_property(&self) -> bool {
        self.table
            .as_ref()
            .and_then(|t| t.snapshot().ok())
            .is_some_and(|s| {
                use deltalake::table::config::TablePropertiesExt;
                s.table_config().enable_change_data_feed()
            })
    }

    /// Whether the next commit writes change data files: the table keeps a change feed
    /// and its readers are not left to derive the changes (`change_data: derived`).
    fn writes_change_data(&self) -> bool {
        self.feed_on() && !(self.merge_on_read && self.derived)
    }

    fn table(&self) -> Result<&DeltaTable> {
        self.table.as_ref().ok_or_else(|| {
            Error::user(
                format!("silver table `{}` does not exist yet", self.name),
                "run the flow once to create it",
            )
        })
    }

    /// The table's data files, each read less the rows its deletion vector deletes.
    async fn active_files(&self, table: &DeltaTable) -> Result<Vec<ActiveFile>> {
        use futures::{StreamExt, TryStreamExt};
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        let dvs = crate::dv::DvReader::new(&self.name.to_string(), table);
        let views: Vec<_> = snapshot.log_data().iter().collect();
        futures::stream::iter(views.into_iter().enumerate().map(|(index, view)| {
            let dvs = dvs.clone();
            async move {
                let dv = view.deletion_vector_descriptor();
                let path = view.path().to_string();
                let deleted = dvs.deleted(&path, dv.as_ref()).await?;
                Ok::<_, Error>(ActiveFile {
                    index,
                    file: FileRef {
                        path,
                        location: view.object_store_path(),
                        size: view.size(),
                        partition_values: view.partition_values_map(),
                        rows: FileRows::Except(Arc::clone(&deleted)),
                    },
                    remove: view.remove_action(true),
                    rows: view.num_records().map(|n| n.saturating_sub(deleted.len())),
                    // The one public way to the whole add action (its stats, tags).
                    #[allow(deprecated)]
                    add: view.add_action(),
                    deleted,
                })
            }
        }))
        .buffered(16)
        .try_collect()
        .await
    }
}

// The longer methods call the inherent method of the same name in the submodule that holds
// the work (`lookup`, `write`, `schema`, `rewrite`, `commit`): inside this module an
// inherent method takes precedence over the trait's.
#[async_trait]
impl TableView for DeltaLakeTable {
    fn table(&self) -> &TableName {
        &self.name
    }

    fn schema(&self) -> Option<SchemaRef> {
        if let Some(pending) = &self.pending {
            return Some(Arc::clone(pending));
        }
        if let Some(evolved) = &self.staged.evolved {
            return Some(Arc::clone(evolved));
        }
        let snapshot = self.table.as_ref()?.snapshot().ok()?;
        Some(snapshot.snapshot().arrow_schema())
    }

    fn version(&self) -> Option<i64> {
        self.table.as_ref()?.version().map(|v| v as i64)
    }

    async fn deleted_rows(&self) -> smelt_engine::Result<Option<(u64, u64)>> {
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        let (mut deleted, mut rows) = (0u64, 0u64);
        for view in snapshot.log_data().iter() {
            // A file without row counts in its statistics leaves the share unknown.
            let Some(n) = view.num_records() else {
                return Ok(None);
            };
            rows += n as u64;
            if let Some(dv) = view.deletion_vector_descriptor() {
                deleted += dv.cardinality.max(0) as u64;
            }
        }
        Ok(Some((deleted, rows)))
    }
}

#[async_trait]
impl TableSink for DeltaLakeTable {
    async fn create(&mut self, schema: SchemaRef) -> smelt_engine::Result<()> {
        if self.table.is_some() {
            return Err(smelt_engine::EngineError::Internal(format!(
                "create called for `{}`, which already exists",
                self.name
            )));
        }
        self.pending = Some(schema);
        Ok(())
    }

    async fn stage(
        &mut self,
        rows: RecordBatch,
        replaces: &BooleanArray,
        keys: &[String],
    ) -> smelt_engine::Result<()> {
        self.stage(rows, replaces, keys).await
    }

    fn property(&self, key: &str) -> Option<String> {
        if let Some((_, v)) = self.staged.properties.iter().rev().find(|(k, _)| k == key) {
            return Some(v.clone());
        }
        let snapshot = self.table.as_ref()?.snapshot().ok()?;
        snapshot.metadata().configuration().get(key).cloned()
    }

    async fn set_property(&mut self, key: &str, value: &str) -> smelt_engine::Result<()> {
        self.staged
            .properties
            .push((key.to_string(), value.to_string()));
        Ok(())
    }

    async fn add_columns(&mut self, fields: Vec<Field>) -> smelt_engine::Result<()> {
        self.add_columns(fields)
    }

    async fn widen(
        &mut self,
        schema: SchemaRef,
        keys: &[String],
    ) -> smelt_engine::Result<WriteStats> {
        self.widen(schema, keys).await
    }

    async fn write_merge_on_read(&mut self) -> smelt_engine::Result<()> {
        self.merge_on_read = true;
        Ok(())
    }

    async fn keep_change_feed(&mut self, on: bool) -> smelt_engine::Result<()> {
        self.change_feed = on;
        Ok(())
    }

    async fn derive_change_data(&mut self) -> smelt_engine::Result<()> {
        self.derived = true;
        Ok(())
    }

    async fn optimize(
        &mut self,
        policy: &smelt_engine::ports::OptimizePolicy,
    ) -> smelt_engine::Result<smelt_engine::ports::OptimizeStats> {
        Ok(self.optimize(policy).await?)
    }

    async fn vacuum(
        &mut self,
        plan: &smelt_engine::ports::VacuumPlan,
    ) -> smelt_engine::Result<smelt_engine::ports::VacuumStats> {
        Ok(self.vacuum(plan).await?)
    }

    async fn stage_overwrite(&mut self) -> smelt_engine::Result<()> {
        self.staged.overwrite = true;
        Ok(())
    }

    async fn stage_delete_where(&mut self, predicate: Predicate) -> smelt_engine::Result<()> {
        self.staged.delete_where = Some(predicate);
        Ok(())
    }

    async fn expire(&mut self, column: &str, before_us: i64) -> smelt_engine::Result<usize> {
        self.expire(column, before_us).await
    }

    async fn commit(
        &mut self,
        keys: &[String],
        watermark: &Watermark,
    ) -> smelt_engine::Result<WriteStats> {
        self.commit(keys, watermark).await
    }
}

#[async_trait]
impl KeyedTable for DeltaLakeTable {
    async fn lookup(
        &self,
        keys: RecordBatch,
        columns: &[String],
    ) -> smelt_engine::Result<RecordBatch> {
        self.lookup(keys, columns).await
    }

    async fn lookup_aligned(
        &self,
        keys: RecordBatch,
        columns: &[String],
    ) -> smelt_engine::Result<Aligned> {
        self.lookup_aligned(keys, columns).await
    }

    async fn stage_deletes(&mut self, keys: RecordBatch) -> smelt_engine::Result<()> {
        if keys.num_rows() == 0 {
            return Ok(());
        }
        let schema = self.current_schema(self.table()?)?;
        let names: Vec<String> = keys
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        self.staged
            .deleted
            .push(key_columns(&keys, &names, &schema)?);
        Ok(())
    }
}
