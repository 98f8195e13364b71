//! One run of an `apply` flow (DESIGN §3): read → cast → latest per key → guard → write.
//!
//! [`run_apply`] runs the steps in order; each lives in its own file:
//!
//! - `schema.rs`: silver's schema, checked against the DDL and bronze (drift, keys,
//!   `column_list`);
//! - `range.rs`: the stored watermark, the bronze versions to read, up to date or not;
//! - `read.rs`: the read, streaming bronze changes through the cast (`cast.rs`) into key
//!   partitions, spilled to disk past the memory limit (`spill.rs`);
//! - `truncate.rs`: `apply_as_truncates` and the changes a truncate makes stale;
//! - per partition, `latest.rs` (latest change per key, conflicts, NULL keys), then the
//!   guard via `lookup.rs`: `scd1.rs` (the SCD1 plan) or `scd2.rs` (history);
//! - `tombstones.rs`: the tombstone table (schema, compatibility, expiry);
//! - `commit.rs`: staging each partition, then the commits: rejects → tombstones → silver
//!   with its watermark.

mod runner;
pub(crate) use runner::Apply;

use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::{Field, Schema, SchemaRef};
use smelt_spec::{ApplyFlow, OnCastError};

mod cast;
pub(crate) use cast::core_dialect;
mod commit;
mod latest;
mod lookup;
mod range;
mod read;
mod scd1;
mod scd2;
mod schema;
mod spill;
mod tombstones;
mod truncate;

pub use self::schema::{Drift, SilverSchema, drift, silver_schema};
pub use self::spill::partitions_for;
pub use self::tombstones::{DELETED_AT, tombstone_table};
pub use self::truncate::TRUNCATED_THROUGH;
pub use crate::context::{RunContext, app_id, default_memory_limit};

use self::cast::CastPlan;
use self::commit::{commit_tables, stage_partition};
use self::range::{Range, resolve_range};
use self::read::{CastChanges, read_and_cast};
use self::scd1::PartitionWork;
use self::schema::{FlowSchema, resolve_schema, resolve_schema_all};
use self::spill::PartitionStore;
use self::tombstones::{check_tombstones, expire_tombstones, tombstone_schema};
use self::truncate::resolve_truncates;
use crate::flow::FlowRun;
use crate::phases::Phases;
use crate::ports::{ChangeSource, LakeTable};
use crate::rejects::Rejects;
use crate::report::{FlowReport, ReportStatus};
use crate::{Result, failpoint};

/// Columns smelt fills itself: the rule both engines apply.
pub(super) use smelt_rules::predicate::is_audit;

/// The tables an apply flow writes.
pub struct ApplyTables<'a> {
    /// The silver table.
    pub silver: &'a mut dyn LakeTable,
    /// Its tombstone table ([`tombstone_table`]): the keys deleted so far and the sequence
    /// of their delete. Created with the first delete.
    pub tombstones: &'a mut dyn LakeTable,
    /// Its rejects table ([`crate::rejects::rejects_table`]): quarantined changes.
    /// Created with the first reject.
    pub rejects: &'a mut dyn LakeTable,
}

/// What every step of one apply run reads: the flow, the run's settings, where progress
/// goes.
type ApplyCx<'a> = FlowRun<'a, ApplyFlow>;

