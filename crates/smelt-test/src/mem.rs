//! The engine's ports in memory: a [`Lake`] of tables held as Arrow batches, their changes
//! read back as a [`ChangeSource`]. No storage, no files: the run contract alone.
//!
//! A table keeps its rows and every commit (the rows it added, its watermark and ledger
//! entries); keys compare NULL-safely (Arrow's row format encodes a NULL as a value of its
//! own). Staged rows and deletes live in the handle [`Lake::table`] returns, so a handle
//! dropped before [`TableSink::commit`] leaves the table as it was, as a crash would.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, SortField};
use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use smelt_core::change::{CHANGE_TYPE, INSERT, metadata_fields};
use smelt_engine::ports::{
    ChangeSet, ChangeSource, EventLog, KeyedTable, Lake, LakeTable, SourceOptions, TableRole,
    TableSink, TableView, Watermark, WatermarkStore, WriteStats,
};
use smelt_engine::report::FlowEvent;
use smelt_engine::{EngineError, Result};
use smelt_spec::TableName;

/// A lake in memory.
#[derive(Default)]
pub struct MemLake {
    tables: Mutex<BTreeMap<String, Arc<Mutex<MemState>>>>,
    events: Mutex<Vec<FlowEvent>>,
}

/// One table: its rows now, and its commits.
#[derive(Default)]
struct MemState {
    schema: Option<SchemaRef>,
    rows: Option<RecordBatch>,
    commits: Vec<MemCommit>,
    properties: HashMap<String, String>,
}

/// What one commit did.
struct MemCommit {
    /// The rows it added (what a change reader reads as inserts).
    added: Option<RecordBatch>,
    watermark: Option<(String, i64)>,
    extra: Vec<(String, String)>,
}

impl MemLake {
    /// An empty lake.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self, name: &TableName) -> Arc<Mutex<MemState>> {
        let mut tables = self.tables.lock().expect("not poisoned");
        Arc::clone(tables.entry(name.to_string()).or_default())
    }

    /// Every row table `name` holds now, `None` when it was never created.
    pub fn rows(&self, name: &TableName) -> Option<RecordBatch> {
        let tables = self.tables.lock().expect("not poisoned");
        let state = tables.get(&name.to_string())?.lock().expect("not poisoned");
        let schema = state.schema.clone()?;
        Some(
            state
                .rows
                .clone()
                .unwrap_or_else(|| RecordBatch::new_empty(schema)),
        )
    }

    /// The events the runs appended.
    pub fn events(&self) -> Vec<FlowEvent> {
        self.events.lock().expect("not poisoned").clone()
    }
}

#[async_trait]
impl Lake for MemLake {
    async fn source(
        &self,
        name: &TableName,
        _options: SourceOptions,
    ) -> Result<Box<dyn ChangeSource>> {
        let state = self.state(name);
        let guard = state.lock().expect("not poisoned");
        let Some(schema) = guard.schema.clone() else {
            return Err(EngineError::TableNotFound {
                table: name.to_string(),
                location: "the in-memory lake".into(),
                hint: "create it first".into(),
            });
        };
        Ok(Box::new(MemSource::new(
            name.clone(),
            schema,
            guard.commits.iter().map(|c| c.added.clone()).collect(),
        )))
    }

    async fn table(&self, name: &TableName, _role: TableRole) -> Result<Box<dyn LakeTable>> {
        Ok(Box::new(MemTable::open(name.clone(), self.state(name))))
    }

    async fn inspect(&self, name: &TableName) -> Result<Box<dyn TableView>> {
        Ok(Box::new(MemTable::open(name.clone(), self.state(name))))
    }

    fn event_log(&self) -> &dyn EventLog {
        self
    }
}

#[async_trait]
impl EventLog for MemLake {
    async fn append(&self, events: &[FlowEvent]) -> Result<()> {
        self.events
            .lock()
            .expect("not poisoned")
            .extend_from_slice(events);
        Ok(())
    }

    async fn has_run(&self, run_id: &str, flow: &str) -> Result<bool> {
        let events = self.events.lock().expect("not poisoned");
        Ok(events
            .iter()
            .any(|e| e.report.run_id == run_id && e.report.flow == flow))
    }
}

