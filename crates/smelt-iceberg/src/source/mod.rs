//! An Iceberg table's changes, as flows read them ([`ChangeSource`]).
//!
//! smelt's "version" of an Iceberg table is the **sequence number** of its snapshots: it
//! grows with every commit on the table's main branch, as a Delta version does (snapshot
//! ids are random). A run reads the snapshots after the watermark's sequence number up to
//! the current one, oldest first: the data files each one added are inserts, the data files
//! it removed are deletes, and so are the rows its position- and equality-delete files
//! delete (read when the flow applies source deletes); a `replace` (compaction) changes
//! nothing. The first run reads the current snapshot, delete files applied, each row
//! stamped with the sequence number and time of the snapshot that added its file.

mod carry_over;
mod plan;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use arrow::array::Int64Array;
use arrow::array::{ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::scan::FileScanTask;
use iceberg::spec::SnapshotRef;
use iceberg::table::Table;
use smelt_engine::ports::{ChangeSet, ChangeSource};
use smelt_spec::TableName;

use crate::bridge;
use crate::error::{Context, Error, Result};
use plan::{FileToRead, Part, Rows, plan_changes, plan_snapshot, steps};

/// Rows per batch read.
const BATCH_ROWS: usize = 64 * 1024;

/// The changes of an Iceberg table, pinned to the snapshot current when it was opened.
pub struct IcebergSource {
    name: TableName,
    table: Table,
    snapshot: Option<SnapshotRef>,
    /// The columns read: the current schema's, or a past snapshot's.
    iceberg_schema: iceberg::spec::SchemaRef,
    /// Bronze columns as smelt sees them (no field-id metadata).
    schema: SchemaRef,
    read_removed: bool,
    skipped: Mutex<HashSet<i64>>,
}

impl IcebergSource {
    /// Table `table` (named `name`) at its current snapshot.
    pub fn new(name: TableName, table: Table, read_removed: bool) -> Result<Self> {
        let snapshot = table.metadata().current_snapshot().cloned();
        let schema = table.metadata().current_schema().clone();
        Self::with(name, table, snapshot, schema, read_removed)
    }

    /// Table `table` as of its snapshot `id`: the rows it held then, in the columns it had
    /// then (what `smelt sql` reads for `VERSION AS OF` and `TIMESTAMP AS OF`).
    pub fn at_snapshot(name: TableName, table: Table, id: i64) -> Result<Self> {
        let metadata = table.metadata();
        let Some(snapshot) = metadata.snapshot_by_id(id).cloned() else {
            return Err(Error::user(
                format!("`{name}` has no snapshot {id}"),
                format!("its snapshots are listed by `DESCRIBE HISTORY {name}`"),
            ));
        };
        let schema = snapshot
            .schema(metadata)
            .context(|| format!("reading the schema of snapshot {id} of `{name}`"))?;
        Self::with(name, table, Some(snapshot), schema, false)
    }

    fn with(
        name: TableName,
        table: Table,
        snapshot: Option<SnapshotRef>,
        iceberg_schema: iceberg::spec::SchemaRef,
        read_removed: bool,
    ) -> Result<Self> {
        let arrow = iceberg::arrow::schema_to_arrow_schema(&iceberg_schema)
            .context(|| format!("reading the schema of `{name}`"))?;
        let schema = bridge::plain(&bridge::schema_from_58(&arrow)?);
        Ok(IcebergSource {
            name,
            table,
            snapshot,
            iceberg_schema,
            schema: Arc::new(schema),
            read_removed,
            skipped: Mutex::new(HashSet::new()),
        })
    }

    async fn plan(&self, after: Option<i64>) -> Result<(Vec<Part>, usize)> {
        let Some(snapshot) = &self.snapshot else {
            return Ok((Vec::new(), 0));
        };
        match after {
            None => {
                let files = plan_snapshot(&self.name, &self.table, snapshot).await?;
                Ok((files.into_iter().map(Part::File).collect(), 0))
            }
            Some(after) => {
                if after > snapshot.sequence_number() {
                    return Err(Error::user(
                        format!(
                            "`{}` is at sequence number {}, before the {after} already read: the table was rolled back or replaced",
                            self.name,
                            snapshot.sequence_number()
                        ),
                        "rebuild what reads it with `smelt run --full-refresh`",
                    ));
                }
                let skipped = self.skipped.lock().expect("not poisoned").clone();
                let steps: Vec<_> = steps(&self.name, &self.table, Some(snapshot), after)?
                    .into_iter()
                    .filter(|s| !skipped.contains(&s.snapshot.sequence_number()))
                    .collect();
                let changes =
                    plan_changes(&self.name, &self.table, &steps, self.read_removed).await?;
                Ok((changes.parts, changes.skipped_deletes))
            }
        }
    }

    /// The change batches of `part`.
    fn read_part(&self, part: Part) -> BoxStream<'static, Result<RecordBatch>> {
        match part {
            Part::File(file) => self.read_file(file),
            Part::Rewrite {
                removed,
                added,
                emit_removed,
            } => {
                let removed: Vec<_> = removed.into_iter().map(|f| self.read_file(f)).collect();
                let added: Vec<_> = added.into_iter().map(|f| self.read_file(f)).collect();
                let removed = stream::iter(removed).flatten().try_collect::<Vec<_>>();
                let added = stream::iter(added).flatten().try_collect::<Vec<_>>();
                let columns = self.schema.fields().len();
                stream::once(async move {
                    let (removed, added) = futures::try_join!(removed, added)?;
                    carry_over::changed(removed, added, columns, emit_removed)
                })
                .map_ok(|batches| stream::iter(batches.into_iter().map(Ok)))
                .try_flatten()
                .boxed()
            }
            Part::EqualityDeletes { deletes, rows_of } => {
                let (name, table, schema) =
                    (self.name.clone(), self.table.clone(), self.schema.clone());
                let rows: Vec<_> = rows_of.into_iter().map(|f| self.read_file(f)).collect();
                stream::once(async move {
                    let sets =
                        crate::deletes::read_equality(&name, &table, &schema, &deletes).await?;
                    Ok::<_, Error>(stream::iter(rows).flatten().map(move |batch| {
                        let batch = batch?;
                        let hit = sets.matches(&batch)?;
                        Ok(arrow::compute::filter_record_batch(&batch, &hit)?)
                    }))
                })
                .try_flatten()
                .boxed()
            }
        }
    }

    /// The rows of `file`, stamped with its change metadata.
    fn read_file(&self, file: FileToRead) -> BoxStream<'static, Result<RecordBatch>> {
        let iceberg_schema = self.iceberg_schema.clone();
        let task = FileScanTask {
            file_size_in_bytes: file.size,
            start: 0,
            length: file.size,
            record_count: Some(file.records),
            data_file_path: file.path.clone(),
            data_file_format: file.format,
            project_field_ids: iceberg_schema
                .as_struct()
                .fields()
                .iter()
                .map(|f| f.id)
                .collect(),
            schema: iceberg_schema,
            predicate: None,
            deletes: file.deletes.clone(),
            partition: Some(file.partition.clone()),
            partition_spec: file.spec.clone(),
            name_mapping: None,
            case_sensitive: true,
        };
        let runtime = match iceberg::Runtime::try_current() {
            Ok(r) => r,
            Err(e) => {
                return stream::once(async move {
                    Err(Error::Iceberg {
                        context: "the tokio runtime".into(),
                        source: Box::new(e),
                    })
                })
                .boxed();
            }
        };
        let reader = ArrowReaderBuilder::new(self.table.file_io().clone(), runtime)
            .with_data_file_concurrency_limit(1)
            .with_batch_size(BATCH_ROWS)
            .build();
        let (name, schema) = (self.name.clone(), self.schema.clone());
        let path = file.path.clone();
        let batches = reader
            .read(stream::iter([Ok(task)]).boxed())
            .map(|r| r.stream())
            .context(|| format!("reading `{path}` of `{name}`"));
        let batches = match batches {
            Ok(b) => b,
            Err(e) => return stream::once(async move { Err(e) }).boxed(),
        };
        let path = file.path.clone();
        let name = self.name.clone();
        // The file's row position of each batch's first row (position deletes).
        let mut offset = 0u64;
        batches
            .map(move |b| {
                let b = b.context(|| format!("reading `{path}` of `{name}`"))?;
                let rows = b.num_rows();
                let batch = stamp(b, &schema, &file)?;
                let at = offset;
                offset += rows as u64;
                let mask = match &file.rows {
                    Rows::All => return Ok(batch),
                    Rows::Only(positions) => crate::deletes::at_positions(positions, at, rows),
                    Rows::Except(positions) => {
                        arrow::compute::not(&crate::deletes::at_positions(positions, at, rows))?
                    }
                };
                Ok(arrow::compute::filter_record_batch(&batch, &mask)?)
            })
            .boxed()
    }
}