/// Runs (or plans, with `ctx.dry_run`) one apply flow.
pub async fn run_apply(
    cx: ApplyCx<'_>,
    source: &dyn ChangeSource,
    tables: ApplyTables<'_>,
) -> Result<FlowReport> {
    let ApplyTables {
        silver,
        tombstones,
        rejects: rejects_table,
    } = tables;
    let FlowRun {
        name: flow_name,
        spec: flow,
        ctx,
        reporter,
    } = cx;
    let mut phases = Phases::new();
    let app = app_id(flow_name);

    // The schema this run writes, checked against the flow and bronze.
    let bronze = source.schema();
    let FlowSchema {
        schema,
        to_add,
        widen,
        new_columns,
        as_deletes,
        state_schema,
        filter: filter_predicate,
    } = resolve_schema(flow, &*silver, &bronze)?;
    let audit_ingest = flow.audit.ingest_timestamp.as_deref();
    let audit_update = flow.audit.update_timestamp.as_deref();
    let tomb_schema = tombstone_schema(&schema, flow, audit_ingest)?;
    let widen_tombstones = check_tombstones(&tomb_schema, &*tombstones)?;

    // The range: the bronze versions to read, and the watermark to commit.
    let range = resolve_range(flow, source, &*silver, &app, ctx).await?;
    let mut report = start_report(&cx, &range, &*silver, &new_columns, &to_add);
    if range.up_to_date(flow, ctx)? {
        report.status = ReportStatus::UpToDate;
        phases.end("check");
        report.phases_ms = phases.done;
        return Ok(report);
    }

    // Memory plan: changes are cast as they stream in. When the cast change set would
    // not fit in its share of the memory limit, it is split by key hash into partitions
    // spilled to local disk (Arrow IPC) and applied one partition at a time; silver
    // commits once at the end either way.
    let partitions = partitions_for(source.bytes_to_read(range.after).await?, ctx.memory_limit);
    report.partitions = partitions;
    reporter.phase(flow_name, "read changes");
    let casting = CastPlan::for_flow(flow, &bronze, &schema, as_deletes)?;
    let CastChanges {
        mut store,
        mut rejects,
        truncates,
    } = read_and_cast(
        &cx,
        source,
        &casting,
        partitions,
        &range,
        &mut report,
        &mut phases,
    )
    .await?;

    // Truncates: the greatest one of this run empties silver as of its sequence, unless an
    // earlier run already truncated through a later one. Changes up to the greatest
    // truncate known are stale.
    let (truncate_now, stale_through) =
        resolve_truncates(flow, &mut *silver, truncates, &casting, ctx.dry_run).await?;
    report.truncated = truncate_now;

    // Tombstones ahead of silver: a crashed attempt committed them (through bronze version
    // `t`) but not silver. The deletes of versions up to `t` that wrote them are applied
    // again, not counted as stale.
    let replayed_tombstones = if work_is_fresh(ctx, truncate_now) {
        None
    } else {
        replayed_tombstones(&*tombstones, &app, &range).await?
    };
    let work = PartitionWork {
        flow,
        schema: &schema,
        state_schema: &state_schema,
        tomb_schema: &tomb_schema,
        filter: filter_predicate.as_ref(),
        audit_ingest,
        audit_update,
        run_timestamp_us: ctx.run_timestamp_us,
        fresh: work_is_fresh(ctx, truncate_now),
        replayed_tombstones,
        stale_through: stale_through.as_deref(),
        cast_sequence: &casting.sequence,
        stored_data: scd1::reads_stored_data(flow, audit_update),
    };
    let reshape = Reshape {
        schema: &schema,
        to_add: &to_add,
        tomb_schema: &tomb_schema,
        widen,
        widen_tombstones,
        replace: ctx.full_refresh || truncate_now,
    };
    let mut tombstones_staged = reshape
        .stage(&cx, &mut *silver, &mut *tombstones, &mut report)
        .await?;
    let tables = (&mut *silver as _, &mut *tombstones as _);
    let (store, so_far, r) = (&mut store, &mut rejects, &mut report);
    tombstones_staged |= (work.apply_all(&cx, store, so_far, tables, r, &mut phases)).await?;

    report.quarantined = rejects.len();
    if ctx.dry_run {
        report.status = ReportStatus::Planned;
        report.phases_ms = phases.done;
        return Ok(report);
    }

    let watermark_out = range.watermark(app, &ctx.run_id, source);
    let started = Instant::now();
    let tables = ApplyTables {
        silver: &mut *silver,
        tombstones: &mut *tombstones,
        rejects: &mut *rejects_table,
    };
    commit_tables(
        &cx,
        tables,
        rejects,
        watermark_out,
        tombstones_staged,
        &schema,
        &mut report,
    )
    .await?;
    phases.add("write", started.elapsed().as_millis() as u64);
    expire_tombstones(flow, ctx, &mut *tombstones, &mut report, &mut phases).await?;
    report.phases_ms = phases.done;
    reporter.done(flow_name);
    Ok(report)
}

impl PartitionWork<'_> {
    /// Plans every key partition of `store` in turn and, unless planning only, stages
    /// what it writes into silver and the tombstones; whether tombstones were staged.
    async fn apply_all(
        &self,
        cx: &ApplyCx<'_>,
        store: &mut PartitionStore,
        rejects: &mut Rejects,
        (silver, tombstones): (&mut dyn LakeTable, &mut dyn LakeTable),
        report: &mut FlowReport,
        phases: &mut Phases,
    ) -> Result<bool> {
        let partitions = store.partitions();
        let mut tombstones_staged = false;
        for p in 0..partitions {
            if partitions > 1 {
                cx.phase(&format!(
                    "apply changes (key partition {} of {partitions})",
                    p + 1
                ));
            } else {
                cx.phase("apply changes");
            }
            let started = Instant::now();
            let batch = store.take(p)?;
            phases.add("dedupe", started.elapsed().as_millis() as u64);
            let planned = if self.flow.scd == 2 {
                (self.plan_scd2(batch, &*silver, &*tombstones, report, phases)).await?
            } else {
                (self.plan(batch, &*silver, &*tombstones, rejects, report, phases)).await?
            };
            if cx.ctx.dry_run {
                continue;
            }
            let started = Instant::now();
            let (schema, tomb_schema) = (self.schema, self.tomb_schema);
            tombstones_staged |=
                stage_partition(cx, planned, silver, tombstones, schema, tomb_schema).await?;
            phases.add("write", started.elapsed().as_millis() as u64);
        }
        Ok(tombstones_staged)
    }
}

