//! An apply flow with `scd: 1` on Spark: the contract of DESIGN §3, compiled into Spark SQL.
//!
//! 1. Where things stand (reads): bronze's version, silver's watermark (the Delta `txn` of
//!    `smelt/<flow>` in silver's log) and last commit, whether the tombstones exist.
//! 2. What to read ([`read`]): the log entries of the versions after the watermark (or the
//!    snapshot), the commit times from bronze's history, the change files in log order.
//! 3. What it does ([`stage`]): the typed changes and the latest per key, guarded, cached on
//!    the cluster; their counts make the report.
//! 4. The writes ([`writing`], their statements [`write`]): tombstones, then silver with the report, each carrying the
//!    watermark; then tombstone expiry.
//!
//! `scd: 2` ([`scd2`]) is the same run, its stage and writes keeping history.

pub(crate) mod columns;
pub(crate) mod discover;
mod fail;
pub(crate) mod read;
pub(crate) mod scd2;
pub(crate) mod shape;
pub(crate) mod stage;
pub(crate) mod write;
mod writing;

use std::collections::BTreeMap;

use smelt_engine::context::RunContext;
use smelt_engine::flow::apply::tombstone_table;
use smelt_engine::flow::report_head;
use smelt_engine::report::{FlowReport, ReadMode, ReportStatus};
use smelt_engine::{EngineError, Result};
use smelt_spec::{ApplyFlow, OnCastError, OnSequenceConflict, OnViolation, SourceDeletes};

pub(crate) use discover::{State, discover};
use read::Span;
pub(crate) use read::VIEWS;
pub(crate) use shape::Shape;
pub(crate) use shape::{create_table, spark_type};
use stage::Targets;

use crate::iceberg::rows as ice_rows;
use crate::places::Places;
use crate::rows;
use crate::session::Session;

/// One SCD1 flow run.
pub(crate) struct Scd1<'a> {
    pub(crate) name: &'a str,
    pub(crate) spec: &'a ApplyFlow,
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

impl Scd1<'_> {
    /// Runs (or plans) the flow on `session`; `state` is where things stood before.
    pub(crate) async fn run(&self, s: &Session<'_>, state: &State) -> Result<FlowReport> {
        let spec = self.spec;
        let columns = columns::resolve(spec, state)?;
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
                return Err(EngineError::user(
                    format!(
                        "silver's watermark is bronze version {w}, but `{}` is at version {}: was bronze recreated?",
                        spec.from, state.bronze_version
                    ),
                    match spec.into.catalog {
                        Some(_) => "rebuild silver with `smelt run --full-refresh`",
                        None => {
                            "drop silver and its tombstones and run again: Delta's idempotent writes cannot lower a watermark"
                        }
                    },
                ));
            }
            (false, Some(w)) => (Span::Range(w, state.bronze_version), ReadMode::Incremental),
        };
        report.mode = mode;
        write::reset_watermark(s).await?;
        let tz = spec.tz.clone().unwrap_or_else(|| "UTC".to_string());
        s.setting(format!("SET spark.sql.session.timeZone={tz}"))
            .await?;
        s.setting("SET spark.sql.parquet.mergeSchema=true".to_string())
            .await?;
        // The stage's many aliased columns make constraint propagation explode (the
        // optimizer ran minutes and out of memory on a 20-column silver).
        s.setting("SET spark.sql.constraintPropagation.enabled=false".to_string())
            .await?;
        if spec.into.catalog.is_some() {
            // A rebuild's `INSERT OVERWRITE` replaces the whole table.
            s.setting("SET spark.sql.sources.partitionOverwriteMode=static".to_string())
                .await?;
        }
        crate::scd1::scd2::keep_analyzed_views(s, shape.history.is_some()).await?;
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
            replayed: state
                .tombstones_txn
                .is_some_and(|t| state.watermark.is_none_or(|w| t > w)),
        };
        match shape.history.is_some() {
            true => {
                let stored = crate::scd1::scd2::Stored {
                    silver: targets.silver,
                    tombstones: targets.tombstones,
                    replayed_through: state.tombstones_txn.filter(|_| targets.replayed),
                };
                self.history(s, &shape, stored, &mut counts).await?;
            }
            false => self.stage(s, &shape, targets, &mut counts).await?,
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
        let history = rows::open(s, src, span).await?;
        if let Span::Range(after, to) = span {
            report.delete_files_ignored =
                discover::check_rewrites(s, self.spec, (after, to)).await?;
        }
        rows::rows(s, src, span, &history).await
    }

    /// Step 3a: the typed changes, cached; their counts; `on_cast_error: fail`.
    async fn changes(&self, s: &Session<'_>, shape: &Shape) -> Result<Counts> {
        s.setting("DROP VIEW IF EXISTS smelt_changes".to_string())
            .await?;
        s.read(
            "read and cast the changes",
            stage::changes_cache(self.spec, shape),
        )
        .await?;
        let rows = s
            .read("count the changes", stage::changes_counts(self.spec, shape))
            .await?;
        let one = |name: &str| rows.ints(name).first().copied().flatten().unwrap_or(0) as usize;
        let mut counts = Counts {
            changes_read: one("changes_read"),
            ignored: one("ignored"),
            ..Counts::default()
        };
        counts.kept = counts.changes_read - counts.ignored - one("bad");
        for i in shape.cast_columns() {
            let failed = one(&format!("f{i}"));
            if failed > 0 {
                counts
                    .cast_failures
                    .insert(shape.silver.columns[i].name.clone(), failed);
            }
        }
        for (j, (name, _)) in self.spec.expectations.iter().enumerate() {
            let failed = one(&format!("x{j}"));
            if failed > 0 {
                counts.expectations.insert(name.clone(), failed);
            }
        }
        if self.spec.on_cast_error == OnCastError::Fail && !counts.cast_failures.is_empty() {
            return Err(fail::cast(s, self.spec, shape, &counts.cast_failures).await);
        }
        if self.spec.on_violation == OnViolation::Fail && !counts.expectations.is_empty() {
            return Err(fail::violation(s, self.spec, shape, &counts.expectations).await);
        }
        Ok(counts)
    }

    /// Step 3b: the stage, cached; its counts.
    async fn stage(
        &self,
        s: &Session<'_>,
        shape: &Shape,
        targets: Targets<'_>,
        counts: &mut Counts,
    ) -> Result<()> {
        s.setting("DROP VIEW IF EXISTS smelt_stage".to_string())
            .await?;
        s.read(
            "pick the latest change per key",
            stage::stage_cache(self.spec, shape, targets),
        )
        .await?;
        let rows = s
            .read("count what the run does", stage::STAGE_COUNTS.to_string())
            .await?;
        let one = |name: &str| rows.ints(name).first().copied().flatten().unwrap_or(0) as usize;
        counts.winners = one("winners");
        counts.inserted = one("inserted");
        counts.updated = one("updated");
        counts.unchanged = one("unchanged");
        counts.deleted = one("deleted");
        counts.stale = one("stale");
        counts.tombstones = one("tombstones");
        counts.rejected = one("rejected");
        counts.conflicts = one("conflicts");
        counts.filtered = one("filtered");
        if counts.conflicts > 0 && self.spec.on_sequence_conflict == OnSequenceConflict::Fail {
            return Err(fail::conflict(s, self.spec, shape, counts.conflicts).await);
        }
        Ok(())
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
