//! The `export` flow (seed 003's `EXPORT DATA`): rows of a table changed since the last
//! export, as Parquet under a Hive-style folder `export_timestamp=<ts>/`, each change once.
//!
//! Files are written under hidden names (`.smelt-tmp-…`, which readers skip), then the
//! export's state — the source version and column bound it reaches, and the renames to
//! do — is saved through the [`ExportTarget`] port (each save a new file, created only if
//! absent, so two runs cannot both publish), then the files are renamed to their final
//! names and the state saved again without the renames. A crash before the state is saved
//! leaves only hidden files (removed by a later run, which exports the same rows again);
//! after, the next run finishes the renames first.

mod runner;
pub(crate) use runner::Export;

use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch, TimestampMicrosecondArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::functions_aggregate::min_max::MaxAccumulator;
use datafusion::logical_expr::Accumulator;
use futures::TryStreamExt;
use smelt_core::change::{CHANGE_TYPE, INSERT, UPDATE_POSTIMAGE, timestamp_utc};
use smelt_spec::{ChangedBy, ExportFlow};

use crate::flow::FlowRun;
use crate::phases::Phases;
use crate::ports::{ChangeSource, ExportFile, ExportState, ExportTarget, FileStores};
use crate::predicate::Predicate;
use crate::report::{FlowReport, ReadMode, ReportStatus};
use crate::{EngineError, Result, failpoint};

/// Prefix of files being written (hidden: readers skip them).
pub const TMP: &str = ".smelt-tmp-";

/// The partition folder's value: `at_us` in the flow's zone and format.
pub fn partition_value(flow: &ExportFlow, at_us: i64) -> Result<String> {
    let at = chrono::DateTime::from_timestamp_micros(at_us)
        .ok_or_else(|| EngineError::Internal(format!("run time {at_us} out of range")))?;
    let zone = &flow.partition_tz;
    let tz: arrow::array::timezone::Tz = zone.parse().map_err(|_| {
        EngineError::user(
            format!("unknown time zone `{zone}`"),
            "use an IANA name such as `Asia/Tokyo` or an offset such as `+09:00`",
        )
    })?;
    use std::fmt::Write;
    let mut text = String::new();
    write!(
        text,
        "{}",
        at.with_timezone(&tz).format(&flow.partition_format)
    )
    .map_err(|_| {
        EngineError::user(
            format!(
                "partition format `{}` is not a valid strftime format",
                flow.partition_format
            ),
            "use chrono's strftime fields, e.g. `%Y-%m-%d %H:%M:%S%:z`",
        )
    })?;
    if text.contains('/') {
        return Err(EngineError::user(
            format!(
                "partition format `{}` writes `/` (`{text}`)",
                flow.partition_format
            ),
            "a partition is one folder: use `-` between date parts (`%Y-%m-%d`, not `%D` or `%x`)",
        ));
    }
    Ok(text)
}

/// Exports the rows of `source` changed since the last export of `flow_name`.
pub async fn run_export(
    run: FlowRun<'_, ExportFlow>,
    source: &dyn ChangeSource,
    files: &dyn FileStores,
) -> Result<FlowReport> {
    let FlowRun {
        name: flow_name,
        spec: flow,
        ctx,
        reporter,
    } = run;
    // A plan of a first export: no folder yet, nothing exported.
    let first_plan = ctx.dry_run && files.target_missing(flow);
    let target = if first_plan {
        None
    } else {
        Some(files.export_target(flow_name, flow, !ctx.dry_run).await?)
    };
    let mut state = starting_state(target.as_deref(), ctx.full_refresh).await?;
    let v = source.version();
    let mut report = FlowReport {
        from_version: state.version,
        to_version: v,
        mode: if state.version.is_none() {
            ReadMode::Snapshot
        } else {
            ReadMode::Incremental
        },
        ..run.report()
    };
    let target = target.filter(|_| !ctx.dry_run);
    if let Some(target) = &target {
        // An export a crash interrupted: finish it (and clear what never became visible).
        publish(&**target, &mut state).await?;
    }
    if state.version == Some(v) {
        report.status = ReportStatus::UpToDate;
        return Ok(report);
    }
    let partition = partition_value(flow, ctx.run_timestamp_us)?;
    let folder = format!("{}={partition}", flow.partition_column);
    report.partition = Some(folder.clone());
    let Some(target) = target else {
        report.status = ReportStatus::Planned;
        return Ok(report);
    };

    let mut phases = Phases::new();
    reporter.phase(flow_name, "export");
    let source_schema = source.schema();
    let schema = file_schema(flow, &source_schema);
    let (after, newer) = changed_since(flow, &state, &source_schema)?;
    let mut max = column_max_accumulator(flow, &source_schema)?;
    let mut parts = PartFiles {
        target: &*target,
        flow,
        flow_name,
        short: &ctx.run_id[..8.min(ctx.run_id.len())],
        schema,
        folder: &folder,
        stamp: ctx.run_timestamp_us,
        open: None,
        renames: Vec::new(),
        rows_written: 0,
    };
    let read = write_changes(source, after, newer.as_ref(), &mut max, &mut parts).await?;
    report.changes_read = read;
    report.rows_written = parts.rows_written;
    report.files_written = parts.renames.len();
    phases.end("write files");

    // The state first (with the renames), then the renames: exactly once.
    let column_max = reached_max(max, &state)?;
    report.status = ReportStatus::Applied;
    let next = ExportState {
        version: Some(v),
        column_max,
        pending: parts.renames,
        run_id: Some(ctx.run_id.clone()),
        at_ms: Some(chrono::Utc::now().timestamp_millis()),
        report: serde_json::to_string(&report).ok(),
        number: state.number,
    };
    save_and_publish(&*target, next, &mut report).await?;
    report.status = ReportStatus::Applied;
    phases.end("publish");
    report.phases_ms = phases.done;
    Ok(report)
}

