//! Silver tables: the guard's lookup and the copy-on-write upsert that commits data,
//! change data and watermark in one Delta commit (DESIGN §3.8).
//!
//! smelt reads and rewrites silver's files itself instead of running a delta-rs MERGE
//! (DESIGN §9): the keys being written are hashed once ([`KeyIndex`]), every file is
//! probed on its key columns alone, and only files holding one of those keys are decoded
//! and rewritten — file by file, on all cores, so memory stays bounded by a few files
//! whatever the table's size.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray, UInt32Array};
use arrow::compute::{filter_record_batch, not};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use deltalake::DeltaTable;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, AddCDCFile, Remove, StructType, Transaction};
use deltalake::logstore::{ObjectStoreRef, get_actions};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::table::config::TablePropertiesExt;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use futures::{StreamExt, TryStreamExt};
use smelt_core::change::{CHANGE_TYPE, DELETE, INSERT, UPDATE_POSTIMAGE, UPDATE_PREIMAGE};
use smelt_core::dedupe::KeyIndex;
use smelt_engine::ports::{SilverTable, Watermark, WriteStats};
use smelt_engine::predicate::Predicate;
use smelt_spec::TableName;

use crate::Lake;
use crate::error::{Context, Error, Result};
use crate::parquet::{self, FileRef, FileRows};

/// Rows per data file smelt writes (about 10 MB of Parquet for seed 000's 20 columns):
/// small enough that a rewrite spreads over all cores and holds only a few files in
/// memory, large enough to keep the file count low.
pub const ROWS_PER_FILE: usize = 256 * 1024;

/// Small files (under a quarter of the target rows) that trigger a compaction in the next
/// commit that writes data.
pub const SMALL_FILES_TO_COMPACT: usize = 8;

/// The latest commit of a silver table, from its commit info.
#[derive(Debug, Clone)]
pub struct LastCommit {
    /// Commit time, ms since the epoch.
    pub at_ms: i64,
    /// The smelt run that made it, if smelt did.
    pub run_id: Option<String>,
    /// The flow's run report as JSON, as committed.
    pub report: Option<String>,
}

/// A silver Delta table (it may not exist yet).
pub struct DeltaSilver {
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
}

/// The keys of the lookups at `version` and the files that hold any of them.
struct LookedUp {
    version: i64,
    keys: Vec<KeyIndex>,
    files: HashSet<String>,
}

/// An active data file and the action that removes it.
struct ActiveFile {
    file: FileRef,
    remove: Remove,
    /// Rows, from the file's statistics.
    rows: Option<usize>,
}

