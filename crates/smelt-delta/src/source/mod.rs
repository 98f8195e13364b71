//! Bronze changes from a Delta table's log (DESIGN §3.1).
//!
//! Rows come out in input order — commit version, then the order of files in the commit,
//! then row order inside a file — because the apply contract breaks sequence ties by it
//! (delta-rs' change-feed reader does not keep row order, DESIGN §9).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use deltalake::DeltaTable;
use deltalake::kernel::Action;
use deltalake::logstore::get_actions;
use smelt_core::change::{CHANGE_TYPE, DELETE, INSERT, metadata_fields};
use smelt_engine::ports::{ChangeSet, ChangeSource};
use smelt_spec::TableName;

use crate::error::{Context, Error, Result};
use crate::parquet::FileRef;

/// One data file to read, with the change metadata its rows get.
#[derive(Debug, Clone)]
struct FileToRead {
    file: FileRef,
    /// `Some(kind)` for data files (every row is that kind); `None` for change data files,
    /// which carry their own `_change_type` column.
    kind: Option<&'static str>,
    version: i64,
    timestamp_us: i64,
}

/// Summary of one commit of the bronze log.
#[derive(Debug, Default)]
struct Commit {
    timestamp_us: i64,
    operation: String,
    /// A `WRITE` with a predicate (replaceWhere): rows replaced, not the whole table.
    predicate: bool,
    adds: Vec<deltalake::kernel::Add>,
    removes: Vec<deltalake::kernel::Remove>,
    cdc: Vec<deltalake::kernel::AddCDCFile>,
}

/// The files of the changes after `after`, and the whole-file deletes skipped.
type Planned = (Option<i64>, Vec<FileToRead>, usize);

/// Bronze changes of one Delta table, pinned to the version seen at open.
pub struct DeltaSource {
    name: TableName,
    table: DeltaTable,
    version: i64,
    schema: SchemaRef,
    /// The last file plan.
    plan: std::sync::Mutex<Option<Planned>>,
    /// Read whole-file removes without change data as `delete` rows (`source_deletes: apply`).
    read_removed: bool,
    /// Versions left out of incremental reads.
    skipped: std::sync::Mutex<std::collections::HashSet<i64>>,
}

impl DeltaSource {
    /// Opens the bronze table at its latest version.
    pub async fn open(lake: &crate::Lake, name: &TableName) -> Result<Self> {
        let table = lake
            .open_existing(
                name,
                "create it first, e.g. `smelt sql -f bronze.sql`, or fix `from:` in the pipeline",
            )
            .await?;
        let version = table.version().map(|v| v as i64).unwrap_or(0);
        let snapshot = table.snapshot().context(|| format!("reading `{name}`"))?;
        let schema = normalize_schema(&snapshot.snapshot().arrow_schema());
        Ok(Self {
            name: name.clone(),
            table,
            version,
            schema,
            plan: std::sync::Mutex::new(None),
            read_removed: false,
            skipped: Default::default(),
        })
    }

