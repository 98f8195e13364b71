//! The `append` flow (seed 004's append-only incremental transform): rows added to the
//! source since the watermark, filtered and cast, appended to the target, with the
//! watermark in the same commit.

mod runner;
pub(crate) use runner::Append;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::AsArray;
use arrow::compute::filter_record_batch;
use arrow::datatypes::{Int64Type, Schema, SchemaRef};
use futures::TryStreamExt;
use smelt_core::change::{CHANGE_TYPE, COMMIT_VERSION, INSERT};
use smelt_spec::{AppendFlow, OnCastError, OnRewrite};

use crate::cast::{CastMiss, cast_to_in};
use crate::flow::FlowRun;
use crate::flow::apply::app_id;
use crate::ports::{ChangeSource, LakeTable, Watermark, WatermarkSource};
use crate::predicate::Predicate;
use crate::report::{FlowReport, ReadMode, ReportStatus};
use crate::stage::{Buffered, commit_report};

/// The error of `on_cast_error: fail`.
pub(crate) fn cast_failed(
    source: &impl std::fmt::Display,
    miss: CastMiss,
    version: i64,
) -> EngineError {
    crate::flow::replace_where::cast_failed(miss, &format!("`{source}` version {version}"))
}
use crate::{EngineError, Result};

/// The error of `on_rewrite: fail`: the first of the source's `rewrites` (version,
/// operation) after version `after`, and how many there are.
pub fn rewrite_refused(
    source: &impl std::fmt::Display,
    after: i64,
    rewrites: &[(i64, String)],
) -> EngineError {
    let (version, operation) = rewrites
        .first()
        .map_or((after + 1, ""), |(v, op)| (*v, op.as_str()));
    EngineError::user(
        format!(
            "`{source}` version {version} rewrites rows ({}), and an append flow only appends{}",
            if operation.is_empty() {
                "unknown operation"
            } else {
                operation
            },
            if rewrites.len() > 1 {
                format!(" ({} such versions after {after})", rewrites.len())
            } else {
                String::new()
            }
        ),
        "set `on_rewrite: skip` to leave such commits out, or `on_rewrite: full_refresh` (or run `smelt run --full-refresh`) to rebuild the target from the source",
    )
}

