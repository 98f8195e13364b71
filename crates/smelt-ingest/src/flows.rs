//! [`Files`]: the engine's [`FileFlows`] port, on this crate's readers and writers.

use async_trait::async_trait;
use smelt_engine::EngineError;
use smelt_engine::context::RunContext;
use smelt_engine::ports::{
    ChangeSource, FileFlows, IngestTables, LastCommit, Reporter, SilverTable,
};
use smelt_engine::replace::{run_replace_where, up_to_date, watermark};
use smelt_engine::report::FlowReport;
use smelt_spec::{ExportFlow, IngestFlow, ReplaceWhereFlow};

use crate::batch::FileBatch;
use crate::export::{export_state, run_export};
use crate::files::Landing;
use crate::flow::{files_entry, loaded_files, plan_files, run_ingest};

/// Landing folders and export targets, local or at URLs (`object_store`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Files;

fn landing(files: &IngestFlow) -> smelt_engine::Result<Landing> {
    Landing::of(files).map_err(|e| EngineError::user(e.to_string(), "fix `from:`"))
}

#[async_trait]
impl FileFlows for Files {
    async fn ingest(
        &self,
        name: &str,
        flow: &IngestFlow,
        tables: IngestTables<'_>,
        ctx: &RunContext,
        reporter: &dyn Reporter,
    ) -> smelt_engine::Result<FlowReport> {
        run_ingest(name, flow, tables, ctx, reporter).await
    }

    async fn export(
        &self,
        name: &str,
        flow: &ExportFlow,
        source: &dyn ChangeSource,
        ctx: &RunContext,
        reporter: &dyn Reporter,
    ) -> smelt_engine::Result<FlowReport> {
        run_export(name, flow, source, ctx, reporter).await
    }

    async fn replace_where(
        &self,
        name: &str,
        flow: &ReplaceWhereFlow,
        files: &IngestFlow,
        exported: bool,
        target: &mut dyn SilverTable,
        ctx: &RunContext,
        reporter: &dyn Reporter,
    ) -> smelt_engine::Result<FlowReport> {
        let applied = target
            .watermark(&smelt_engine::context::app_id(name))
            .await?;
        let up_to_date = |to| up_to_date(name, flow, ctx, applied, to, target.version());
        // No folder yet, and an export of the pipeline writes it: no batch yet.
        if exported && files.url.is_none() && !files.folder.exists() {
            return Ok(up_to_date(applied.unwrap_or(0)));
        }
        let landing = landing(files)?;
        let loaded = if ctx.full_refresh {
            Default::default()
        } else {
            loaded_files(target).await?
        };
        let listing = plan_files(name, files, &landing, &loaded, false).await?;
        if listing.to_load.is_empty() {
            return Ok(up_to_date(applied.unwrap_or(0)));
        }
        let next = applied.unwrap_or(0) + 1;
        let batch = FileBatch {
            flow: files,
            landing: &landing,
            files: &listing.to_load,
        };
        let entry = files_entry(name, false, &listing.to_load);
        let w = watermark(name, ctx, next, vec![entry]);
        let mut report = run_replace_where(name, flow, &batch, target, w, ctx, reporter).await?;
        report.files_found = listing.found.len();
        report.files_new = listing.to_load.len();
        report.files_read = listing.to_load.len();
        Ok(report)
    }

    async fn last_export(
        &self,
        name: &str,
        flow: &ExportFlow,
    ) -> smelt_engine::Result<Option<LastCommit>> {
        if flow.url.is_none() && !flow.folder.exists() {
            return Ok(None);
        }
        let state = export_state(name, flow).await?;
        Ok(state.run_id.map(|run_id| LastCommit {
            at_ms: state.at_ms.unwrap_or_default(),
            run_id: Some(run_id),
            report: state.report,
        }))
    }

    async fn exported_version(
        &self,
        name: &str,
        flow: &ExportFlow,
    ) -> smelt_engine::Result<Option<i64>> {
        Ok(export_state(name, flow).await?.version)
    }

    async fn files_waiting(
        &self,
        name: &str,
        files: &IngestFlow,
        table: &dyn SilverTable,
    ) -> smelt_engine::Result<usize> {
        let landing = landing(files)?;
        let loaded = loaded_files(table).await?;
        let listing = plan_files(name, files, &landing, &loaded, false).await?;
        Ok(listing.to_load.len() + listing.pending)
    }
}
