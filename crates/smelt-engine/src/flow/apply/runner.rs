//! The runner of `apply` flows: bronze changes → silver by key ([`crate::flow::apply`]).

use async_trait::async_trait;
use smelt_spec::{ApplyFlow, ChangeData, OptimizeMode, SourceDeletes, TableName, WriteMode};

use super::{ApplyTables, check_apply, run_apply, tombstone_table};
use crate::flow::{FlowCx, FlowRun, FlowRunner, LakeCx};
use crate::ports::{
    ChangeSource, LakeTable, OptimizePolicy, OptimizeStats, SourceOptions, TableRole,
};
use crate::rejects::rejects_table;
use crate::report::{FlowEvent, FlowReport};
use crate::run::window;
use crate::{EngineError, Result};

pub(crate) struct Apply<'a> {
    pub(crate) name: &'a str,
    pub(crate) spec: &'a ApplyFlow,
}

#[async_trait]
impl FlowRunner for Apply<'_> {
    fn output(&self) -> Option<&TableName> {
        Some(&self.spec.into)
    }

    async fn run(&self, cx: &FlowCx<'_>, events: &mut Vec<FlowEvent>) -> Result<FlowReport> {
        let (lake, spec) = (cx.lake, self.spec);
        let options = SourceOptions {
            removed_rows: spec.source_deletes == SourceDeletes::Apply,
        };
        let mut source = lake.source(&spec.from, options).await?;
        let mut ctx = cx.ctx.clone();
        if let Some(since) = &cx.ctx.since {
            let (after, to) = window(&*source, cx.ctx, since, ctx.run_timestamp_us).await?;
            source.pin(to)?;
            ctx.replay_after = Some(after);
        }
        let mut silver = cx.output(&spec.into, TableRole::Silver).await?;
        cx.recover_event(self.name, &*silver, events).await;
        let mut tombstones = cx
            .output(&tombstone_table(&spec.into), TableRole::Tombstones)
            .await?;
        let mut rejects = cx
            .output(&rejects_table(&spec.into), TableRole::Rejects)
            .await?;
        if spec.write_mode == WriteMode::MergeOnRead {
            silver.write_merge_on_read().await?;
            tombstones.write_merge_on_read().await?;
            if spec.change_data == ChangeData::Derived {
                silver.derive_change_data().await?;
            }
        }
        let before = silver.version();
        let tables = ApplyTables {
            silver: &mut *silver,
            tombstones: &mut *tombstones,
            rejects: &mut *rejects,
        };
        let run = FlowRun::new(self.name, spec, &ctx, cx.reporter);
        let mut report = run_apply(run, &*source, tables).await?;
        if spec.optimize == OptimizeMode::Auto && !ctx.dry_run && silver.version() != before {
            // After the run's commit, in commits of their own: the run stands whatever
            // happens here, and the next optimize does what this one could not.
            match optimize_after(&mut *silver, &mut *tombstones, &spec.keys).await {
                Ok(Some(done)) => {
                    report.silver_version = silver.version();
                    report.optimized = Some(done);
                }
                Ok(None) => {}
                Err(e) => cx.reporter.warn(&format!(
                    "flow `{}` committed, but `optimize: auto` failed: {e}; run `smelt optimize {}`",
                    self.name, self.name
                )),
            }
        }
        Ok(report)
    }

    async fn check(&self, cx: &LakeCx<'_>, source: Option<&dyn ChangeSource>) -> Vec<EngineError> {
        let spec = self.spec;
        // Opened as a run opens them: a table smelt must not write is a problem too.
        let (silver, tombstones) = match (
            cx.lake.table(&spec.into, TableRole::Silver).await,
            cx.lake
                .table(&tombstone_table(&spec.into), TableRole::Tombstones)
                .await,
        ) {
            (Ok(s), Ok(t)) => (s, t),
            (Err(e), _) | (_, Err(e)) => return vec![e],
        };
        match source {
            Some(source) => check_apply(spec, source, &*silver, &*tombstones),
            None => Vec::new(),
        }
    }
}

/// `optimize: auto`: silver then tombstones; what was rewritten (the version is silver's),
/// `None` when no file passed the thresholds.
async fn optimize_after<'a>(
    silver: &'a mut dyn LakeTable,
    tombstones: &'a mut dyn LakeTable,
    keys: &[String],
) -> Result<Option<OptimizeStats>> {
    // The run committed; its optimize not begun.
    crate::failpoint("before_auto_optimize")?;
    // Each rewritten file's rows in key order; no clustering of the table after each run.
    let policy = OptimizePolicy {
        keys: keys.to_vec(),
        ..OptimizePolicy::default()
    };
    let mut done = OptimizeStats::default();
    let mut any = false;
    for (table, is_silver) in [(silver, true), (tombstones, false)] {
        if table.schema().is_none() {
            continue;
        }
        let s = table.optimize(&policy).await?;
        if s.version.is_some() {
            any = true;
            if is_silver {
                done.version = s.version;
            }
            done.files_removed += s.files_removed;
            done.files_added += s.files_added;
            done.rows_purged += s.rows_purged;
            done.rows_rewritten += s.rows_rewritten;
            done.bytes_written += s.bytes_written;
            done.bytes_spilled += s.bytes_spilled;
        }
    }
    Ok(any.then_some(done))
}