/// What rewriting one file did.
struct Rewrite {
    remove: Remove,
    adds: Vec<Add>,
    cdc: Option<AddCDCFile>,
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

impl DeltaSilver {
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
        })
    }

    /// Opens the table a run writes: fails, naming the feature, when a smelt commit would
    /// not keep a Delta feature the existing table uses (docs/delta.md).
    pub async fn open_for_write(lake: &Lake, name: &TableName) -> Result<Self> {
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

    fn table(&self) -> Result<&DeltaTable> {
        self.table.as_ref().ok_or_else(|| {
            Error::user(
                format!("silver table `{}` does not exist yet", self.name),
                "run the flow once to create it",
            )
        })
    }

    fn commit_properties(watermark: &Watermark) -> CommitProperties {
        // One `with_metadata` call: a second one would replace the first.
        let mut metadata = vec![
            (
                "smelt.run_id".to_string(),
                serde_json::json!(watermark.run_id),
            ),
            (
                "smelt.flow".to_string(),
                serde_json::json!(watermark.app_id),
            ),
            (
                "smelt.source_version".to_string(),
                serde_json::json!(watermark.version),
            ),
        ];
        if let Some(report) = &watermark.report {
            metadata.push(("smelt.report".to_string(), serde_json::json!(report)));
        }
        for (key, value) in &watermark.extra {
            metadata.push((key.clone(), serde_json::json!(value)));
        }
        CommitProperties::default()
            .with_application_transaction(Transaction::new(&watermark.app_id, watermark.version))
            .with_metadata(metadata)
    }

    /// The table's data files. Files with deletion vectors (written by another engine)
    /// cannot be rewritten by smelt yet.
    fn active_files(&self, table: &DeltaTable) -> Result<Vec<ActiveFile>> {
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        let mut files = Vec::new();
        for view in snapshot.log_data().iter() {
            if view.deletion_vector_descriptor().is_some() {
                return Err(Error::user(
                    format!(
                        "silver `{}` has deletion vectors in `{}`; smelt does not write tables with deletion vectors yet",
                        self.name,
                        view.path()
                    ),
                    format!(
                        "purge them with the engine that wrote them (Spark: `REORG TABLE {} APPLY (PURGE)`), or rebuild silver with `smelt run --full-refresh`",
                        self.name
                    ),
                ));
            }
            files.push(ActiveFile {
                file: FileRef {
                    path: view.path().to_string(),
                    location: view.object_store_path(),
                    size: view.size(),
                    partition_values: view.partition_values_map(),
                    rows: FileRows::All,
                },
                remove: view.remove_action(true),
                rows: view.num_records(),
            });
        }
        Ok(files)
    }

    /// The schema of the existing `table` as this run writes it: with the columns it adds.
    fn current_schema(&self, table: &DeltaTable) -> Result<SchemaRef> {
        match &self.staged.evolved {
            Some(evolved) => Ok(Arc::clone(evolved)),
            None => Ok(table
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?
                .snapshot()
                .arrow_schema()),
        }
    }

    /// A writer of data files for this table (or for the table about to be created).
    fn writer(&self, schema: &SchemaRef, keys: &[String]) -> Result<RecordBatchWriter> {
        let snapshot = self.table.as_ref().and_then(|t| t.snapshot().ok());
        let same_schema = snapshot
            .as_ref()
            .is_some_and(|s| s.snapshot().arrow_schema().fields() == schema.fields());
        let writer = match &self.table {
            Some(table) if self.staged.evolved.is_none() && same_schema => {
                RecordBatchWriter::for_table(table)
            }
            _ => RecordBatchWriter::try_new(
                self.lake.table_url(&self.name)?.as_str(),
                Arc::clone(schema),
                // New columns or wider types keep the table's partitioning.
                snapshot
                    .as_ref()
                    .map(|s| s.metadata().partition_columns().to_vec())
                    .filter(|p| !p.is_empty()),
                None,
            ),
        }
        .context(|| format!("writing `{}`", self.name))?;
        Ok(writer.with_writer_properties(parquet::writer_properties(keys)))
    }

    /// Writes `rows` as data files of at most `rows_per_file` rows, on all cores.
    async fn write_data(&self, rows: &RecordBatch, keys: &[String]) -> Result<Vec<Add>> {
        let mut chunks = Vec::new();
        let mut offset = 0;
        while offset < rows.num_rows() {
            let len = self.rows_per_file.min(rows.num_rows() - offset);
            chunks.push(rows.slice(offset, len));
            offset += len;
        }
        let schema = rows.schema();
        let name = self.name.to_string();
        let tasks = chunks
            .into_iter()
            .map(|chunk| Ok(write_file(self.writer(&schema, keys)?, chunk, name.clone())))
            .collect::<Result<Vec<_>>>()?;
        let adds = on_cores(&name, tasks).await?;
        Ok(adds.into_iter().flatten().collect())
    }

    /// Commits `actions` with the watermark and reloads the table at the new version.
    async fn commit_actions(
        &mut self,
        actions: Vec<Action>,
        operation: DeltaOperation,
        props: CommitProperties,
    ) -> Result<WriteStats> {
        let mut stats = WriteStats::default();
        for a in &actions {
            match a {
                Action::Add(add) => {
                    stats.files_added += 1;
                    stats.bytes_written += add.size.max(0) as u64;
                }
                Action::Remove(_) => stats.files_removed += 1,
                _ => {}
            }
        }
        let mut table = self.table()?.clone();
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        crate::features::check_writable(&self.name.to_string(), snapshot)?;
        let commit = CommitBuilder::from(props)
            .with_actions(actions)
            .build(Some(snapshot), table.log_store(), operation)
            .await
            .context(|| format!("committing to `{}`", self.name))?;
        table
            .update_incremental(Some(commit.version()))
            .await
            .context(|| format!("reloading `{}`", self.name))?;
        stats.version = commit.version() as i64;
        self.table = Some(table);
        Ok(stats)
    }
}

/// Writes one chunk as data file(s) and returns their `add` actions.
async fn write_file(
    mut writer: RecordBatchWriter,
    rows: RecordBatch,
    table: String,
) -> Result<Vec<Add>> {
    writer
        .write(rows)
        .await
        .context(|| format!("writing a data file of `{table}`"))?;
    writer
        .flush()
        .await
        .context(|| format!("writing a data file of `{table}`"))
}

/// Runs file tasks of `table` on the runtime's threads, as many at once as there are
/// cores (so a few files are in memory at a time); results in task order.
async fn on_cores<T, F>(table: &str, tasks: Vec<F>) -> Result<Vec<T>>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    futures::stream::iter(tasks)
        .map(|task| async move {
            tokio::spawn(task).await.map_err(|e| {
                Error::user(
                    format!("a task reading or writing `{table}` failed: {e}"),
                    "this is a bug in smelt; please report it",
                )
            })?
        })
        .buffered(parquet::cores())
        .try_collect()
        .await
}

