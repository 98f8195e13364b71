//! The read: bronze changes streamed through the cast ([`CastPlan`]) into a
//! [`PartitionStore`] as they arrive; a cast failure under `on_cast_error: fail` or an
//! expectation failure under `on_violation: fail` fails the run once everything is counted.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use futures::TryStreamExt;
use smelt_spec::OnCastError;

use super::ApplyCx;
use super::cast::{CastFailure, CastPlan, CastSink};
use super::range::Range;
use super::spill::PartitionStore;
use crate::flow::FlowRun;
use crate::phases::Phases;
use crate::ports::ChangeSource;
use crate::rejects::Rejects;
use crate::report::FlowReport;
use crate::{EngineError, Result};

/// The changes one run read, cast, and what the read set aside.
pub(super) struct CastChanges {
    /// The cast changes to apply, by key partition.
    pub(super) store: PartitionStore,
    /// Changes quarantined so far (cast failures, expectations).
    pub(super) rejects: Rejects,
    /// The sequence columns of every truncate seen.
    pub(super) truncates: Vec<RecordBatch>,
}

/// Reads the changes of `range` from `source`, cast by `casting`, into `partitions` key
/// partitions, counting into `report`. Fails on the first cast failure under
/// `on_cast_error: fail` and the first expectation failure under `on_violation: fail`.
pub(super) async fn read_and_cast(
    cx: &ApplyCx<'_>,
    source: &dyn ChangeSource,
    casting: &CastPlan,
    partitions: usize,
    range: &Range,
    report: &mut FlowReport,
    phases: &mut Phases,
) -> Result<CastChanges> {
    let FlowRun {
        name: flow_name,
        spec: flow,
        ctx,
        ..
    } = *cx;
    let (watermark, v) = (range.after, range.to);
    let mut truncates: Vec<RecordBatch> = Vec::new();
    let mut store = PartitionStore::new(partitions, Arc::clone(&casting.schema))?;
    let mut cast_ms = 0u64;
    let mut first_failure: Option<CastFailure> = None;
    let mut first_violation: Option<String> = None;
    let mut rejects = Rejects::new(&ctx.run_id, flow_name, &flow.from, ctx.run_timestamp_us);
    let read_started = Instant::now();
    let changes = source.change_set(watermark).await?;
    let mut batches = source.read(watermark);
    while let Some(batch) = batches.try_next().await? {
        let started = Instant::now();
        report.changes_read += batch.num_rows();
        let cast = casting.cast(
            &batch,
            flow,
            &mut CastSink {
                report,
                first_failure: &mut first_failure,
                first_violation: &mut first_violation,
                rejects: &mut rejects,
                truncates: &mut truncates,
            },
        )?;
        // A run that will fail only keeps counting failures.
        let failing = (flow.on_cast_error == OnCastError::Fail && first_failure.is_some())
            || first_violation.is_some();
        if !failing {
            store.push(cast, &flow.keys)?;
        }
        cast_ms += started.elapsed().as_millis() as u64;
    }
    drop(batches);
    let read_ms = read_started.elapsed().as_millis() as u64;
    phases.add("read", read_ms.saturating_sub(cast_ms));
    phases.add("cast", cast_ms);
    report.files_read = changes.files_read;
    report.bytes_read = changes.bytes_read;
    report.delete_files_ignored = changes.skipped_delete_files;
    tracing::info!(flow = flow_name, after = ?watermark, to = v, rows = report.changes_read, files = changes.files_read, partitions, "read bronze changes");
    if let (OnCastError::Fail, Some(f)) = (flow.on_cast_error, first_failure) {
        let total = report.cast_failures_total();
        return Err(EngineError::Cast {
            source: Box::new(smelt_core::CoreError::CastFailed {
                column: f.column,
                target: f.target,
                value: f.value,
                context: format!(
                    " (bronze `{}` version {}, key {}); {total} value(s) failed in all",
                    flow.from, f.version, f.key
                ),
            }),
        });
    }
    if let Some(message) = first_violation {
        let total: usize = report.expectations.values().sum();
        return Err(EngineError::rule(
            smelt_rules::messages::expectations_failed(&message, total),
        ));
    }
    Ok(CastChanges {
        store,
        rejects,
        truncates,
    })
}
