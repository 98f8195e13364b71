//! Writing what a run planned: each partition staged as it is planned, then the commits in
//! their order — rejects, then tombstones, then silver with its watermark (and the run
//! report) — with a failpoint before each.

use std::sync::Arc;

use arrow::array::BooleanArray;
use arrow::datatypes::SchemaRef;

use super::scd1::Planned;
use super::{ApplyCx, ApplyTables};
use crate::flow::FlowRun;
use crate::ports::{LakeTable, Watermark};
use crate::rejects::Rejects;
use crate::report::FlowReport;
use crate::stage::commit_with_report;
use crate::{Result, failpoint};

/// Stages what one partition writes: silver's rows and removes (creating silver for its
/// first rows), the tombstones and the tombstones to remove. True when tombstones were
/// staged.
pub(super) async fn stage_partition(
    cx: &ApplyCx<'_>,
    planned: Planned,
    silver: &mut dyn LakeTable,
    tombstones: &mut dyn LakeTable,
    schema: &SchemaRef,
    tomb_schema: &SchemaRef,
) -> Result<bool> {
    let FlowRun {
        name: flow_name,
        spec: flow,
        reporter,
        ..
    } = *cx;
    let mut tombstones_staged = false;
    if planned.rows.num_rows() > 0 || planned.removes.num_rows() > 0 {
        reporter.phase(flow_name, "write silver");
        if silver.schema().is_none() {
            silver.create(Arc::clone(schema)).await?;
        }
        silver
            .stage(planned.rows, &planned.replaces, &flow.keys)
            .await?;
        if planned.removes.num_rows() > 0 {
            silver.stage_deletes(planned.removes).await?;
        }
    }
    if planned.tombstones.num_rows() > 0 {
        if tombstones.schema().is_none() {
            tombstones.create(Arc::clone(tomb_schema)).await?;
        }
        tombstones
            .stage(planned.tombstones, &planned.tombstone_replaces, &flow.keys)
            .await?;
        tombstones_staged = true;
    }
    if planned.tombstone_removes.num_rows() > 0 {
        tombstones.stage_deletes(planned.tombstone_removes).await?;
        tombstones_staged = true;
    }
    Ok(tombstones_staged)
}

/// Commits a run: rejects first, then tombstones (if `tombstones_staged`), then silver with
/// `watermark_out` and the report as of this commit; the commit's file counts go into
/// `report`.
pub(super) async fn commit_tables(
    cx: &ApplyCx<'_>,
    tables: ApplyTables<'_>,
    rejects: Rejects,
    watermark_out: Watermark,
    tombstones_staged: bool,
    schema: &SchemaRef,
    report: &mut FlowReport,
) -> Result<()> {
    let FlowRun {
        name: flow_name,
        spec: flow,
        reporter,
        ..
    } = *cx;
    let ApplyTables {
        silver,
        tombstones,
        rejects: rejects_table,
    } = tables;
    let watermark_to = watermark_out.version;
    // Rejects commit first, then tombstones, then silver with its watermark. A crash in
    // between reruns the range: rejects of versions the rejects table has recorded are
    // not written again.
    if !rejects.is_empty() {
        reporter.phase(flow_name, "write rejects");
        let done = rejects_table.watermark(&watermark_out.app_id).await?;
        let rows = rejects.between(done, watermark_to)?;
        if rows.num_rows() > 0 {
            if rejects_table.schema().is_none() {
                rejects_table.create(rows.schema()).await?;
            }
            let replaces = BooleanArray::from(vec![false; rows.num_rows()]);
            rejects_table.stage(rows, &replaces, &[]).await?;
            failpoint("before_rejects_commit")?;
            rejects_table.commit(&[], &watermark_out).await?;
        }
    }
    // Tombstones commit before silver: a crash before the silver commit reruns the same range,
    // which finds its tombstones written and leaves them as they are (the guard is
    // strict), while a crash after it would lose them.
    if tombstones_staged {
        reporter.phase(flow_name, "commit tombstones");
        failpoint("before_tombstones_commit")?;
        tombstones.commit(&flow.keys, &watermark_out).await?;
    }
    reporter.phase(flow_name, "commit silver");
    if silver.schema().is_none() {
        silver.create(Arc::clone(schema)).await?;
    }
    let stats = commit_with_report(
        silver,
        &flow.keys,
        watermark_out,
        report,
        "before_silver_commit",
    )
    .await?;
    tracing::info!(
        flow = flow_name,
        silver_version = stats.version,
        files_added = stats.files_added,
        files_removed = stats.files_removed,
        "committed silver and watermark"
    );
    Ok(())
}
