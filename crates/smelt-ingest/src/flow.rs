//! One run of an `ingest` flow: the folder's new files → one bronze commit.
//!
//! Exactly once: the files a commit loads (URL, size, modification time) are recorded in
//! that commit's commit info, with the flow's watermark (a Delta `txn`, counting the
//! flow's loads). A run loads the listed files the log does not record, so a crash before
//! the commit loads them again on the next run, and a crash after it loads nothing twice.
//! Malformed rows go to `<bronze>__rejects`, committed before bronze; a rerun after a crash
//! between the two replaces the rows of the attempt that did not finish.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use smelt_core::change::timestamp_utc;
use smelt_engine::apply::{RunContext, app_id};
pub use smelt_engine::ports::IngestTables;
use smelt_engine::ports::{Reporter, SilverTable, Watermark};
use smelt_engine::rejects::rejects_table;
use smelt_engine::report::{FlowReport, ReadMode, ReportKind, ReportStatus};
use smelt_engine::stage::Buffered;
use smelt_engine::{EngineError, failpoint};
use smelt_spec::{FileFormat, IngestFlow};

use crate::conform::Conformer;
use crate::files::{Landing, LandingFile};
pub use crate::ledger::{FILES_KEY, FileStamp, Listing, files_entry, loaded_files, plan_files};
use crate::{IngestError, Malformed, RawRows, RowSink};

/// Table property that keeps the Delta log (which records the loaded files) from being
/// cleaned up.
pub const LOG_CLEANUP: &str = "delta.enableExpiredLogCleanup";

/// Malformed rows a run keeps for the rejects table at most; more fails the run (a wrong
/// `sep`, `columns` or `format` makes every line malformed).
const MAX_MALFORMED: usize = 100_000;

/// Rows read per batch.
const BATCH_ROWS: usize = 8192;

pub(crate) fn user(flow_name: &str, e: IngestError) -> EngineError {
    let hint = match &e {
        IngestError::Malformed { .. } => {
            "fix or replace the file (a new name loads as a new file), or move it out of the landing folder"
        }
        IngestError::Options(_) => "see docs/pipeline.md for the ingest options",
        IngestError::Io { .. } => "check that the file exists and can be read",
        IngestError::Arrow(_) => {
            return EngineError::Internal(e.to_string());
        }
    };
    EngineError::user(format!("flow `{flow_name}`: {e}"), hint)
}

