//! An apply flow on Spark: the contract of DESIGN §3 (SCD1) and §4 (SCD2), compiled into
//! Spark SQL. The run mirrors the embedded engine's `smelt_engine::flow::apply`:
//!
//! 1. Where things stand ([`discover`]): bronze's version, silver's watermark (the Delta
//!    `txn` of `smelt/<flow>`) and last commit, whether the tombstones exist; silver's
//!    columns ([`columns`]) and the run's [`shape`].
//! 2. What to read (`crate::delta::read`, `crate::iceberg`): the change rows of the versions
//!    after the watermark (or the snapshot), in log order.
//! 3. The typed changes ([`cast`]: `smelt_changes`), cached on the cluster, and their counts.
//! 4. What each key's changes do: `scd1` (the latest change per key, guarded: `smelt_stage`)
//!    or `scd2` (each touched key's history rebuilt), side by side.
//! 5. The writes ([`commit`]): rejects, tombstones, then silver with the report, each
//!    carrying the watermark; then tombstone expiry.

mod cast;
pub(crate) mod columns;
mod commit;
pub(crate) mod discover;
mod fail;
mod rejects;
mod scd1;
pub(crate) mod scd2;
pub(crate) mod shape;
mod tombstones;

use std::collections::BTreeMap;

use smelt_engine::context::RunContext;
use smelt_engine::flow::apply::tombstone_table;
use smelt_engine::flow::report_head;
use smelt_engine::report::{FlowReport, ReadMode, ReportStatus};
use smelt_engine::{EngineError, Result};
use smelt_spec::{ApplyFlow, OnCastError, OnViolation, SourceDeletes};

use crate::delta::log::Span;
pub(crate) use crate::delta::log::VIEWS;
pub(crate) use discover::{State, discover};
use scd1::Targets;
pub(crate) use shape::Shape;

use crate::delta::read as rows;
use crate::delta::txn;
use crate::flow::tables::ahead_fix;
use crate::iceberg::rows as ice_rows;
use crate::places::Places;
use crate::session::Session;
use smelt_rules::watermark;

/// One SCD1 flow run.
pub(crate) struct Apply<'a> {
    pub(crate) name: &'a str,
    /// The flow, its predicates as Spark SQL ([`crate::predicate::apply_flow`]).
    pub(crate) spec: &'a ApplyFlow,
    /// The flow as written: what messages quote.
    pub(crate) written: &'a ApplyFlow,
    pub(crate) places: &'a Places,
    pub(crate) ctx: &'a RunContext,
}

/// The counts a run collects.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) changes_read: usize,
    pub(crate) ignored: usize,
    pub(crate) cast_failures: BTreeMap<String, usize>,
    /// Changes failing each expectation (by name).
    pub(crate) expectations: BTreeMap<String, usize>,
    pub(crate) winners: usize,
    pub(crate) inserted: usize,
    pub(crate) updated: usize,
    pub(crate) unchanged: usize,
    pub(crate) deleted: usize,
    pub(crate) stale: usize,
    pub(crate) tombstones: usize,
    pub(crate) rejected: usize,
    pub(crate) conflicts: usize,
    pub(crate) filtered: usize,
    pub(crate) kept: usize,
}