/// A batch of `file` as a change batch: the bronze columns, then the change metadata.
fn stamp(
    batch: arrow58_array::RecordBatch,
    schema: &SchemaRef,
    file: &FileToRead,
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let batch = bridge::batch_from_58(batch, schema)?;
    let mut fields: Vec<_> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(smelt_core::change::metadata_fields());
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(StringArray::from(vec![file.kind; rows])) as ArrayRef);
    columns.push(Arc::new(Int64Array::from(vec![file.version; rows])));
    columns.push(Arc::new(
        TimestampMicrosecondArray::from(vec![file.timestamp_us; rows]).with_timezone("UTC"),
    ));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

#[async_trait]
impl ChangeSource for IcebergSource {
    fn table(&self) -> &TableName {
        &self.name
    }

    fn version(&self) -> i64 {
        self.snapshot.as_ref().map_or(0, |s| s.sequence_number())
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn change_set(&self, after: Option<i64>) -> smelt_engine::Result<ChangeSet> {
        let (files, skipped) = self.plan(after).await?;
        Ok(ChangeSet {
            files_read: files.iter().map(|p| p.files().count()).sum(),
            bytes_read: files.iter().flat_map(|p| p.files()).map(|f| f.size).sum(),
            skipped_delete_files: skipped,
        })
    }

    fn read(&self, after: Option<i64>) -> BoxStream<'_, smelt_engine::Result<RecordBatch>> {
        stream::once(self.plan(after))
            .map_ok(move |(parts, _)| {
                stream::iter(parts)
                    .map(move |p| self.read_part(p))
                    .flatten()
            })
            .try_flatten()
            .map_err(smelt_engine::EngineError::from)
            .boxed()
    }

