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
use crate::ports::{ChangeSource, ExportFile, ExportState, FileStores};
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
    let mut state = match (&target, ctx.full_refresh) {
        (Some(t), false) => t.load().await?,
        // What was exported no longer counts, but the next save still follows the last.
        (Some(t), true) => ExportState {
            number: t.latest().await?,
            ..ExportState::default()
        },
        (None, _) => ExportState::default(),
    };
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
    let mut fields: Vec<Field> = source_schema
        .fields()
        .iter()
        .filter(|f| f.name() != &flow.partition_column)
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(&flow.partition_column, timestamp_utc(), false));
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    let (after, newer) = match &flow.changed_by {
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
                .map(|sql| Predicate::compile(&sql, &source_schema, "`changed_by`/`since`"))
                .transpose()?;
            (None, newer)
        }
    };
    let mut max = match &flow.changed_by {
        ChangedBy::Column(c) => Some((
            c.clone(),
            MaxAccumulator::try_new(source_schema.field_with_name(c)?.data_type())?,
        )),
        ChangedBy::Version => None,
    };
    let stamp = ctx.run_timestamp_us;
    let mut writer: Option<(Box<dyn ExportFile>, usize)> = None;
    let mut renames: Vec<(String, String)> = Vec::new();
    let mut rows_written = 0usize;
    let mut read = 0usize;
    let short = &ctx.run_id[..8.min(ctx.run_id.len())];
    let mut batches = source.read(after);
    while let Some(batch) = batches.try_next().await? {
        read += batch.num_rows();
        // Changed rows: new rows and the new image of rewritten ones.
        let kinds = batch.column_by_name(CHANGE_TYPE).expect("change batch");
        let kinds = kinds.as_string::<i32>();
        let mut keep = arrow::array::BooleanArray::from_iter(
            kinds
                .iter()
                .map(|k| Some(matches!(k, Some(INSERT) | Some(UPDATE_POSTIMAGE)))),
        );
        if let Some(p) = &newer {
            keep = arrow::compute::and(&keep, &p.evaluate(&batch)?)?;
        }
        if keep.true_count() == 0 {
            continue;
        }
        let rows = filter_record_batch(&batch, &keep)?;
        if let Some((c, acc)) = &mut max {
            acc.update_batch(&[Arc::clone(rows.column_by_name(c).expect("checked"))])?;
        }
        let n = rows.num_rows();
        let mut columns: Vec<_> = schema.fields()[..schema.fields().len() - 1]
            .iter()
            .map(|f| Arc::clone(rows.column_by_name(f.name()).expect("a source column")))
            .collect();
        columns.push(Arc::new(
            TimestampMicrosecondArray::from(vec![stamp; n]).with_timezone("UTC"),
        ));
        let out = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        if writer.is_none() {
            let i = renames.len();
            let tmp = format!("{folder}/{TMP}{flow_name}-{short}-{i:05}.parquet");
            let name = format!("{folder}/part-{i:05}-{short}.parquet");
            let w = target
                .create(&tmp, Arc::clone(&schema), flow.compression)
                .await?;
            renames.push((tmp, name));
            writer = Some((w, 0));
        }
        let (w, written) = writer.as_mut().expect("opened above");
        w.write(&out).await?;
        *written += n;
        if *written >= flow.rows_per_file {
            let (w, _) = writer.take().expect("open");
            w.close().await?;
        }
        rows_written += n;
    }
    drop(batches);
    if let Some((w, _)) = writer.take() {
        w.close().await?;
    }
    report.changes_read = read;
    report.rows_written = rows_written;
    report.files_written = renames.len();
    phases.end("write files");

    // The state first (with the renames), then the renames: exactly once.
    let column_max = match max {
        Some((_, mut acc)) => {
            let value = acc.evaluate()?;
            if value.is_null() {
                state.column_max.clone()
            } else {
                Some(crate::flow::replace_where::literal(&value)?)
            }
        }
        None => None,
    };
    report.status = ReportStatus::Applied;
    let mut next = ExportState {
        version: Some(v),
        column_max,
        pending: renames,
        run_id: Some(ctx.run_id.clone()),
        at_ms: Some(chrono::Utc::now().timestamp_millis()),
        report: serde_json::to_string(&report).ok(),
        number: state.number,
    };
    failpoint("before_export_state")?;
    target.save(&mut next).await?;
    let published: Vec<String> = next.pending.iter().map(|(_, to)| to.clone()).collect();
    publish(&*target, &mut next).await?;
    for name in published {
        report.bytes_written += target.size(&name).await.unwrap_or(0);
    }
    report.status = ReportStatus::Applied;
    phases.end("publish");
    report.phases_ms = phases.done;
    Ok(report)
}

/// Makes the files an export saved as pending visible (a crash may have stopped it after
/// the save).
async fn publish(target: &dyn crate::ports::ExportTarget, state: &mut ExportState) -> Result<()> {
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