/// Loads the new files of `flow` into bronze, in one commit with the loaded-file list and
/// the watermark. Returns the report (a plan when `ctx.dry_run`).
pub async fn run_ingest(
    flow_name: &str,
    flow: &IngestFlow,
    tables: IngestTables<'_>,
    ctx: &RunContext,
    reporter: &dyn Reporter,
) -> smelt_engine::Result<FlowReport> {
    let IngestTables { bronze, rejects } = tables;
    let started = Instant::now();
    let mut phases = Vec::new();
    reporter.phase(flow_name, "list files");
    let loaded = if ctx.full_refresh {
        HashMap::new()
    } else {
        loaded_files(bronze).await?
    };
    let landing = Landing::of(flow).map_err(|e| user(flow_name, e))?;
    let listing = plan_files(flow_name, flow, &landing, &loaded, ctx.full_refresh).await?;
    let app = app_id(flow_name);
    let done = bronze.watermark(&app).await?.unwrap_or(0);
    let mut report = FlowReport {
        flow: flow_name.to_string(),
        kind: ReportKind::Ingest,
        from: flow.from.clone(),
        into: flow.into.to_string(),
        run_id: ctx.run_id.clone(),
        mode: if ctx.full_refresh && bronze.schema().is_some() {
            ReadMode::Rebuild
        } else {
            ReadMode::Incremental
        },
        from_version: bronze.schema().is_some().then_some(done),
        to_version: done,
        files_found: listing.found.len(),
        files_new: listing.to_load.len(),
        files_changed: listing.changed.iter().map(|f| f.url.clone()).collect(),
        files_pending: listing.pending,
        bytes_read: listing.to_load.iter().map(|f| f.size).sum(),
        silver_version: bronze.version(),
        ..FlowReport::default()
    };
    phases.push((
        "list files".to_string(),
        started.elapsed().as_millis() as u64,
    ));
    if ctx.dry_run {
        report.status = ReportStatus::Planned;
        report.phases_ms = phases;
        return Ok(report);
    }
    let batch = done + 1;
    // Rejects an unfinished load left behind (a crash between the two commits) go, whatever
    // this run finds.
    let stale_rejects = !ctx.dry_run
        && rejects.schema().is_some()
        && rejects.watermark(&app).await?.is_some_and(|w| w >= batch);
    if listing.to_load.is_empty() {
        if stale_rejects {
            write_rejects(flow_name, &flow.into, rejects, batch, &[], ctx).await?;
        }
        report.status = ReportStatus::UpToDate;
        report.phases_ms = phases;
        return Ok(report);
    }
    report.to_version = batch;

    // Read every file into staged bronze data files.
    let started = Instant::now();
    reporter.phase(flow_name, "load files");
    if ctx.full_refresh && bronze.schema().is_some() {
        bronze.stage_overwrite().await?;
    }
    let total = (
        listing.to_load.len(),
        listing.to_load.iter().map(|f| f.size).sum::<u64>(),
    );
    let mut sink = Loader {
        progress: Progress {
            reporter,
            flow: flow_name,
            file: 0,
            before: 0,
            total,
            read: Arc::new(AtomicU64::new(0)),
        },
        conformer: Conformer::new(flow, bronze.schema()),
        bronze,
        buffer: Buffered::default(),
        malformed: Vec::new(),
        file: None,
        rescued: 0,
        columns_added: Vec::new(),
        error: None,
    };
    let mut done_bytes = 0;
    for (i, file) in listing.to_load.iter().enumerate() {
        reporter.files(flow_name, (i, done_bytes), total);
        sink.file = Some(file.clone());
        sink.progress.file = i;
        sink.progress.before = done_bytes;
        sink.progress.read.store(0, Ordering::Relaxed);
        let read_bytes = Arc::clone(&sink.progress.read);
        let read =
            tokio::task::block_in_place(|| read_file(flow, &landing, file, read_bytes, &mut sink));
        if let Some(e) = sink.error.take() {
            return Err(e);
        }
        read.map_err(|e| user(flow_name, e))?;
        if let Some(now) = landing.stat(file).await.map_err(|e| user(flow_name, e))?
            && (now.0 != file.size || now.1 != file.modified_us)
        {
            return Err(EngineError::user(
                format!(
                    "flow `{flow_name}`: `{}` changed while it was read (size {} → {}): it is being written",
                    file.url, file.size, now.0
                ),
                "nothing was committed; run again once the file is complete. Writers should write under a hidden name (`.name` or `_name`) and rename the file when done",
            ));
        }
        done_bytes += file.size;
    }
    reporter.files(flow_name, total, total);
    sink.flush().await?;
    let Loader {
        conformer,
        malformed,
        buffer,
        rescued,
        columns_added,
        ..
    } = sink;
    report.rows_written = buffer.rows_written;
    report.rescued = rescued;
    report.malformed = malformed.len();
    report.files_read = listing.to_load.len();
    report.columns_added = columns_added;
    phases.push((
        "load files".to_string(),
        started.elapsed().as_millis() as u64,
    ));

    let started = Instant::now();
    let watermark = |report: Option<String>, extra| Watermark {
        app_id: app.clone(),
        version: batch,
        run_id: ctx.run_id.clone(),
        report,
        extra,
    };
    if !malformed.is_empty() || stale_rejects || (ctx.full_refresh && rejects.schema().is_some()) {
        reporter.phase(flow_name, "write rejects");
        failpoint("before_ingest_rejects_commit")?;
        write_rejects(flow_name, &flow.into, rejects, batch, &malformed, ctx).await?;
        report.quarantined = malformed.len();
    }
    // Nothing to create bronze from (no file named a column: empty, or every line
    // malformed): nothing to record either, and the files are read again next run.
    if conformer.schema().is_none() {
        report.status = ReportStatus::NoColumns;
        report.phases_ms = phases;
        return Ok(report);
    }
    reporter.phase(flow_name, "commit");
    if bronze.property(LOG_CLEANUP).as_deref() != Some("false") {
        bronze.set_property(LOG_CLEANUP, "false").await?;
    }
    let files = files_entry(flow_name, ctx.full_refresh, &listing.to_load);
    report.status = ReportStatus::Applied;
    let mut committed = report.clone();
    committed.phases_ms = phases.clone();
    let report_json = serde_json::to_string(&committed).expect("serialisable");
    failpoint("before_bronze_commit")?;
    let stats = bronze
        .commit(&[], &watermark(Some(report_json), vec![files]))
        .await?;
    report.silver_version = Some(stats.version);
    report.files_written = stats.files_added;
    report.bytes_written = stats.bytes_written;
    phases.push(("commit".to_string(), started.elapsed().as_millis() as u64));
    report.phases_ms = phases;
    Ok(report)
}