    async fn rewrites(&self, after: i64) -> smelt_engine::Result<Vec<(i64, String)>> {
        let steps = steps(&self.name, &self.table, self.snapshot.as_ref(), after)?;
        Ok(steps
            .into_iter()
            .filter(|s| s.rewrites)
            .map(|s| {
                (
                    s.snapshot.sequence_number(),
                    s.snapshot.summary().operation.as_str().to_string(),
                )
            })
            .collect())
    }

    fn snapshot_id(&self, version: i64) -> Option<i64> {
        let current = self.snapshot.as_ref()?;
        let metadata = self.table.metadata_ref();
        iceberg::util::snapshot::ancestors_of(&metadata, current.snapshot_id())
            .find(|s| s.sequence_number() == version)
            .map(|s| s.snapshot_id())
    }

    fn skip_versions(&self, versions: &[i64]) {
        self.skipped
            .lock()
            .expect("not poisoned")
            .extend(versions.iter().copied());
    }

    async fn version_at(&self, timestamp_us: i64) -> smelt_engine::Result<Option<i64>> {
        let Some(current) = &self.snapshot else {
            return Ok(None);
        };
        let metadata = self.table.metadata_ref();
        Ok(
            iceberg::util::snapshot::ancestors_of(&metadata, current.snapshot_id())
                .find(|s| s.timestamp_ms() * 1000 <= timestamp_us)
                .map(|s| s.sequence_number()),
        )
    }

    fn pin(&mut self, version: i64) -> smelt_engine::Result<()> {
        let Some(current) = &self.snapshot else {
            return Ok(());
        };
        if version >= current.sequence_number() {
            return Ok(());
        }
        let metadata = self.table.metadata_ref();
        self.snapshot = iceberg::util::snapshot::ancestors_of(&metadata, current.snapshot_id())
            .find(|s| s.sequence_number() <= version);
        Ok(())
    }
}