/// A table's changes as of the commit current when it was opened: every commit's rows,
/// stamped with the commit's version (its index) and a time of one second per version.
pub struct MemSource {
    name: TableName,
    schema: SchemaRef,
    commits: Vec<Option<RecordBatch>>,
    /// What [`ChangeSource::bytes_to_read`] claims (a run plans its memory with it).
    claimed: u64,
}

impl MemSource {
    /// The changes of a table of `schema` whose commit `v` added `commits[v]` (`None`: a
    /// commit without rows). A batch holds the table's columns, and may end with a
    /// `_change_type` column saying which rows are deletes; without one, all are inserts.
    pub fn new(name: TableName, schema: SchemaRef, commits: Vec<Option<RecordBatch>>) -> Self {
        MemSource {
            name,
            schema,
            commits,
            claimed: 0,
        }
    }

    /// The source, claiming `bytes` of data files to read (what drives a run's memory plan
    /// and its key partitions).
    pub fn claiming(self, bytes: u64) -> Self {
        MemSource {
            claimed: bytes,
            ..self
        }
    }
}

#[async_trait]
impl ChangeSource for MemSource {
    fn table(&self) -> &TableName {
        &self.name
    }

    fn version(&self) -> i64 {
        self.commits.len() as i64 - 1
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    async fn change_set(&self, _after: Option<i64>) -> Result<ChangeSet> {
        Ok(ChangeSet::default())
    }

    async fn bytes_to_read(&self, _after: Option<i64>) -> Result<u64> {
        Ok(self.claimed)
    }

    fn read(&self, after: Option<i64>) -> BoxStream<'_, Result<RecordBatch>> {
        let mut fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(metadata_fields());
        let schema = Arc::new(Schema::new(fields));
        let first = after.map_or(0, |a| (a + 1) as usize);
        let batches: Vec<Result<RecordBatch>> = self
            .commits
            .iter()
            .enumerate()
            .skip(first)
            .filter_map(|(v, added)| added.as_ref().map(|rows| (v as i64, rows)))
            .map(|(v, rows)| {
                let n = rows.num_rows();
                let mut columns = self
                    .schema
                    .fields()
                    .iter()
                    .map(|f| Ok(Arc::clone(rows.column(rows.schema().index_of(f.name())?))))
                    .collect::<Result<Vec<ArrayRef>>>()?;
                columns.push(match rows.column_by_name(CHANGE_TYPE) {
                    Some(kinds) => Arc::clone(kinds),
                    None => Arc::new(StringArray::from(vec![INSERT; n])),
                });
                columns.push(Arc::new(Int64Array::from(vec![v; n])));
                columns.push(Arc::new(
                    TimestampMicrosecondArray::from(vec![v * 1_000_000; n]).with_timezone("UTC"),
                ));
                Ok(RecordBatch::try_new(Arc::clone(&schema), columns)?)
            })
            .collect();
        futures::stream::iter(batches).boxed()
    }
}

/// A handle on a table of a [`MemLake`]: what a run stages, until it commits.
pub struct MemTable {
    name: TableName,
    state: Arc<Mutex<MemState>>,
    staged: Vec<RecordBatch>,
    /// Keys staged for deletion.
    deletes: Vec<RecordBatch>,
    overwrite: bool,
}

impl MemTable {
    fn open(name: TableName, state: Arc<Mutex<MemState>>) -> Self {
        MemTable {
            name,
            state,
            staged: Vec::new(),
            deletes: Vec::new(),
            overwrite: false,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut MemState) -> T) -> T {
        f(&mut self.state.lock().expect("not poisoned"))
    }

    fn stored_schema(&self) -> Result<SchemaRef> {
        self.schema()
            .ok_or_else(|| EngineError::Internal(format!("`{}` was never created", self.name)))
    }

    /// Commits `rows` as the table's rows now, recording `added` as what the commit added.
    fn record(
        &self,
        rows: RecordBatch,
        added: Option<RecordBatch>,
        watermark: Option<&Watermark>,
    ) -> i64 {
        self.with(|s| {
            s.rows = Some(rows);
            s.commits.push(MemCommit {
                added,
                watermark: watermark.map(|w| (w.app_id.clone(), w.version)),
                extra: watermark.map(|w| w.extra.clone()).unwrap_or_default(),
            });
            s.commits.len() as i64 - 1
        })
    }

