//! Bronze changes from a Delta table's log (DESIGN §3.1).
//!
//! Rows come out in input order — commit version, then the order of files in the commit,
//! then row order inside a file — because the apply contract breaks sequence ties by it
//! (delta-rs' change-feed reader does not keep row order, DESIGN §9).
//!
//! Tables written by Spark and Databricks read right (docs/delta.md): deletion vectors are
//! applied (a commit that only adds or replaces vectors is the rows they delete), physical
//! column names are mapped to logical ones, snapshots start from the last checkpoint, and a
//! table needing a reader feature smelt lacks is refused by name.

mod plan;

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use deltalake::DeltaTable;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use smelt_core::change::{CHANGE_TYPE, metadata_fields};
use smelt_engine::ports::{ChangeSet, ChangeSource};
use smelt_spec::TableName;

use crate::dv::DvReader;
use crate::error::{Context, Error, Result};
use crate::features::ColumnNames;
use plan::FileToRead;

/// The files of the changes after `after`, and the deletes skipped.
type Planned = (Option<i64>, Vec<FileToRead>, usize);

/// Bronze changes of one Delta table, pinned to the version seen at open.
pub struct DeltaSource {
    name: TableName,
    table: DeltaTable,
    version: i64,
    schema: SchemaRef,
    /// How the data files name their columns (column mapping).
    names: ColumnNames,
    dvs: DvReader,
    /// The last file plan.
    plan: std::sync::Mutex<Option<Planned>>,
    /// Read rows deleted without change data as `delete` rows (`source_deletes: apply`).
    read_removed: bool,
    /// Versions left out of incremental reads.
    skipped: std::sync::Mutex<std::collections::HashSet<i64>>,
    /// The log's commit files and their times (listed on first use).
    clock: tokio::sync::OnceCell<crate::commit_time::CommitClock>,
}

impl DeltaSource {
    /// Opens the bronze table at its latest version. Fails, naming the feature, when smelt
    /// cannot read the table's rows right.
    pub async fn open(lake: &crate::Lake, name: &TableName) -> Result<Self> {
        Self::pinned(lake, name, None).await
    }

    /// Opens the bronze table at `version` (which must exist).
    pub async fn open_at(lake: &crate::Lake, name: &TableName, version: i64) -> Result<Self> {
        Self::pinned(lake, name, Some(version)).await
    }

    async fn pinned(lake: &crate::Lake, name: &TableName, at: Option<i64>) -> Result<Self> {
        let mut table = lake
            .open_existing(
                name,
                "create it first, e.g. `smelt sql -f bronze.sql`, or fix `from:` in the pipeline",
            )
            .await?;
        if let Some(v) = at {
            table
                .load_version(v as u64)
                .await
                .context(|| format!("reading `{name}` at version {v}"))?;
        }
        Self::of(name, table)
    }

    /// Table `name`, loaded at the version to read.
    pub(crate) fn of(name: &TableName, table: DeltaTable) -> Result<Self> {
        let version = table.version().map(|v| v as i64).unwrap_or(0);
        let state = table.snapshot().context(|| format!("reading `{name}`"))?;
        crate::features::check_readable(&name.to_string(), state)?;
        let schema = normalize_schema(&state.snapshot().arrow_schema());
        let names = ColumnNames::of(state);
        let dvs = DvReader::new(&name.to_string(), &table);
        Ok(Self {
            name: name.clone(),
            table,
            version,
            schema,
            names,
            dvs,
            plan: std::sync::Mutex::new(None),
            read_removed: false,
            skipped: Default::default(),
            clock: Default::default(),
        })
    }

    /// The last version committed at or before `timestamp_us` (µs since the epoch), `None`
    /// when the first commit is later. Commit times are Delta's (`commit_time`: the
    /// in-commit timestamp, else the log file's time made monotonic), so a binary search
    /// finds it; versions whose log entry is gone (log retention) count as earlier than any
    /// instant.
    pub async fn version_at(&self, timestamp_us: i64) -> Result<Option<i64>> {
        let at_or_before = |ts: Option<i64>| ts.is_none_or(|t| t <= timestamp_us);
        if !at_or_before(self.commit_time(0).await?) {
            return Ok(None);
        }
        let (mut lo, mut hi) = (0i64, self.version);
        // Invariant: version `lo` is at or before the instant.
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            if at_or_before(self.commit_time(mid).await?) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(Some(lo))
    }

    /// The commit time of `version` (µs), `None` when its log entry is gone.
    async fn commit_time(&self, version: i64) -> Result<Option<i64>> {
        let clock = self.clock().await?;
        if clock.in_commit(version) {
            return Ok(self.read_commit(version).await?.map(|c| c.timestamp_us));
        }
        Ok(clock
            .time(&self.name.to_string(), version, None)?
            .map(|ms| ms * 1000))
    }