/// Appends the rows `source` gained since the watermark of `flow_name` in `target` (all
/// rows of the source snapshot on the first run, or with `--full-refresh`, replacing the
/// target's).
pub async fn run_append(
    run: FlowRun<'_, AppendFlow>,
    source: &dyn ChangeSource,
    target: &mut dyn LakeTable,
) -> Result<FlowReport> {
    let FlowRun {
        name: flow_name,
        spec: flow,
        ctx,
        reporter,
    } = run;
    let app = app_id(flow_name);
    let v = source.version();
    let stored = target.watermark(&app).await?;
    let mut rebuild = ctx.full_refresh || stored.is_none();
    // The flow's policy, whether or not the run reads anything (as on Spark).
    let mut report = FlowReport {
        from_version: stored,
        to_version: v,
        silver_version: target.version(),
        on_cast_error: format!("{:?}", flow.on_cast_error).to_lowercase(),
        ..run.report()
    };
    if stored == Some(v) && !ctx.full_refresh {
        report.status = ReportStatus::UpToDate;
        report.mode = ReadMode::Incremental;
        return Ok(report);
    }
    if let Some(w) = stored.filter(|w| *w > v && !ctx.full_refresh) {
        return Err(EngineError::rule(smelt_rules::watermark::ahead(
            &format!("the target `{}`", flow.into),
            &format!("the source `{}`", flow.from),
            w,
            v,
            smelt_rules::watermark::AheadFix::FullRefresh,
        )));
    }
    let started = Instant::now();
    if let (Some(after), false) = (stored, rebuild) {
        reporter.phase(flow_name, "check source commits");
        let rewrites = source.rewrites(after).await?;
        if !rewrites.is_empty() {
            match flow.on_rewrite {
                OnRewrite::Fail => {
                    return Err(rewrite_refused(&flow.from, after, &rewrites));
                }
                OnRewrite::Skip => {
                    let versions: Vec<i64> = rewrites.iter().map(|(v, _)| *v).collect();
                    source.skip_versions(&versions);
                    report.skipped_versions = versions;
                }
                OnRewrite::FullRefresh => rebuild = true,
            }
        }
    }
    report.mode = if rebuild && target.schema().is_some() {
        ReadMode::Rebuild
    } else if rebuild {
        ReadMode::Snapshot
    } else {
        ReadMode::Incremental
    };

    let source_schema = source.schema();
    let (schema, filter, problems) = check_append(flow, &source_schema, target.schema());
    if let Some(e) = problems.into_iter().next() {
        return Err(e);
    }
    if ctx.dry_run {
        report.status = ReportStatus::Planned;
        return Ok(report);
    }
    if target.schema().is_none() {
        target.create(Arc::clone(&schema)).await?;
    } else if rebuild {
        target.stage_overwrite().await?;
    }

    reporter.phase(flow_name, "read and append");
    let mut buffer = Buffered::default();
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut read = 0usize;
    let mut filtered = 0usize;
    let mut ignored = 0usize;
    let after = if rebuild { None } else { stored };
    let mut batches = source.read(after);
    while let Some(batch) = batches.try_next().await? {
        read += batch.num_rows();
        // Appended rows only: update images and deletes of kept commits are not new rows.
        let kinds = batch
            .column_by_name(CHANGE_TYPE)
            .ok_or_else(|| EngineError::Internal("change batch without kind".into()))?;
        let mut keep = arrow::compute::kernels::cmp::eq(
            kinds,
            &arrow::array::StringArray::new_scalar(INSERT),
        )?;
        ignored += batch.num_rows() - keep.true_count();
        if let Some(p) = &filter {
            let both = arrow::compute::and(&keep, &p.evaluate(&batch)?)?;
            filtered += keep.true_count() - both.true_count();
            keep = both;
        }
        if keep.true_count() == 0 {
            continue;
        }
        let rows = filter_record_batch(&batch, &keep)?;
        let dialect = crate::flow::apply::core_dialect(flow.cast_dialect);
        let cast = cast_to_in(&rows, &schema, flow.tz.as_deref(), dialect)?;
        for (c, n) in cast.failures {
            *failures.entry(c).or_default() += n;
        }
        if let (OnCastError::Fail, Some(miss)) = (flow.on_cast_error, cast.first) {
            let version = rows
                .column_by_name(COMMIT_VERSION)
                .map(|c| c.as_primitive::<Int64Type>().value(miss.row))
                .unwrap_or_default();
            return Err(cast_failed(&flow.from, miss, version));
        }
        if buffer.push(cast.batch) {
            buffer.flush(target).await?;
        }
    }
    drop(batches);
    buffer.flush(target).await?;
    report.changes_read = read;
    report.ignored = ignored;
    report.filtered = filtered;
    report.rows_written = buffer.rows_written;
    report.inserted = buffer.rows_written;
    report.cast_failures = failures;
    let read_ms = started.elapsed().as_millis() as u64;

    reporter.phase(flow_name, "commit");
    let watermark = Watermark {
        app_id: app,
        version: v,
        run_id: ctx.run_id.clone(),
        report: None,
        extra: Vec::new(),
        source: Some(WatermarkSource::of(source, v)),
    };
    commit_report(target, watermark, report, ("read and append", read_ms)).await
}

/// The columns `flow` appends (the target's, else its DDL's, else the source's) and its
/// compiled `where`, checked against the source's columns `source_schema`: every problem,
/// in the order a run meets them.
pub(crate) fn check_append(
    flow: &AppendFlow,
    source_schema: &SchemaRef,
    target_schema: Option<SchemaRef>,
) -> (SchemaRef, Option<Predicate>, Vec<EngineError>) {
    let mut problems = Vec::new();
    let schema: SchemaRef = match (target_schema, &flow.target) {
        (Some(s), _) => s,
        (None, Some(def)) => crate::schema::arrow_schema(def),
        (None, None) => Arc::new(Schema::new(source_schema.fields().clone())),
    };
    let filter = flow.filter.as_deref().and_then(|sql| {
        Predicate::compile(sql, source_schema, "`where`")
            .map_err(|e| problems.push(e))
            .ok()
    });
    for missing in schema
        .fields()
        .iter()
        .filter(|f| source_schema.field_with_name(f.name()).is_err())
    {
        problems.push(EngineError::user(
            format!(
                "target column `{}` is not a column of `{}`",
                missing.name(),
                flow.from
            ),
            "add it to the source, or remove it from the target's CREATE TABLE",
        ));
    }
    (schema, filter, problems)
}