    fn current(&self) -> Result<RecordBatch> {
        let schema = self.stored_schema()?;
        Ok(self
            .with(|s| s.rows.clone())
            .unwrap_or_else(|| RecordBatch::new_empty(schema)))
    }
}

/// The rows of `batch`'s columns `keys`, encoded so that equal keys (NULL-safely) are
/// equal rows, cast to the types of `like`'s columns of the same names.
fn key_rows(batch: &RecordBatch, keys: &[String], like: &Schema) -> Result<Vec<OwnedRow>> {
    let mut columns = Vec::with_capacity(keys.len());
    let mut fields = Vec::with_capacity(keys.len());
    for k in keys {
        let to = like.field_with_name(k)?.data_type();
        let column = batch.column_by_name(k).ok_or_else(|| {
            EngineError::Internal(format!("key column `{k}` missing from a batch"))
        })?;
        columns.push(arrow::compute::cast(column, to)?);
        fields.push(SortField::new(to.clone()));
    }
    let converter = RowConverter::new(fields)?;
    let rows = converter.convert_columns(&columns)?;
    Ok(rows.iter().map(|r| r.owned()).collect())
}

/// `rows` without the rows whose key is one of `gone`.
fn without_keys(
    rows: &RecordBatch,
    keys: &[String],
    gone: &HashSet<OwnedRow>,
) -> Result<RecordBatch> {
    if gone.is_empty() || rows.num_rows() == 0 {
        return Ok(rows.clone());
    }
    let encoded = key_rows(rows, keys, &rows.schema())?;
    let keep = BooleanArray::from_iter(encoded.iter().map(|r| Some(!gone.contains(r))));
    Ok(filter_record_batch(rows, &keep)?)
}

#[async_trait]
impl WatermarkStore for MemTable {
    async fn watermark(&self, app_id: &str) -> Result<Option<i64>> {
        Ok(self.with(|s| {
            s.commits
                .iter()
                .rev()
                .find_map(|c| c.watermark.as_ref().filter(|w| w.0 == app_id).map(|w| w.1))
        }))
    }

    async fn commit_values(&self, key: &str) -> Result<Vec<String>> {
        Ok(self.with(|s| {
            s.commits
                .iter()
                .flat_map(|c| c.extra.iter().filter(|e| e.0 == key).map(|e| e.1.clone()))
                .collect()
        }))
    }
}

impl TableView for MemTable {
    fn table(&self) -> &TableName {
        &self.name
    }

    fn schema(&self) -> Option<SchemaRef> {
        self.with(|s| s.schema.clone())
    }

    fn version(&self) -> Option<i64> {
        self.with(|s| (!s.commits.is_empty()).then(|| s.commits.len() as i64 - 1))
    }
}

#[async_trait]
impl TableSink for MemTable {
    async fn create(&mut self, schema: SchemaRef) -> Result<()> {
        self.with(|s| s.schema = Some(schema));
        Ok(())
    }

    async fn stage(
        &mut self,
        rows: RecordBatch,
        replaces: &BooleanArray,
        _keys: &[String],
    ) -> Result<()> {
        if replaces.len() != rows.num_rows() {
            return Err(EngineError::Internal(format!(
                "{} rows staged with {} replace flags",
                rows.num_rows(),
                replaces.len()
            )));
        }
        self.staged.push(rows);
        Ok(())
    }

    async fn commit(&mut self, keys: &[String], watermark: &Watermark) -> Result<WriteStats> {
        let schema = self.stored_schema()?;
        let added = concat_batches(&schema, &std::mem::take(&mut self.staged))?;
        let deletes = std::mem::take(&mut self.deletes);
        let rows = if std::mem::take(&mut self.overwrite) {
            added.clone()
        } else {
            let current = self.current()?;
            let mut gone = HashSet::new();
            if !keys.is_empty() {
                for batch in deletes.iter().chain(std::iter::once(&added)) {
                    gone.extend(key_rows(batch, keys, &schema)?);
                }
            }
            concat_batches(
                &schema,
                &[without_keys(&current, keys, &gone)?, added.clone()],
            )?
        };
        let added = (added.num_rows() > 0).then_some(added);
        let version = self.record(rows, added, Some(watermark));
        Ok(WriteStats {
            version,
            ..WriteStats::default()
        })
    }