/// The tombstones' watermark when it is ahead of silver's (`range.stored`): a crashed
/// attempt committed them (through that bronze version) but not silver.
async fn replayed_tombstones(
    tombstones: &dyn LakeTable,
    app: &str,
    range: &Range,
) -> Result<Option<i64>> {
    if tombstones.version().is_none() {
        return Ok(None);
    }
    let t = tombstones.watermark(app).await?;
    Ok(t.filter(|&t| Some(t) > range.stored))
}

/// How a run reshapes silver and its tombstones before its data: wider types, new
/// columns, a rebuild's (or a truncate's) overwrite.
struct Reshape<'a> {
    schema: &'a SchemaRef,
    to_add: &'a [Field],
    tomb_schema: &'a SchemaRef,
    widen: bool,
    widen_tombstones: bool,
    /// A rebuild or a truncate: silver and its tombstones are replaced whole, in one
    /// commit each.
    replace: bool,
}

impl Reshape<'_> {
    /// Widens (each in a commit of its own), stages the new columns and the overwrites;
    /// whether the tombstones were staged.
    async fn stage(
        &self,
        cx: &ApplyCx<'_>,
        silver: &mut dyn LakeTable,
        tombstones: &mut dyn LakeTable,
        report: &mut FlowReport,
    ) -> Result<bool> {
        let (flow, dry_run) = (cx.spec, cx.ctx.dry_run);
        if self.widen && !dry_run {
            // Its own commit, before the data: a crash after it leaves a table the DDL
            // matches.
            cx.phase("widen column types");
            let widened = Arc::new(Schema::new(
                (self.schema.fields().iter())
                    .filter(|f| !self.to_add.iter().any(|a| a.name() == f.name()))
                    .map(|f| f.as_ref().clone())
                    .collect::<Vec<_>>(),
            ));
            failpoint("before_widen_commit")?;
            silver.widen(widened, &flow.keys).await?;
            report.types_widened = true;
        }
        if self.widen_tombstones && !dry_run {
            (tombstones.widen(Arc::clone(self.tomb_schema), &flow.keys)).await?;
            report.types_widened = true;
        }
        // Staged only: a plan sees the new columns (as NULL in stored rows) and writes
        // nothing.
        if !self.to_add.is_empty() && silver.schema().is_some() {
            silver.add_columns(self.to_add.to_vec()).await?;
        }
        let mut tombstones_staged = false;
        if self.replace && !dry_run {
            if silver.version().is_some() {
                silver.stage_overwrite().await?;
            }
            if tombstones.version().is_some() {
                tombstones.stage_overwrite().await?;
                tombstones_staged = true;
            }
        }
        Ok(tombstones_staged)
    }
}

/// The report of a run as it starts: the flow, the range it reads, the schema drift.
fn start_report(
    cx: &ApplyCx<'_>,
    range: &Range,
    silver: &dyn LakeTable,
    new_columns: &[Field],
    to_add: &[Field],
) -> FlowReport {
    let FlowRun {
        spec: flow, ctx, ..
    } = *cx;
    FlowReport {
        mode: range.mode(ctx, silver),
        from_version: range.after,
        to_version: range.to,
        silver_version: silver.version(),
        new_columns: new_columns.iter().map(|f| f.name().clone()).collect(),
        columns_added: to_add.iter().map(|f| f.name().clone()).collect(),
        on_cast_error: match flow.on_cast_error {
            OnCastError::Null => "null",
            OnCastError::Fail => "fail",
            OnCastError::Quarantine => "quarantine",
        }
        .to_string(),
        ..cx.report()
    }
}

/// A rebuild or a truncate: what silver and the tombstones store is not looked at.
fn work_is_fresh(ctx: &RunContext, truncate_now: bool) -> bool {
    ctx.full_refresh || truncate_now
}

/// Every problem a run of apply flow `flow_name` would meet before reading a change:
/// silver and its tombstones against the flow and the source's columns, and the flow's
/// predicates and expectations.
pub(crate) fn check_apply(
    flow: &ApplyFlow,
    source: &dyn ChangeSource,
    silver: &dyn LakeTable,
    tombstones: &dyn LakeTable,
) -> Vec<crate::EngineError> {
    let bronze = source.schema();
    let (resolved, mut problems) = resolve_schema_all(flow, silver, &bronze);
    let Some(resolved) = resolved else {
        return problems;
    };
    let audit_ingest = flow.audit.ingest_timestamp.as_deref();
    match tombstone_schema(&resolved.schema, flow, audit_ingest) {
        Ok(tomb_schema) => {
            if let Err(e) = check_tombstones(&tomb_schema, tombstones) {
                problems.push(e);
            }
        }
        Err(e) => problems.push(e),
    }
    // `apply_as_truncates` and the expectations, over the cast changes.
    if let Err(e) = CastPlan::for_flow(flow, &bronze, &resolved.schema, None) {
        problems.push(e);
    }
    problems
}