    /// The last version committed at or before `timestamp_us` (µs since the epoch), `None`
    /// when the first commit is later. Commit times are read from the log (a binary
    /// search: they only grow); versions whose log entry is gone (log retention) count as
    /// earlier than any instant.
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
        let present = self
            .table
            .log_store()
            .read_commit_entry(version as u64)
            .await
            .context(|| format!("reading the log of `{}` at version {version}", self.name))?
            .is_some();
        if !present {
            return Ok(None);
        }
        Ok(Some(self.commit(version).await?.timestamp_us))
    }

    /// Pins the source to an earlier `version` (the end of a replay window).
    pub fn pin(mut self, version: i64) -> Self {
        self.version = version.min(self.version);
        *self.plan.lock().expect("not poisoned") = None;
        self
    }

    /// Also reads the rows of data files removed without change data (`DELETE` or
    /// `TRUNCATE` on a table without the change feed, an overwrite) as `delete` changes,
    /// for flows with `source_deletes: apply`. They come before the commit's added rows.
    pub fn with_removed_files(mut self, read: bool) -> Self {
        self.read_removed = read;
        self
    }

    async fn commit(&self, version: i64) -> Result<Commit> {
        let log_store = self.table.log_store();
        let bytes = log_store
            .read_commit_entry(version as u64)
            .await
            .context(|| format!("reading the log of `{}` at version {version}", self.name))?
            .ok_or_else(|| {
                Error::user(
                    format!("the log entry of `{}` version {version} is gone (log retention cleaned it up)", self.name),
                    "the changes of that version can no longer be read; rebuild silver with `smelt run --full-refresh`",
                )
            })?;
        let actions = get_actions(version as u64, &bytes)
            .context(|| format!("parsing the log of `{}` version {version}", self.name))?;
        let mut c = Commit::default();
        let mut ts = None;
        for a in actions {
            match a {
                Action::CommitInfo(info) => {
                    ts = info.in_commit_timestamp.or(info.timestamp);
                    c.operation = info.operation.unwrap_or_default();
                    c.predicate = info
                        .operation_parameters
                        .as_ref()
                        .and_then(|p| p.get("predicate"))
                        .is_some_and(|p| !p.is_null());
                }
                Action::Add(add) => c.adds.push(add),
                Action::Remove(r) => c.removes.push(r),
                Action::Cdc(cdc) => c.cdc.push(cdc),
                _ => {}
            }
        }
        c.timestamp_us = ts.ok_or_else(|| Error::user(format!("version {version} of `{}` has no commit timestamp", self.name), "the table was written by a tool that omits commitInfo; smelt cannot order its changes"))? * 1000;
        Ok(c)
    }

    /// A file named by an `add` or `cdc` action of version `version`, committed at
    /// `timestamp_us`; `kind` as in [`FileToRead`].
    fn file_to_read(
        &self,
        path: String,
        size: i64,
        partition_values: std::collections::HashMap<String, Option<String>>,
        kind: Option<&'static str>,
        version: i64,
        timestamp_us: i64,
    ) -> Result<FileToRead> {
        Ok(FileToRead {
            file: FileRef::from_log(&self.name.to_string(), path, size, partition_values)?,
            kind,
            version,
            timestamp_us,
        })
    }

    /// The data file of an `add` action: every row an insert.
    fn added(
        &self,
        add: deltalake::kernel::Add,
        version: i64,
        timestamp_us: i64,
    ) -> Result<FileToRead> {
        self.file_to_read(
            add.path,
            add.size,
            add.partition_values,
            Some(INSERT),
            version,
            timestamp_us,
        )
    }

    /// [`Self::plan_files`], remembered for the last `after` asked.
    async fn planned(&self, after: Option<i64>) -> Result<(Vec<FileToRead>, usize)> {
        if let Some((a, files, skipped)) = &*self.plan.lock().expect("not poisoned")
            && *a == after
        {
            return Ok((files.clone(), *skipped));
        }
        let (files, skipped) = self.plan_files(after).await?;
        *self.plan.lock().expect("not poisoned") = Some((after, files.clone(), skipped));
        Ok((files, skipped))
    }

    /// Files that make up the changes in `(after, version]`.
    async fn plan_files(&self, after: Option<i64>) -> Result<(Vec<FileToRead>, usize)> {
        let mut skipped_delete_files = 0;
        let Some(after) = after else {
            // Snapshot: the active files at `version`, in the order they were added, each with
            // the version and time of the commit that added it.
            let mut active: Vec<FileToRead> = Vec::new();
            for v in 0..=self.version {
                let c = self.commit(v).await?;
                let removed: std::collections::HashSet<&str> =
                    c.removes.iter().map(|r| r.path.as_str()).collect();
                if !removed.is_empty() {
                    active.retain(|f| !removed.contains(f.file.path.as_str()));
                }
                for add in c.adds {
                    active.push(self.added(add, v, c.timestamp_us)?);
                }
            }
            return Ok((active, 0));
        };
        let mut files = Vec::new();
        for v in (after + 1)..=self.version {
            if self.skipped.lock().expect("not poisoned").contains(&v) {
                continue;
            }
            let c = self.commit(v).await?;
            let adds: Vec<_> = c.adds.into_iter().filter(|a| a.data_change).collect();
            let removes = c.removes.iter().filter(|r| r.data_change).count();
            if !c.cdc.is_empty() {
                for cdc in c.cdc {
                    files.push(self.file_to_read(
                        cdc.path,
                        cdc.size,
                        cdc.partition_values,
                        None,
                        v,
                        c.timestamp_us,
                    )?);
                }
                continue;
            }
            let overwrite =
                (c.operation == "WRITE" && !c.predicate) || c.operation.starts_with("CREATE");
            if removes > 0 && !adds.is_empty() && !overwrite {
                return Err(Error::user(
                    format!(
                        "`{}` version {v} rewrites rows ({}) but has no change data: smelt cannot tell which rows changed",
                        self.name,
                        if c.operation.is_empty() {
                            "unknown operation"
                        } else {
                            &c.operation
                        }
                    ),
                    format!(
                        "turn on the change feed (`ALTER TABLE {} SET OPTIONS (enable_change_history = TRUE)`) before rewriting the table, then rebuild what reads it once with `smelt run --full-refresh`",
                        self.name
                    ),
                ));
            }
            // Whole-file removes without change data are deletes: ignored by apply flows
            // (bronze retention must never delete silver), so they are not read, unless
            // the flow applies bronze deletes.
            if self.read_removed {
                for r in c.removes.into_iter().filter(|r| r.data_change) {
                    files.push(self.file_to_read(
                        r.path,
                        r.size.unwrap_or_default(),
                        r.partition_values.unwrap_or_default(),
                        Some(DELETE),
                        v,
                        c.timestamp_us,
                    )?);
                }
            } else {
                skipped_delete_files += removes;
            }
            for add in adds {
                files.push(self.added(add, v, c.timestamp_us)?);
            }
        }
        Ok((files, skipped_delete_files))
    }

    /// Lines a file's batch up with the bronze schema and adds the change metadata.
    fn to_change_batch(
        &self,
        batch: &RecordBatch,
        file: &FileToRead,
        out: &SchemaRef,
    ) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let data = crate::parquet::conform(batch, &file.file, &self.schema)?;
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

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    async fn bytes_to_read(&self, after: Option<i64>) -> smelt_engine::Result<u64> {
        let (files, _) = self.planned(after).await?;
        Ok(files.iter().map(|f| f.file.size.max(0) as u64).sum())
    }

    async fn read_changes(
        &self,
        after: Option<i64>,
        sink: &mut (dyn FnMut(RecordBatch) -> smelt_engine::Result<()> + Send),
    ) -> smelt_engine::Result<ChangeSet> {
        let mut fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(metadata_fields());
        let out: SchemaRef = Arc::new(Schema::new(fields));
        let (files, skipped_delete_files) = self.planned(after).await?;
        tracing::debug!(table = %self.name, files = files.len(), skipped_delete_files, "planned bronze files");
        let mut bytes_read = 0u64;
        let name = self.name.to_string();
        for file in &files {
            crate::parquet::read_each(
                self.table.object_store(),
                &name,
                &file.file,
                None,
                None,
                true,
                |b| sink(self.to_change_batch(&b, file, &out)?),
            )
            .await?;
            bytes_read += file.file.size.max(0) as u64;
        }
        Ok(ChangeSet {
            files_read: files.len(),
            bytes_read,
            skipped_delete_files,
        })
    }
}