    fn property(&self, key: &str) -> Option<String> {
        self.with(|s| s.properties.get(key).cloned())
    }

    async fn set_property(&mut self, key: &str, value: &str) -> Result<()> {
        self.with(|s| s.properties.insert(key.to_string(), value.to_string()));
        Ok(())
    }

    async fn add_columns(&mut self, fields: Vec<Field>) -> Result<()> {
        let old = self.stored_schema()?;
        let mut all: Vec<Field> = old.fields().iter().map(|f| f.as_ref().clone()).collect();
        all.extend(fields);
        let schema = Arc::new(Schema::new(all));
        let rows = self.current()?;
        let columns = schema
            .fields()
            .iter()
            .map(|f| match rows.column_by_name(f.name()) {
                Some(c) => Arc::clone(c),
                None => arrow::array::new_null_array(f.data_type(), rows.num_rows()),
            })
            .collect();
        let rows = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        self.with(|s| {
            s.schema = Some(schema);
            s.rows = Some(rows);
        });
        Ok(())
    }

    async fn widen(&mut self, schema: SchemaRef, _keys: &[String]) -> Result<WriteStats> {
        let rows = self.current()?;
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                let column = rows.column_by_name(f.name()).ok_or_else(|| {
                    EngineError::Internal(format!(
                        "widening `{}`: no column `{}`",
                        self.name,
                        f.name()
                    ))
                })?;
                Ok(arrow::compute::cast(column, f.data_type())?)
            })
            .collect::<Result<Vec<_>>>()?;
        let rows = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        self.with(|s| s.schema = Some(schema));
        let version = self.record(rows, None, None);
        Ok(WriteStats {
            version,
            ..WriteStats::default()
        })
    }

    async fn stage_overwrite(&mut self) -> Result<()> {
        self.overwrite = true;
        Ok(())
    }

    /// Memory has no files to mark: merge-on-read and copy-on-write hold the same rows.
    async fn write_merge_on_read(&mut self) -> Result<()> {
        Ok(())
    }

    async fn expire(&mut self, column: &str, before_us: i64) -> Result<usize> {
        let rows = self.current()?;
        let at = arrow::compute::cast(
            rows.column_by_name(column).ok_or_else(|| {
                EngineError::Internal(format!("`{}` has no column `{column}`", self.name))
            })?,
            &arrow::datatypes::DataType::Int64,
        )?;
        let at = at
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("cast to Int64");
        let keep =
            BooleanArray::from_iter(at.iter().map(|t| Some(t.is_none_or(|t| t >= before_us))));
        let kept = filter_record_batch(&rows, &keep)?;
        let expired = rows.num_rows() - kept.num_rows();
        if expired > 0 {
            self.record(kept, None, None);
        }
        Ok(expired)
    }
}

#[async_trait]
impl KeyedTable for MemTable {
    async fn lookup(&self, keys: RecordBatch, columns: &[String]) -> Result<RecordBatch> {
        let rows = self.current()?;
        let names: Vec<String> = keys
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let wanted: HashSet<OwnedRow> = key_rows(&keys, &names, &rows.schema())?
            .into_iter()
            .collect();
        let stored = key_rows(&rows, &names, &rows.schema())?;
        let mask = BooleanArray::from_iter(stored.iter().map(|r| Some(wanted.contains(r))));
        let found = filter_record_batch(&rows, &mask)?;
        let idx = columns
            .iter()
            .map(|c| found.schema().index_of(c))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(found.project(&idx)?)
    }

    async fn stage_deletes(&mut self, keys: RecordBatch) -> Result<()> {
        self.deletes.push(keys);
        Ok(())
    }
}

/// The in-memory lake as a backend of the conformance suite.
#[async_trait]
impl crate::Backend for MemLake {
    async fn create(_dir: &std::path::Path) -> Self {
        MemLake::new()
    }

    fn lake(&self) -> &dyn Lake {
        self
    }

    async fn scan(&self, table: &TableName) -> Option<RecordBatch> {
        self.rows(table)
    }
}