/// The state an export starts from: the one saved last; with `full_refresh` none, but
/// the next save still following the last; none without a target (a plan of a first
/// export).
async fn starting_state(
    target: Option<&dyn ExportTarget>,
    full_refresh: bool,
) -> Result<ExportState> {
    Ok(match (target, full_refresh) {
        (Some(t), false) => t.load().await?,
        // What was exported no longer counts, but the next save still follows the last.
        (Some(t), true) => ExportState {
            number: t.latest().await?,
            ..ExportState::default()
        },
        (None, _) => ExportState::default(),
    })
}

/// The schema of the files: the source's columns (but one named like the partition
/// column), then the partition column, the run's time.
fn file_schema(flow: &ExportFlow, source_schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = source_schema
        .fields()
        .iter()
        .filter(|f| f.name() != &flow.partition_column)
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(&flow.partition_column, timestamp_utc(), false));
    Arc::new(Schema::new(fields))
}

/// What counts as changed since the last export (`state`), as `changed_by` says: the
/// source version to read after, or a predicate over the `changed_by` column — above the
/// maximum exported last, else from `since` (none: every row).
fn changed_since(
    flow: &ExportFlow,
    state: &ExportState,
    source_schema: &SchemaRef,
) -> Result<(Option<i64>, Option<Predicate>)> {
    Ok(match &flow.changed_by {
        ChangedBy::Version => (state.version, None),
        ChangedBy::Column(c) => {
            if source_schema.field_with_name(c).is_err() {
                return Err(EngineError::user(
                    format!("`changed_by: {c}` names no column of `{}`", flow.from),
                    "use a column of the table, such as `updated_at`, or `version`",
                ));
            }
            let bound = match (&state.column_max, &flow.since) {
                (Some(max), _) => Some(format!("\"{c}\" > {max}")),
                (None, Some(since)) => Some(format!("\"{c}\" >= '{}'", since.replace('\'', "''"))),
                (None, None) => None,
            };
            let newer = bound
                .map(|sql| Predicate::compile(&sql, source_schema, "`changed_by`/`since`"))
                .transpose()?;
            (None, newer)
        }
    })
}

/// The running maximum of the `changed_by` column, with the column's name, when
/// `changed_by` names a column.
fn column_max_accumulator(
    flow: &ExportFlow,
    source_schema: &SchemaRef,
) -> Result<Option<(String, MaxAccumulator)>> {
    Ok(match &flow.changed_by {
        ChangedBy::Column(c) => Some((
            c.clone(),
            MaxAccumulator::try_new(source_schema.field_with_name(c)?.data_type())?,
        )),
        ChangedBy::Version => None,
    })
}

/// Reads the changes of `source` after `after` and writes its changed rows (those `newer`
/// holds for, when there is one) to `parts`, adding them to the running maximum `max`;
/// closes the last file. Returns how many changes it read.
async fn write_changes(
    source: &dyn ChangeSource,
    after: Option<i64>,
    newer: Option<&Predicate>,
    max: &mut Option<(String, MaxAccumulator)>,
    parts: &mut PartFiles<'_>,
) -> Result<usize> {
    let mut read = 0usize;
    let mut batches = source.read(after);
    while let Some(batch) = batches.try_next().await? {
        read += batch.num_rows();
        let Some(rows) = changed_rows(&batch, newer)? else {
            continue;
        };
        if let Some((c, acc)) = max.as_mut() {
            acc.update_batch(&[Arc::clone(rows.column_by_name(c).expect("checked"))])?;
        }
        parts.write(&rows).await?;
    }
    drop(batches);
    parts.close().await?;
    Ok(read)
}