impl Apply<'_> {
    /// Runs (or plans) the flow on `session`; `state` is where things stood before.
    pub(crate) async fn run(&self, s: &Session<'_>, state: &State) -> Result<FlowReport> {
        let spec = self.spec;
        let columns = columns::resolve(spec, state)?;
        let silver: Vec<&str> = columns
            .silver
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        let bronze: Vec<&str> = state
            .bronze_schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        crate::predicate::check_apply_scopes(self.written, &silver, &bronze)?;
        let shape = Shape::new(spec, &columns.silver).adding(&columns.to_add);
        let mut report = self.report(state);
        report.new_columns = columns.new_columns.clone();
        report.columns_added = columns.to_add.iter().map(|c| c.name.clone()).collect();
        let (span, mode) = match (self.ctx.full_refresh, state.watermark) {
            // As embedded: a rebuild of a silver that does not exist yet is its first run.
            (true, _) if state.silver.is_none() => {
                (Span::Snapshot(state.bronze_version), ReadMode::Snapshot)
            }
            (true, _) => (Span::Snapshot(state.bronze_version), ReadMode::Rebuild),
            (false, None) => (Span::Snapshot(state.bronze_version), ReadMode::Snapshot),
            (false, Some(w)) if w == state.bronze_version => {
                report.status = ReportStatus::UpToDate;
                report.mode = ReadMode::Incremental;
                return Ok(report);
            }
            (false, Some(w)) if w > state.bronze_version => {
                return Err(EngineError::rule(watermark::ahead(
                    &format!("silver `{}`", spec.into),
                    &format!("bronze `{}`", spec.from),
                    w,
                    state.bronze_version,
                    ahead_fix(&spec.into),
                )));
            }
            (false, Some(w)) => (Span::Range(w, state.bronze_version), ReadMode::Incremental),
        };
        report.mode = mode;
        txn::reset_watermark(s).await?;
        crate::flow::run_settings(s, spec.tz.as_deref(), spec.into.catalog.is_some()).await?;
        // The stage's many aliased columns make constraint propagation explode (the
        // optimizer ran minutes and out of memory on a 20-column silver).
        s.setting("SET spark.sql.constraintPropagation.enabled=false".to_string())
            .await?;
        crate::flow::apply::scd2::keep_analyzed_views(s, shape.history.is_some()).await?;
        let files = self.read_changes(s, state, span, &mut report).await?;
        report.files_read = files.0;
        report.bytes_read = files.1;
        let mut counts = self.changes(s, &shape).await?;
        let rebuild = mode == ReadMode::Rebuild;
        let silver_sql = self.places.sql(&spec.into);
        let tomb_sql = self.places.sql(&tombstone_table(&spec.into));
        let targets = Targets {
            silver: (state.silver.is_some() && !rebuild).then_some(silver_sql.as_str()),
            tombstones: (state.tombstones && !rebuild).then_some(tomb_sql.as_str()),
            run_us: self.ctx.run_timestamp_us,
            // A run killed after the tombstones' statement left them ahead of silver: a
            // delete equal to its own tombstone is this run's, and still to apply.
            replayed_through: state
                .tombstones_txn
                .filter(|&t| state.watermark.is_none_or(|w| t > w)),
        };
        match shape.history.is_some() {
            true => {
                let stored = crate::flow::apply::scd2::Stored {
                    silver: targets.silver,
                    tombstones: targets.tombstones,
                    replayed_through: targets.replayed_through,
                };
                self.history(s, &shape, stored, &mut counts).await?;
            }
            false => self.latest(s, &shape, targets, &mut counts).await?,
        }
        fill(&mut report, &counts, spec);
        if s.mode == crate::session::Mode::Plan {
            report.status = ReportStatus::Planned;
            return Ok(report);
        }
        report.status = ReportStatus::Applied;
        if state.silver.is_some() && !columns.to_add.is_empty() {
            // Before the watermark: a rerun after a kill here finds the columns there.
            let sql = columns.add_columns(&silver_sql);
            s.write(
                Some("before_spark_add_columns"),
                "add the new columns to silver",
                sql,
            )
            .await?;
        }
        self.write(s, &shape, state, rebuild, &mut report).await?;
        Ok(report)
    }

    /// The report's fixed part.
    fn report(&self, state: &State) -> FlowReport {
        FlowReport {
            from_version: if self.ctx.full_refresh {
                None
            } else {
                state.watermark
            },
            to_version: state.bronze_version,
            on_cast_error: match self.spec.on_cast_error {
                OnCastError::Null => "null",
                OnCastError::Fail => "fail",
                OnCastError::Quarantine => "quarantine",
            }
            .to_string(),
            silver_version: state.silver.as_ref().map(|l| l.version),
            partitions: 1,
            ..report_head(self.name, self.spec, &self.ctx.run_id)
        }
    }

    /// Steps 2: the views up to `smelt_raw`; the files read and their bytes.
    async fn read_changes(
        &self,
        s: &Session<'_>,
        state: &State,
        span: Span,
        report: &mut FlowReport,
    ) -> Result<(usize, u64)> {
        let location = self.places.location(&self.spec.from);
        let from = self.spec.from.to_string();
        if let Some(meta) = &state.bronze_meta {
            let table = self.places.sql(&self.spec.from);
            let src = ice_rows::Source {
                name: &from,
                table: &table,
                meta,
                columns: &state.bronze_columns,
                removes: self.spec.source_deletes == SourceDeletes::Apply,
            };
            let snaps = match span {
                Span::Range(after, _) => Some(ice_rows::range(&src, after)?),
                Span::Snapshot(_) => None,
            };
            let (files, bytes, ignored) = ice_rows::rows(s, src, snaps.as_deref()).await?;
            report.delete_files_ignored = ignored;
            return Ok((files, bytes));
        }
        let src = rows::Source {
            name: &from,
            location: &location,
            version: state.bronze_version,
            columns: &state.bronze_columns,
            removes: self.spec.source_deletes == SourceDeletes::Apply,
        };
        let opened = rows::open(s, src, span).await?;
        if let Span::Range(after, to) = span {
            report.delete_files_ignored =
                discover::check_rewrites(s, self.spec, (after, to)).await?;
        }
        rows::rows(s, src, span, &opened).await
    }
}

/// The counts into the report.
fn fill(report: &mut FlowReport, c: &Counts, spec: &ApplyFlow) {
    report.changes_read = c.changes_read;
    report.ignored = c.ignored;
    report.cast_failures = c.cast_failures.clone();
    report.duplicates_collapsed = c.kept.saturating_sub(c.winners);
    report.inserted = c.inserted;
    report.updated = c.updated;
    report.unchanged = c.unchanged;
    report.deleted = c.deleted;
    report.stale = c.stale;
    report.tombstones_written = c.tombstones;
    report.rejected = c.rejected;
    report.sequence_conflicts = c.conflicts;
    report.filtered = c.filtered;
    if spec.on_cast_error == OnCastError::Quarantine {
        report.quarantined = c.cast_failures.values().sum();
    }
    report.expectations = c.expectations.clone();
    let violations: usize = c.expectations.values().sum();
    match spec.on_violation {
        OnViolation::Drop => report.dropped = violations,
        OnViolation::Quarantine => report.quarantined += violations,
        OnViolation::Warn | OnViolation::Fail => {}
    }
}