/// The key columns of `batch`, in `keys` order, cast to their type in `schema` where
/// they differ. `batch` is lined up with the table's schema, so every key is there.
fn key_columns(batch: &RecordBatch, keys: &[String], schema: &Schema) -> Result<Vec<ArrayRef>> {
    keys.iter()
        .map(|k| {
            let t = schema.field_with_name(k)?.data_type();
            let c = batch.column_by_name(k).ok_or_else(|| {
                Error::user(
                    format!("key column `{k}` is missing from the silver rows"),
                    "the silver table does not match the flow; rebuild it with `smelt run --full-refresh`",
                )
            })?;
            Ok(if c.data_type() == t {
                Arc::clone(c)
            } else {
                arrow::compute::cast(c, t)?
            })
        })
        .collect()
}

/// `batch` with a `_change_type` column of `kinds` appended (a change data file's rows).
fn with_change_type(batch: &RecordBatch, kinds: ArrayRef) -> Result<RecordBatch> {
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(CHANGE_TYPE, DataType::Utf8, true));
    let mut columns = batch.columns().to_vec();
    columns.push(kinds);
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// The rows of a file (ascending) whose key is in `index`, read from the key columns alone.
async fn probe(
    store: ObjectStoreRef,
    table: &str,
    file: &FileRef,
    keys: &[String],
    key_schema: &SchemaRef,
    index: &KeyIndex,
) -> Result<UInt32Array> {
    let batches = parquet::read(store, table, file, Some(keys), None, false).await?;
    let mut rows = Vec::new();
    let mut offset = 0u32;
    for batch in &batches {
        let batch = parquet::conform(batch, file, key_schema)?;
        let positions = index.positions(&key_columns(&batch, keys, key_schema)?)?;
        rows.extend(
            positions
                .iter()
                .enumerate()
                .filter(|(_, p)| p.is_some())
                .map(|(i, _)| offset + i as u32),
        );
        offset += batch.num_rows() as u32;
    }
    Ok(UInt32Array::from(rows))
}

/// Reads a file (or the rows `rows` of it) lined up with `schema`, as one batch.
async fn read_whole(
    store: ObjectStoreRef,
    table: &str,
    file: &FileRef,
    columns: Option<&[String]>,
    rows: Option<&[u32]>,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let batches = parquet::read(store, table, file, columns, rows, false).await?;
    let batches = batches
        .iter()
        .map(|b| parquet::conform(b, file, schema))
        .collect::<Result<Vec<_>>>()?;
    Ok(arrow::compute::concat_batches(schema, &batches)?)
}

/// Rewrites `file` without the rows whose key is in `index`; `None` when it holds none.
#[allow(clippy::too_many_arguments)]
async fn rewrite(
    store: ObjectStoreRef,
    table: String,
    active: ActiveFile,
    keys: Arc<[String]>,
    schema: SchemaRef,
    index: Arc<KeyIndex>,
    deleted: Option<Arc<KeyIndex>>,
    writer: RecordBatchWriter,
    change_data: bool,
) -> Result<Option<Rewrite>> {
    let stored = read_whole(
        Arc::clone(&store),
        &table,
        &active.file,
        None,
        None,
        &schema,
    )
    .await?;
    let positions = index.positions(&key_columns(&stored, &keys, &schema)?)?;
    if positions.null_count() == positions.len() {
        return Ok(None);
    }
    let hit = arrow::compute::is_not_null(&positions)?;
    // Rows of deleted keys are `delete`s; the others are pre-images of updates.
    let kinds = |before: &RecordBatch| -> Result<ArrayRef> {
        Ok(match &deleted {
            Some(deleted) => {
                let gone = deleted.positions(&key_columns(before, &keys, &schema)?)?;
                Arc::new(StringArray::from_iter_values(
                    gone.iter()
                        .map(|p| if p.is_some() { DELETE } else { UPDATE_PREIMAGE }),
                ))
            }
            None => Arc::new(StringArray::from(vec![UPDATE_PREIMAGE; before.num_rows()])),
        })
    };
    let kinds = if change_data {
        Some(kinds(&filter_record_batch(&stored, &hit)?)?)
    } else {
        None
    };
    Ok(Some(
        rewrite_without(store, table, active, &stored, &hit, kinds, writer).await?,
    ))
}

/// Rewrites `active` (whose rows are `stored`) without the rows `hit` marks; with `kinds`
/// (their change types), writes them as change data too.
async fn rewrite_without(
    store: ObjectStoreRef,
    table: String,
    active: ActiveFile,
    stored: &RecordBatch,
    hit: &BooleanArray,
    kinds: Option<ArrayRef>,
    writer: RecordBatchWriter,
) -> Result<Rewrite> {
    let survivors = filter_record_batch(stored, &not(hit)?)?;
    let adds = if survivors.num_rows() > 0 {
        write_file(writer, survivors, table.clone()).await?
    } else {
        Vec::new()
    };
    let cdc = match kinds {
        Some(kinds) => {
            let before = filter_record_batch(stored, hit)?;
            Some(
                parquet::write_change_data(store, &table, &with_change_type(&before, kinds)?)
                    .await?,
            )
        }
        None => None,
    };
    Ok(Rewrite {
        remove: active.remove,
        adds,
        cdc,
    })
}

