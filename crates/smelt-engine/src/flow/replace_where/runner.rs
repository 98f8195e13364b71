//! The runner of `replace_where` flows: a batch (a table's snapshot, or new files)
//! replaces the target rows matching a predicate ([`crate::flow::replace_where`]).

use crate::predicate::Predicate;
use async_trait::async_trait;
use smelt_spec::{Flow, IngestFlow, ReplaceSource, ReplaceWhereFlow, TableName};

use super::files::FileBatch;
use super::{TableBatch, run_replace_where, target_schema, up_to_date, watermark};
use crate::context::app_id;
use crate::flow::ingest::ledger::{files_entry, loaded_files, plan_files};
use crate::flow::{FlowCx, FlowRunner, LakeCx, landing_problem};
use crate::ports::{ChangeSource, LakeTable, SourceOptions, TableRole};
use crate::report::{FlowEvent, FlowReport};
use crate::{EngineError, Result};

pub(crate) struct ReplaceWhere<'a> {
    pub(crate) flow: &'a Flow,
    pub(crate) spec: &'a ReplaceWhereFlow,
}

impl ReplaceWhere<'_> {
    /// An export of the pipeline writes the files this flow reads: before its first run,
    /// no folder is no batch yet.
    fn exported(&self, pipeline: &smelt_spec::Pipeline) -> bool {
        pipeline.flows.iter().any(|g| self.flow.reads_files_of(g))
    }
}

impl ReplaceWhere<'_> {
    /// Replaces the rows of `target` matching the predicate with the files of `files` not
    /// applied yet (all of them with `--full-refresh`).
    async fn run_files(
        &self,
        cx: &FlowCx<'_>,
        files: &IngestFlow,
        exported: bool,
        target: &mut dyn LakeTable,
    ) -> Result<FlowReport> {
        let (name, spec, ctx) = (self.flow.name.as_str(), self.spec, cx.ctx);
        let applied = target.watermark(&app_id(name)).await?;
        let up_to_date = |to| up_to_date(name, spec, ctx, applied, to, target.version());
        // No folder yet, and an export of the pipeline writes it: no batch yet.
        if exported && cx.files.landing_missing(files) {
            return Ok(up_to_date(applied.unwrap_or(0)));
        }
        let landing = cx.files.landing(files)?;
        let loaded = if ctx.full_refresh {
            Default::default()
        } else {
            loaded_files(target).await?
        };
        let listing = plan_files(files, &*landing, &loaded, false).await?;
        if listing.to_load.is_empty() {
            return Ok(up_to_date(applied.unwrap_or(0)));
        }
        let next = applied.unwrap_or(0) + 1;
        let batch = FileBatch {
            landing: &*landing,
            files: &listing.to_load,
        };
        let entry = files_entry(name, false, &listing.to_load);
        let w = watermark(name, ctx, next, vec![entry]);
        let mut report = run_replace_where(cx.run(name, spec), &batch, target, w).await?;
        report.files_found = listing.found.len();
        report.files_new = listing.to_load.len();
        report.files_read = listing.to_load.len();
        Ok(report)
    }
}

#[async_trait]
impl FlowRunner for ReplaceWhere<'_> {
    fn output(&self) -> Option<&TableName> {
        Some(&self.spec.into)
    }

    async fn run(&self, cx: &FlowCx<'_>, events: &mut Vec<FlowEvent>) -> Result<FlowReport> {
        let (name, spec, ctx) = (self.flow.name.as_str(), self.spec, cx.ctx);
        let mut target = cx.output(&spec.into, TableRole::Target).await?;
        cx.recover_event(name, &*target, events).await;
        match &spec.from {
            ReplaceSource::Table(table) => {
                let applied = target.watermark(&app_id(name)).await?;
                let source = cx.lake.source(table, SourceOptions::default()).await?;
                let v = source.version();
                if applied == Some(v) && !ctx.full_refresh {
                    return Ok(up_to_date(name, spec, ctx, applied, v, target.version()));
                }
                if let Some(w) = applied.filter(|w| *w > v && !ctx.full_refresh) {
                    return Err(EngineError::rule(smelt_rules::watermark::ahead(
                        &format!("the target `{}`", spec.into),
                        &format!("the source `{table}`"),
                        w,
                        v,
                        smelt_rules::watermark::AheadFix::FullRefresh,
                    )));
                }
                let batch = TableBatch(&*source);
                let watermark = watermark(name, ctx, v, Vec::new());
                run_replace_where(cx.run(name, spec), &batch, &mut *target, watermark).await
            }
            ReplaceSource::Files(files) => {
                let exported = self.exported(cx.pipeline);
                self.run_files(cx, files, exported, &mut *target).await
            }
        }
    }

    async fn check(&self, cx: &LakeCx<'_>, _: Option<&dyn ChangeSource>) -> Vec<EngineError> {
        let mut problems: Vec<EngineError> = Vec::new();
        if let ReplaceSource::Files(files) = &self.spec.from {
            let exported = self.exported(cx.pipeline);
            problems.extend(landing_problem(cx, files, &self.spec.into, exported).await);
        }
        // Opened as a run opens it: a table smelt must not write is a problem too.
        match cx.lake.table(&self.spec.into, TableRole::Target).await {
            Ok(target) => match target_schema(self.spec, target.schema()) {
                // The predicate over the target's columns, its bounds NULL (as on Spark).
                Ok(schema) => problems.extend(
                    Predicate::compile(
                        &smelt_spec::bounds::without_bounds(&self.spec.predicate),
                        &schema,
                        "`predicate`",
                    )
                    .err(),
                ),
                Err(e) => problems.push(e),
            },
            Err(e) => problems.push(e),
        }
        problems
    }

    fn landing(&self) -> Option<&IngestFlow> {
        match &self.spec.from {
            ReplaceSource::Files(files) => Some(files),
            ReplaceSource::Table(_) => None,
        }
    }
}