/// Reads one file into `sink` (from a blocking context).
pub(crate) fn read_file(
    flow: &IngestFlow,
    landing: &Landing,
    file: &LandingFile,
    read_bytes: Arc<AtomicU64>,
    sink: &mut dyn RowSink,
) -> crate::Result<()> {
    let handle = tokio::runtime::Handle::current();
    let open = || -> crate::Result<Counting> {
        Ok(Counting {
            inner: landing.open(file, &handle)?,
            read: Arc::clone(&read_bytes),
        })
    };
    match flow.format {
        // Only the bytes listed: a file that grows while it is read loads as listed (and
        // counts as changed next run).
        FileFormat::Csv => crate::csv::read_csv(open()?, &file.url, &flow.csv, BATCH_ROWS, sink),
        FileFormat::Json => crate::json::read_json(open()?, &file.url, BATCH_ROWS, sink),
        FileFormat::Parquet => match landing.store_chunks(file, &handle) {
            Some(chunks) => {
                crate::parquet::read_parquet(chunks, &file.url, flow.infer_types, BATCH_ROWS, sink)
            }
            None => {
                let open = File::open(&file.path).map_err(|source| IngestError::Io {
                    file: file.url.clone(),
                    source,
                })?;
                crate::parquet::read_parquet(open, &file.url, flow.infer_types, BATCH_ROWS, sink)
            }
        },
    }
}

/// A reader that counts the bytes read, for progress.
struct Counting {
    inner: Box<dyn Read + Send>,
    read: Arc<AtomicU64>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Where the load is: files and bytes done.
struct Progress<'r> {
    reporter: &'r dyn Reporter,
    flow: &'r str,
    /// The file being read (0-based) and the bytes of the files before it.
    file: usize,
    before: u64,
    total: (usize, u64),
    /// Bytes of the current file read so far (text formats).
    read: Arc<AtomicU64>,
}

/// Conforms what the readers produce and writes it to bronze a few hundred thousand
/// rows at a time.
struct Loader<'a, 'b> {
    progress: Progress<'b>,
    conformer: Conformer<'a>,
    bronze: &'b mut dyn SilverTable,
    buffer: Buffered,
    malformed: Vec<(String, Malformed)>,
    file: Option<LandingFile>,
    rescued: usize,
    columns_added: Vec<String>,
    /// An error of the bronze table, raised from inside a reader's callback.
    error: Option<EngineError>,
}

impl Loader<'_, '_> {
    async fn flush(&mut self) -> smelt_engine::Result<()> {
        self.buffer.flush(&mut *self.bronze).await
    }

    /// Runs a bronze call from a reader's (blocking) callback.
    fn block_on<T>(
        &mut self,
        f: impl AsyncFnOnce(&mut Self) -> smelt_engine::Result<T>,
    ) -> crate::Result<T> {
        let handle = tokio::runtime::Handle::current();
        handle.block_on(f(self)).map_err(|e| {
            let message = e.to_string();
            self.error = Some(e);
            IngestError::Options(message)
        })
    }
}

impl RowSink for Loader<'_, '_> {
    fn rows(&mut self, rows: RawRows) -> crate::Result<()> {
        let file = self.file.clone().expect("set before reading");
        let out = self.conformer.conform(rows, &file)?;
        if !out.new_fields.is_empty() {
            // Rows of the old shape are written before the table changes shape.
            self.block_on(async |l| l.flush().await)?;
            let fields = out.new_fields.clone();
            let schema = Arc::clone(self.conformer.schema().expect("conformed"));
            self.block_on(async move |l| {
                if l.bronze.schema().is_none() {
                    l.bronze.create(schema).await
                } else {
                    l.columns_added
                        .extend(fields.iter().map(|f| f.name().clone()));
                    l.bronze.add_columns(fields).await
                }
            })?;
        }
        self.rescued += out.rescued;
        let p = &self.progress;
        p.reporter.files(
            p.flow,
            (p.file, p.before + p.read.load(Ordering::Relaxed)),
            p.total,
        );
        if self.buffer.push(out.batch) {
            self.block_on(async |l| l.flush().await)?;
        }
        Ok(())
    }