#[async_trait]
impl SilverTable for DeltaSilver {
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

    async fn watermark(&self, app_id: &str) -> smelt_engine::Result<Option<i64>> {
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        Ok(snapshot
            .transaction_version(table.log_store().as_ref(), app_id)
            .await
            .context(|| format!("reading the watermark of `{}`", self.name))?)
    }

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

    async fn lookup(
        &self,
        keys: RecordBatch,
        columns: &[String],
    ) -> smelt_engine::Result<RecordBatch> {
        let table = self.table()?;
        // With columns being added, stored rows read them as NULL.
        let silver = self.current_schema(table)?;
        let key_names: Arc<[String]> = keys
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let project = |names: &[String]| -> Result<SchemaRef> {
            let idx = names
                .iter()
                .map(|n| silver.index_of(n))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(silver.project(&idx)?))
        };
        let key_schema = project(&key_names)?;
        let out_schema = project(columns)?;
        let index = Arc::new(KeyIndex::new(keys.columns())?);
        let store = table.object_store();
        let name = self.name.to_string();
        let columns: Arc<[String]> = columns.into();
        let tasks: Vec<_> = self
            .active_files(table)?
            .into_iter()
            .map(|active| {
                let (store, name, index) = (Arc::clone(&store), name.clone(), Arc::clone(&index));
                let (key_names, key_schema) = (Arc::clone(&key_names), Arc::clone(&key_schema));
                let (columns, out_schema) = (Arc::clone(&columns), Arc::clone(&out_schema));
                async move {
                    let file = active.file;
                    let rows = probe(
                        Arc::clone(&store),
                        &name,
                        &file,
                        &key_names,
                        &key_schema,
                        &index,
                    )
                    .await?;
                    if rows.is_empty() {
                        return Ok((file.path, None));
                    }
                    let hits = read_whole(
                        store,
                        &name,
                        &file,
                        Some(&columns),
                        Some(rows.values()),
                        &out_schema,
                    )
                    .await?;
                    Ok::<_, Error>((file.path, Some(hits)))
                }
            })
            .collect();
        let found = on_cores(&name, tasks).await?;
        let mut files = HashSet::new();
        let mut batches = Vec::new();
        for (path, hits) in found {
            if let Some(hits) = hits {
                files.insert(path);
                batches.push(hits);
            }
        }
        let version = table.version().map(|v| v as i64).unwrap_or_default();
        let mut looked_up = self.looked_up.lock().expect("not poisoned");
        match (Arc::try_unwrap(index), looked_up.as_mut()) {
            (Ok(index), Some(seen)) if seen.version == version => {
                seen.keys.push(index);
                seen.files.extend(files);
            }
            (Ok(index), _) => {
                *looked_up = Some(LookedUp {
                    version,
                    keys: vec![index],
                    files,
                })
            }
            // Cannot happen (every task is done), and only costs probing every file.
            (Err(_), _) => *looked_up = None,
        }
        Ok(arrow::compute::concat_batches(&out_schema, &batches).map_err(Error::Arrow)?)
    }

    async fn stage(
        &mut self,
        rows: RecordBatch,
        replaces: &BooleanArray,
        keys: &[String],
    ) -> smelt_engine::Result<()> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        let schema = match (&self.pending, &self.table) {
            (Some(schema), _) => {
                let path = self.lake.table_path(&self.name);
                std::fs::create_dir_all(&path).map_err(|source| Error::Io {
                    context: format!("creating `{}`", path.display()),
                    source,
                })?;
                Arc::clone(schema)
            }
            (None, Some(table)) => self.current_schema(table)?,
            (None, None) => {
                return Err(smelt_engine::EngineError::Internal(format!(
                    "stage called for `{}`, which does not exist",
                    self.name
                )));
            }
        };
        let rows = align_to(&rows, &schema)?;
        let adds = self.write_data(&rows, keys).await?;
        self.staged.adds.extend(adds);
        // Once silver holds data, a commit may replace rows and then carries change data
        // files, which readers use alone: every staged row goes in them too.
        if let Some(table) = &self.table {
            let snapshot = table
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?;
            // An overwrite carries no change data: readers take its removes as deletes
            // and its adds as inserts.
            // A commit that only appends needs none: readers take its adds as inserts.
            let only_appends =
                keys.is_empty() && replaces.true_count() == 0 && self.staged.delete_where.is_none();
            if snapshot.table_config().enable_change_data_feed()
                && snapshot.log_data().num_files() > 0
                && !self.staged.overwrite
                && !only_appends
            {
                let kinds: ArrayRef =
                    Arc::new(StringArray::from_iter_values(replaces.iter().map(|r| {
                        if r == Some(true) {
                            UPDATE_POSTIMAGE
                        } else {
                            INSERT
                        }
                    })));
                let cdc = parquet::write_change_data(
                    table.object_store(),
                    &self.name.to_string(),
                    &with_change_type(&rows, kinds)?,
                )
                .await?;
                self.staged.cdc.push(cdc);
            }
        }
        if replaces.true_count() > 0 {
            let replaced = filter_record_batch(&rows, replaces)?;
            self.staged
                .replaced
                .push(key_columns(&replaced, keys, &schema)?);
        }
        Ok(())
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
        let current = self.schema().ok_or_else(|| {
            Error::user(
                format!("silver `{}` does not exist yet", self.name),
                "run the flow once to create it",
            )
        })?;
        let mut all: Vec<Field> = current
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for f in fields {
            if current.field_with_name(f.name()).is_err() {
                all.push(f.with_nullable(true));
            }
        }
        let evolved = Arc::new(Schema::new(all));
        // A table created by this commit is created with the columns.
        if self.pending.is_some() {
            self.pending = Some(evolved);
        } else {
            self.staged.evolved = Some(evolved);
        }
        Ok(())
    }

    async fn widen(
        &mut self,
        schema: SchemaRef,
        keys: &[String],
    ) -> smelt_engine::Result<WriteStats> {
        let table = self.table()?.clone();
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        let columns: StructType = schema.as_ref().try_into_kernel().map_err(Error::Arrow)?;
        let metadata =
            deltalake::kernel::MetadataExt::with_schema(snapshot.metadata().clone(), &columns)
                .map_err(deltalake::DeltaTableError::from)
                .context(|| format!("widening the columns of `{}`", self.name))?;
        let mut actions = vec![Action::Metadata(metadata)];
        // Every file again, cast to the wider types: the values do not change
        // (`dataChange: false`, so change-feed readers skip the commit).
        let store = table.object_store();
        let name = self.name.to_string();
        for f in self.active_files(&table)? {
            let rows = read_whole(Arc::clone(&store), &name, &f.file, None, None, &schema).await?;
            let mut remove = f.remove;
            remove.data_change = false;
            actions.push(Action::Remove(remove));
            for mut add in self.write_data(&rows, keys).await? {
                add.data_change = false;
                actions.push(Action::Add(add));
            }
        }
        let props = CommitProperties::default().with_metadata([(
            "smelt.operation".to_string(),
            serde_json::json!("widen column types"),
        )]);
        let operation = DeltaOperation::Write {
            mode: SaveMode::Overwrite,
            partition_by: None,
            predicate: None,
        };
        Ok(self.commit_actions(actions, operation, props).await?)
    }

    async fn stage_overwrite(&mut self) -> smelt_engine::Result<()> {
        self.staged.overwrite = true;
        Ok(())
    }

    async fn stage_delete_where(&mut self, predicate: Predicate) -> smelt_engine::Result<()> {
        self.staged.delete_where = Some(predicate);
        Ok(())
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

    async fn commit_values(&self, key: &str) -> smelt_engine::Result<Vec<String>> {
        let Some(table) = &self.table else {
            return Ok(Vec::new());
        };
        let root = self.lake.table_path(&self.name);
        Ok(crate::ledger::values(&root, table, &self.name, key).await?)
    }

    async fn expire(&mut self, column: &str, before_us: i64) -> smelt_engine::Result<usize> {
        let Some(table) = self.table.clone() else {
            return Ok(0);
        };
        let predicate =
            deltalake::datafusion::prelude::col(column).lt(deltalake::datafusion::prelude::lit(
                deltalake::datafusion::scalar::ScalarValue::TimestampMicrosecond(
                    Some(before_us),
                    Some("UTC".into()),
                ),
            ));
        let (table, metrics) = table
            .delete()
            .with_predicate(predicate)
            .await
            .context(|| format!("expiring rows of `{}`", self.name))?;
        self.table = Some(table);
        Ok(metrics.num_deleted_rows.unwrap_or_default())
    }

    async fn commit(
        &mut self,
        keys: &[String],
        watermark: &Watermark,
    ) -> smelt_engine::Result<WriteStats> {
        let stats = self.commit_staged(keys, watermark).await?;
        let root = self.lake.table_path(&self.name);
        crate::ledger::record(
            &root,
            self.table.as_ref(),
            &self.name,
            watermark,
            stats.version,
        )
        .await;
        Ok(stats)
    }
}