/// The changed rows of the change batch `batch` — new rows and the new image of rewritten
/// ones — that `newer` holds for (all without it); `None` when there are none.
fn changed_rows(batch: &RecordBatch, newer: Option<&Predicate>) -> Result<Option<RecordBatch>> {
    let kinds = batch.column_by_name(CHANGE_TYPE).expect("change batch");
    let kinds = kinds.as_string::<i32>();
    let mut keep = arrow::array::BooleanArray::from_iter(
        kinds
            .iter()
            .map(|k| Some(matches!(k, Some(INSERT) | Some(UPDATE_POSTIMAGE)))),
    );
    if let Some(p) = newer {
        keep = arrow::compute::and(&keep, &p.evaluate(batch)?)?;
    }
    if keep.true_count() == 0 {
        return Ok(None);
    }
    Ok(Some(filter_record_batch(batch, &keep)?))
}

/// The files of one export, written under hidden names in its partition folder, each
/// closed once it holds `rows_per_file` rows.
struct PartFiles<'a> {
    /// Where the files go.
    target: &'a dyn ExportTarget,
    flow: &'a ExportFlow,
    /// The flow's name, in the hidden files' names.
    flow_name: &'a str,
    /// The start of the run id, in the files' names.
    short: &'a str,
    /// The files' columns: the source's, then the partition column.
    schema: SchemaRef,
    /// `<partition column>=<value>`.
    folder: &'a str,
    /// The partition column's value: the run's time (µs).
    stamp: i64,
    /// The file being written, and its rows so far.
    open: Option<(Box<dyn ExportFile>, usize)>,
    /// Each file's hidden name and final one, in the order they were started.
    renames: Vec<(String, String)>,
    /// Rows written to all of them.
    rows_written: usize,
}

impl PartFiles<'_> {
    /// Writes `rows` (source columns) with the partition column to the file being written,
    /// starting one if there is none, and closes it once it is full.
    async fn write(&mut self, rows: &RecordBatch) -> Result<()> {
        let schema = &self.schema;
        let n = rows.num_rows();
        let mut columns: Vec<_> = schema.fields()[..schema.fields().len() - 1]
            .iter()
            .map(|f| Arc::clone(rows.column_by_name(f.name()).expect("a source column")))
            .collect();
        columns.push(Arc::new(
            TimestampMicrosecondArray::from(vec![self.stamp; n]).with_timezone("UTC"),
        ));
        let out = RecordBatch::try_new(Arc::clone(schema), columns)?;
        if self.open.is_none() {
            let (folder, flow_name, short) = (self.folder, self.flow_name, self.short);
            let i = self.renames.len();
            let tmp = format!("{folder}/{TMP}{flow_name}-{short}-{i:05}.parquet");
            let name = format!("{folder}/part-{i:05}-{short}.parquet");
            let w = self
                .target
                .create(&tmp, Arc::clone(&self.schema), self.flow.compression)
                .await?;
            self.renames.push((tmp, name));
            self.open = Some((w, 0));
        }
        let (w, written) = self.open.as_mut().expect("opened above");
        w.write(&out).await?;
        *written += n;
        if *written >= self.flow.rows_per_file {
            let (w, _) = self.open.take().expect("open");
            w.close().await?;
        }
        self.rows_written += n;
        Ok(())
    }

    /// Closes the file being written, if any.
    async fn close(&mut self) -> Result<()> {
        if let Some((w, _)) = self.open.take() {
            w.close().await?;
        }
        Ok(())
    }
}

/// The column maximum an export reaches, from the running maximum `max`: the largest
/// value it wrote, or the one `state` saved when it wrote none; `None` without a
/// `changed_by` column.
fn reached_max(
    max: Option<(String, MaxAccumulator)>,
    state: &ExportState,
) -> Result<Option<String>> {
    Ok(match max {
        Some((_, mut acc)) => {
            let value = acc.evaluate()?;
            if value.is_null() {
                state.column_max.clone()
            } else {
                Some(crate::flow::replace_where::literal(&value)?)
            }
        }
        None => None,
    })
}

/// Saves `next` (with the renames it holds) to `target`, then does the renames, adding
/// the published files' sizes to `report`.
async fn save_and_publish(
    target: &dyn ExportTarget,
    mut next: ExportState,
    report: &mut FlowReport,
) -> Result<()> {
    failpoint("before_export_state")?;
    target.save(&mut next).await?;
    let published: Vec<String> = next.pending.iter().map(|(_, to)| to.clone()).collect();
    publish(target, &mut next).await?;
    for name in published {
        report.bytes_written += target.size(&name).await.unwrap_or(0);
    }
    Ok(())
}

/// Makes the files an export saved as pending visible (a crash may have stopped it after
/// the save).
async fn publish(target: &dyn ExportTarget, state: &mut ExportState) -> Result<()> {
    if state.pending.is_empty() {
        return Ok(());
    }
    failpoint("before_export_rename")?;
    target.publish(state).await
}

/// The state an export flow saved last, for `smelt status` and recovery.
pub async fn export_state(
    files: &dyn FileStores,
    flow_name: &str,
    flow: &ExportFlow,
) -> Result<ExportState> {
    files
        .export_target(flow_name, flow, false)
        .await?
        .load()
        .await
}