    fn malformed(&mut self, row: Malformed) -> crate::Result<()> {
        let file = self.file.as_ref().expect("set before reading").url.clone();
        if self.malformed.len() >= MAX_MALFORMED {
            return Err(IngestError::Malformed {
                file,
                message: format!(
                    "more than {MAX_MALFORMED} malformed rows in this run (the last: line {}, {}); the files do not look like the flow says",
                    row.line, row.reason
                ),
            });
        }
        self.malformed.push((file, row));
        Ok(())
    }
}

/// Column of the ingest rejects table holding the load (watermark) a row belongs to.
pub const INGEST_BATCH: &str = "ingest_batch";

/// The ingest rejects table's columns.
pub fn rejects_schema() -> SchemaRef {
    let text = |n: &str, null| Field::new(n, DataType::Utf8, null);
    Arc::new(Schema::new(vec![
        text("run_id", false),
        text("flow", false),
        Field::new(INGEST_BATCH, DataType::Int64, false),
        text("file", false),
        Field::new("line", DataType::Int64, false),
        text("reason", false),
        text("raw_line", false),
        Field::new("rejected_at", timestamp_utc(), false),
    ]))
}

/// Writes the malformed rows of load `batch`, replacing those an unfinished attempt at the
/// same load left behind.
async fn write_rejects(
    flow_name: &str,
    bronze: &smelt_spec::TableName,
    rejects: &mut dyn SilverTable,
    batch: i64,
    malformed: &[(String, Malformed)],
    ctx: &RunContext,
) -> smelt_engine::Result<()> {
    let schema = rejects_schema();
    match rejects.schema() {
        None => rejects.create(Arc::clone(&schema)).await?,
        Some(s) if s.fields() != schema.fields() => {
            return Err(EngineError::user(
                format!(
                    "flow `{flow_name}`: `{}` exists but is not an ingest rejects table",
                    rejects_table(bronze)
                ),
                "rename or drop that table; smelt keeps the rows of files that do not parse there",
            ));
        }
        Some(_) => {
            let app = app_id(flow_name);
            if ctx.full_refresh {
                rejects.stage_overwrite().await?;
            } else if rejects.watermark(&app).await?.is_some_and(|w| w >= batch) {
                let key = RecordBatch::try_new(
                    Arc::new(Schema::new(vec![Field::new(
                        INGEST_BATCH,
                        DataType::Int64,
                        false,
                    )])),
                    vec![Arc::new(Int64Array::from(vec![batch]))],
                )?;
                rejects.stage_deletes(key).await?;
            }
        }
    }
    let n = malformed.len();
    if n > 0 {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![ctx.run_id.as_str(); n])),
            Arc::new(StringArray::from(vec![flow_name; n])),
            Arc::new(Int64Array::from(vec![batch; n])),
            Arc::new(StringArray::from_iter_values(
                malformed.iter().map(|(f, _)| f),
            )),
            Arc::new(Int64Array::from_iter_values(
                malformed.iter().map(|(_, m)| m.line),
            )),
            Arc::new(StringArray::from_iter_values(
                malformed.iter().map(|(_, m)| &m.reason),
            )),
            Arc::new(StringArray::from_iter_values(
                malformed.iter().map(|(_, m)| &m.raw),
            )),
            Arc::new(
                TimestampMicrosecondArray::from(vec![ctx.run_timestamp_us; n]).with_timezone("UTC"),
            ),
        ];
        let rows = RecordBatch::try_new(schema, columns)?;
        let replaces = BooleanArray::from(vec![false; n]);
        rejects.stage(rows, &replaces, &[]).await?;
    }
    let watermark = Watermark {
        app_id: app_id(flow_name),
        version: batch,
        run_id: ctx.run_id.clone(),
        report: None,
        extra: Vec::new(),
    };
    rejects
        .commit(&[INGEST_BATCH.to_string()], &watermark)
        .await?;
    Ok(())
}