/// `rows` with the table's schema (same columns; field metadata and nullability as the
/// table declares them).
fn align_to(rows: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            let c = rows.column_by_name(f.name()).ok_or_else(|| {
                Error::user(
                    format!("silver column `{}` is missing from the rows to write", f.name()),
                    "the silver table does not match the flow; rebuild it with `smelt run --full-refresh`",
                )
            })?;
            Ok(if c.data_type() == f.data_type() {
                Arc::clone(c)
            } else {
                arrow::compute::cast(c, f.data_type())?
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

impl DeltaSilver {
    /// [`SilverTable::commit`] without the ledgers.
    async fn commit_staged(
        &mut self,
        keys: &[String],
        watermark: &Watermark,
    ) -> smelt_engine::Result<WriteStats> {
        let props = Self::commit_properties(watermark);
        let staged = std::mem::take(&mut self.staged);
        if let Some(schema) = self.pending.take() {
            return Ok(self
                .create_with(schema, staged.adds, staged.properties, props)
                .await?);
        }
        // New columns or properties: the table's metadata, changed, in this commit.
        let metadata = if staged.evolved.is_some() || !staged.properties.is_empty() {
            let snapshot = self
                .table()?
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?;
            let mut metadata = snapshot.metadata().clone();
            if let Some(evolved) = &staged.evolved {
                let columns: StructType =
                    evolved.as_ref().try_into_kernel().map_err(Error::Arrow)?;
                metadata = deltalake::kernel::MetadataExt::with_schema(metadata, &columns)
                    .map_err(deltalake::DeltaTableError::from)
                    .context(|| format!("adding columns to `{}`", self.name))?;
            }
            for (k, v) in &staged.properties {
                metadata =
                    deltalake::kernel::MetadataExt::add_config_key(metadata, k.clone(), v.clone())
                        .map_err(deltalake::DeltaTableError::from)
                        .context(|| format!("setting `{k}` on `{}`", self.name))?;
            }
            Some(Action::Metadata(metadata))
        } else {
            None
        };
        if staged.overwrite {
            let table = self.table()?;
            let snapshot = table
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?;
            let mut actions: Vec<Action> = metadata.into_iter().collect();
            actions.extend(
                snapshot
                    .log_data()
                    .iter()
                    .map(|f| Action::Remove(f.remove_action(true))),
            );
            actions.extend(staged.adds.into_iter().map(Action::Add));
            let operation = DeltaOperation::Write {
                mode: SaveMode::Overwrite,
                partition_by: None,
                predicate: None,
            };
            return Ok(self.commit_actions(actions, operation, props).await?);
        }
        let mut actions: Vec<Action> = metadata.into_iter().collect();
        if !staged.replaced.is_empty() || !staged.deleted.is_empty() {
            for r in self
                .replace(&staged.replaced, &staged.deleted, keys)
                .await?
            {
                actions.push(Action::Remove(r.remove));
                actions.extend(r.adds.into_iter().map(Action::Add));
                actions.extend(r.cdc.into_iter().map(Action::Cdc));
            }
        }
        let mut rows_removed = 0;
        if let Some(predicate) = &staged.delete_where
            && self.table.is_some()
        {
            let (rewrites, rows) = self.delete_where(predicate).await?;
            rows_removed = rows;
            for r in rewrites {
                actions.push(Action::Remove(r.remove));
                actions.extend(r.adds.into_iter().map(Action::Add));
                actions.extend(r.cdc.into_iter().map(Action::Cdc));
            }
        }
        let rewrote = actions.iter().any(|a| matches!(a, Action::Remove(_)));
        if !staged.adds.is_empty() && self.compact {
            let rewritten: HashSet<String> = actions
                .iter()
                .filter_map(|a| match a {
                    Action::Remove(r) => Some(r.path.clone()),
                    _ => None,
                })
                .collect();
            actions.extend(self.compact(&rewritten, keys).await?);
        }
        actions.extend(staged.adds.into_iter().map(Action::Add));
        actions.extend(staged.cdc.into_iter().map(Action::Cdc));
        let operation = if let Some(predicate) = &staged.delete_where {
            DeltaOperation::Write {
                mode: SaveMode::Overwrite,
                partition_by: None,
                predicate: Some(predicate.text().to_string()),
            }
        } else if rewrote {
            DeltaOperation::Merge {
                predicate: None,
                merge_predicate: Some(
                    keys.iter()
                        .map(|k| format!("target.`{k}` <=> source.`{k}`"))
                        .collect::<Vec<_>>()
                        .join(" AND "),
                ),
                matched_predicates: vec![],
                not_matched_predicates: vec![],
                not_matched_by_source_predicates: vec![],
            }
        } else {
            DeltaOperation::Write {
                mode: SaveMode::Append,
                partition_by: None,
                predicate: None,
            }
        };
        let mut stats = self.commit_actions(actions, operation, props).await?;
        stats.rows_removed = rows_removed;
        Ok(stats)
    }

    /// Creates the table and writes its first rows and the watermark in one commit.
    async fn create_with(
        &mut self,
        schema: SchemaRef,
        adds: Vec<Add>,
        properties: Vec<(String, String)>,
        props: CommitProperties,
    ) -> Result<WriteStats> {
        let path = self.lake.table_path(&self.name);
        std::fs::create_dir_all(&path).map_err(|source| Error::Io {
            context: format!("creating `{}`", path.display()),
            source,
        })?;
        let mut stats = WriteStats {
            version: 0,
            files_added: adds.len(),
            files_removed: 0,
            bytes_written: adds.iter().map(|a| a.size.max(0) as u64).sum(),
            rows_removed: 0,
        };
        let columns: StructType = schema.as_ref().try_into_kernel().map_err(Error::Arrow)?;
        let table = DeltaTable::try_from_url(self.lake.table_url(&self.name)?)
            .await
            .context(|| format!("creating silver table `{}`", self.name))?;
        let table = table
            .create()
            .with_columns(columns.fields().cloned())
            .with_table_name(self.name.table.clone())
            .with_save_mode(SaveMode::ErrorIfExists)
            .with_configuration_property(
                deltalake::TableProperty::EnableChangeDataFeed,
                Some("true"),
            )
            .with_configuration(properties.into_iter().map(|(k, v)| (k, Some(v))))
            .with_actions(adds.into_iter().map(Action::Add))
            .with_commit_properties(props)
            .await
            .context(|| format!("creating silver table `{}`", self.name))?;
        stats.version = table.version().map(|v| v as i64).unwrap_or_default();
        self.table = Some(table);
        Ok(stats)
    }

    /// Folds small data files (under a quarter of `rows_per_file` rows) into one, once at
    /// least [`SMALL_FILES_TO_COMPACT`] of them exist, so that many small runs do not leave
    /// many small files behind. At most `rows_per_file` rows per commit, smallest files
    /// first, none of `skip` (files this commit rewrites anyway). The actions do not change
    /// data (`dataChange: false`): change feed readers skip them.
    async fn compact(&self, skip: &HashSet<String>, keys: &[String]) -> Result<Vec<Action>> {
        let table = self.table()?;
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        if !snapshot.metadata().partition_columns().is_empty() {
            return Ok(Vec::new());
        }
        let schema = snapshot.snapshot().arrow_schema();
        let small_rows = (self.rows_per_file / 4).max(1);
        let mut small: Vec<(usize, ActiveFile)> = self
            .active_files(table)?
            .into_iter()
            .filter(|f| !skip.contains(&f.file.path))
            .filter_map(|f| f.rows.filter(|&r| r < small_rows).map(|r| (r, f)))
            .collect();
        if small.len() < SMALL_FILES_TO_COMPACT {
            return Ok(Vec::new());
        }
        small.sort_by_key(|(rows, _)| *rows);
        let mut total = 0;
        let mut chosen = Vec::new();
        for (rows, file) in small {
            if chosen.len() >= 2 && total + rows > self.rows_per_file {
                break;
            }
            total += rows;
            chosen.push(file);
        }
        let store = table.object_store();
        let name = self.name.to_string();
        let mut batches = Vec::with_capacity(chosen.len());
        for f in &chosen {
            batches
                .push(read_whole(Arc::clone(&store), &name, &f.file, None, None, &schema).await?);
        }
        let merged = arrow::compute::concat_batches(&schema, &batches)?;
        drop(batches);
        let mut actions = Vec::with_capacity(chosen.len() + 1);
        for mut add in self.write_data(&merged, keys).await? {
            add.data_change = false;
            actions.push(Action::Add(add));
        }
        for f in chosen {
            let mut remove = f.remove;
            remove.data_change = false;
            actions.push(Action::Remove(remove));
        }
        tracing::debug!(table = %self.name, files = actions.len() - 1, rows = total, "compacted small files");
        Ok(actions)
    }

    /// The table, whether it keeps change data, and its schema as this run writes it: what
    /// a rewrite of its files needs.
    fn to_rewrite(&self) -> Result<(DeltaTable, bool, SchemaRef)> {
        let table = self.table()?.clone();
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        let change_data = snapshot.table_config().enable_change_data_feed();
        let schema = self.current_schema(&table)?;
        Ok((table, change_data, schema))
    }

    /// Rewrites the files holding rows where `predicate` is true without them (`delete`
    /// change data for the rows removed); returns the rewrites and the rows removed.
    async fn delete_where(&self, predicate: &Predicate) -> Result<(Vec<Rewrite>, usize)> {
        let (table, change_data, schema) = self.to_rewrite()?;
        let store = table.object_store();
        let name = self.name.to_string();
        let tasks = self
            .active_files(&table)?
            .into_iter()
            .map(|active| {
                let writer = self.writer(&schema, &[])?;
                let (store, name, schema, predicate) = (
                    Arc::clone(&store),
                    name.clone(),
                    Arc::clone(&schema),
                    predicate.clone(),
                );
                Ok(async move {
                    let stored =
                        read_whole(Arc::clone(&store), &name, &active.file, None, None, &schema)
                            .await?;
                    let hit = predicate.evaluate(&stored).map_err(|e| {
                        Error::user(
                            format!("`{name}` file `{}`: {e}", active.file.path),
                            "check the predicate against the table's columns",
                        )
                    })?;
                    let n = hit.true_count();
                    if n == 0 {
                        return Ok(None);
                    }
                    let kinds = change_data
                        .then(|| Arc::new(StringArray::from(vec![DELETE; n])) as ArrayRef);
                    let rewrite =
                        rewrite_without(store, name, active, &stored, &hit, kinds, writer).await?;
                    Ok(Some((rewrite, n)))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let done = on_cores(&name, tasks).await?;
        let rows = done.iter().flatten().map(|(_, n)| n).sum();
        Ok((done.into_iter().flatten().map(|(r, _)| r).collect(), rows))
    }

    /// Rewrites the files holding any of the keys `replaced` or `deleted` (key columns,
    /// `keys` order) without those rows: every file on a first write, else only the files
    /// the lookups of this version found the keys in.
    async fn replace(
        &self,
        replaced: &[Vec<ArrayRef>],
        deleted: &[Vec<ArrayRef>],
        keys: &[String],
    ) -> Result<Vec<Rewrite>> {
        let (table, change_data, schema) = self.to_rewrite()?;
        let version = table.version().map(|v| v as i64).unwrap_or_default();
        let concat_keys = |sets: &mut dyn Iterator<Item = &Vec<ArrayRef>>| {
            let sets: Vec<&Vec<ArrayRef>> = sets.collect();
            (0..keys.len())
                .map(|i| {
                    let parts: Vec<&dyn Array> = sets.iter().map(|r| r[i].as_ref()).collect();
                    arrow::compute::concat(&parts)
                })
                .collect::<Result<Vec<ArrayRef>, _>>()
        };
        let columns = concat_keys(&mut replaced.iter().chain(deleted))?;
        let index = Arc::new(KeyIndex::new(&columns)?);
        let deleted_index = if deleted.is_empty() {
            None
        } else {
            Some(Arc::new(KeyIndex::new(&concat_keys(&mut deleted.iter())?)?))
        };

        let mut files = self.active_files(&table)?;
        if let Some(seen) = self.looked_up.lock().expect("not poisoned").take()
            && seen.version == version
        {
            // Every replaced key must have been looked up; then only the files the
            // lookups found keys in can hold it.
            let mut covered = BooleanArray::from(vec![false; columns[0].len()]);
            for looked in &seen.keys {
                let found = arrow::compute::is_not_null(&looked.positions(&columns)?)?;
                covered = arrow::compute::or(&covered, &found)?;
            }
            if covered.true_count() == covered.len() {
                files.retain(|f| seen.files.contains(&f.file.path));
            }
        }
        let store = table.object_store();
        let name = self.name.to_string();
        let key_names: Arc<[String]> = keys.into();
        let tasks = files
            .into_iter()
            .map(|active| {
                Ok(rewrite(
                    Arc::clone(&store),
                    name.clone(),
                    active,
                    Arc::clone(&key_names),
                    Arc::clone(&schema),
                    Arc::clone(&index),
                    deleted_index.clone(),
                    self.writer(&schema, keys)?,
                    change_data,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let rewrites = on_cores(&name, tasks).await?;
        Ok(rewrites.into_iter().flatten().collect())
    }

    /// The latest silver commit, if any.
    pub async fn last_commit(&self) -> Result<Option<LastCommit>> {
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let Some(version) = table.version() else {
            return Ok(None);
        };
        let Some(bytes) = table
            .log_store()
            .read_commit_entry(version)
            .await
            .context(|| format!("reading the log of `{}`", self.name))?
        else {
            return Ok(None);
        };
        for a in get_actions(version, &bytes)
            .context(|| format!("reading the log of `{}`", self.name))?
        {
            if let Action::CommitInfo(info) = a {
                let text = |k: &str| {
                    info.info
                        .get(k)
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                };
                return Ok(info
                    .in_commit_timestamp
                    .or(info.timestamp)
                    .map(|at_ms| LastCommit {
                        at_ms,
                        run_id: text("smelt.run_id"),
                        report: text("smelt.report"),
                    }));
            }
        }
        Ok(None)
    }
}