    /// Also reads the rows deleted without change data (`DELETE` or `TRUNCATE` on a table
    /// without the change feed, deletion vectors, an overwrite) as `delete` changes, for
    /// flows with `source_deletes: apply`. They come before the commit's added rows.
    pub fn with_removed_files(mut self, read: bool) -> Self {
        self.read_removed = read;
        self
    }

    /// [`Self::plan_files`], remembered for the last `after` asked.
    async fn planned(&self, after: Option<i64>) -> Result<(Vec<FileToRead>, usize)> {
        if let Some((a, files, skipped)) = &*self.plan.lock().expect("not poisoned")
            && *a == after
        {
            return Ok((files.clone(), *skipped));
        }
        let (files, skipped) = match after {
            None => (self.plan_snapshot().await?, 0),
            Some(after) => self.plan_changes(after).await?,
        };
        *self.plan.lock().expect("not poisoned") = Some((after, files.clone(), skipped));
        Ok((files, skipped))
    }

    /// Lines a file's batch up with the bronze schema and adds the change metadata.
    fn to_change_batch(
        &self,
        batch: RecordBatch,
        file: &FileToRead,
        out: &SchemaRef,
    ) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let batch = self.names.to_logical(batch)?;
        let data = crate::parquet::conform(&batch, &file.file, &self.schema)?;
        let mut columns: Vec<ArrayRef> = data.columns().to_vec();
        let kind: ArrayRef = match (file.kind, batch.column_by_name(CHANGE_TYPE)) {
            (Some(kind), _) => Arc::new(StringArray::from(vec![kind; n])),
            (None, Some(c)) => arrow::compute::cast(c, &DataType::Utf8)?,
            (None, None) => {
                return Err(Error::user(
                    format!(
                        "change data file `{}` of `{}` has no `_change_type` column",
                        file.file.path, self.name
                    ),
                    "the table log is damaged",
                ));
            }
        };
        columns.push(kind);
        columns.push(Arc::new(Int64Array::from(vec![file.version; n])));
        columns.push(Arc::new(
            TimestampMicrosecondArray::from(vec![file.timestamp_us; n]).with_timezone("UTC"),
        ));
        Ok(RecordBatch::try_new(Arc::clone(out), columns)?)
    }
}

/// Bronze columns as smelt handles them: view and large string types become `Utf8`.
fn normalize_schema(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let dt = match f.data_type() {
                DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
                DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
                other => other.clone(),
            };
            Field::new(f.name(), dt, true)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

#[async_trait]
impl ChangeSource for DeltaSource {
    fn table(&self) -> &TableName {
        &self.name
    }

    async fn rewrites(&self, after: i64) -> smelt_engine::Result<Vec<(i64, String)>> {
        let mut out = Vec::new();
        for v in (after + 1)..=self.version {
            let c = self.commit(v).await?;
            if c.removes.iter().any(|r| r.data_change) {
                out.push((v, c.operation));
            }
        }
        Ok(out)
    }

    fn skip_versions(&self, versions: &[i64]) {
        self.skipped
            .lock()
            .expect("not poisoned")
            .extend(versions.iter().copied());
        *self.plan.lock().expect("not poisoned") = None;
    }

    fn version(&self) -> i64 {
        self.version
    }

    async fn version_at(&self, timestamp_us: i64) -> smelt_engine::Result<Option<i64>> {
        Ok(DeltaSource::version_at(self, timestamp_us).await?)
    }

    fn pin(&mut self, version: i64) -> smelt_engine::Result<()> {
        self.version = version.min(self.version);
        *self.plan.lock().expect("not poisoned") = None;
        Ok(())
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    async fn change_set(&self, after: Option<i64>) -> smelt_engine::Result<ChangeSet> {
        let (files, skipped_delete_files) = self.planned(after).await?;
        Ok(ChangeSet {
            files_read: files.len(),
            bytes_read: files.iter().map(|f| f.file.size.max(0) as u64).sum(),
            skipped_delete_files,
        })
    }

    fn read(&self, after: Option<i64>) -> BoxStream<'_, smelt_engine::Result<RecordBatch>> {
        let mut fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(metadata_fields());
        let out: SchemaRef = Arc::new(Schema::new(fields));
        futures::stream::once(async move {
            let (files, skipped_delete_files) = self.planned(after).await?;
            tracing::debug!(table = %self.name, files = files.len(), skipped_delete_files, "planned bronze files");
            let (store, name) = (self.table.object_store(), self.name.to_string());
            let batches = futures::stream::iter(files).flat_map(move |file| {
                let out = Arc::clone(&out);
                crate::parquet::read_stream(Arc::clone(&store), name.clone(), file.file.clone())
                    .map(move |b| Ok(self.to_change_batch(b?, &file, &out)?))
            });
            Ok::<_, smelt_engine::EngineError>(batches)
        })
        .try_flatten()
        .boxed()
    }
}
