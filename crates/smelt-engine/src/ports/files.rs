//! Flows whose input or output is files: ingest, export and replace_where from files.
//! `smelt-ingest` implements them with its readers and writers.

use async_trait::async_trait;
use smelt_spec::{ExportFlow, IngestFlow, ReplaceWhereFlow};

use super::{ChangeSource, LastCommit, Reporter, SilverTable};
use crate::Result;
use crate::context::RunContext;
use crate::report::FlowReport;

/// The tables an ingest flow writes.
pub struct IngestTables<'a> {
    /// The bronze table the files are loaded into.
    pub bronze: &'a mut dyn SilverTable,
    /// Its rejects table (malformed rows), created with the first reject.
    pub rejects: &'a mut dyn SilverTable,
}

/// Runs the flows that read or write files.
#[async_trait]
pub trait FileFlows: Send + Sync {
    /// Loads the new files of `flow` into bronze (a plan when `ctx.dry_run`).
    async fn ingest(
        &self,
        name: &str,
        flow: &IngestFlow,
        tables: IngestTables<'_>,
        ctx: &RunContext,
        reporter: &dyn Reporter,
    ) -> Result<FlowReport>;
    /// Writes the changes of `source` since the last export as files.
    async fn export(
        &self,
        name: &str,
        flow: &ExportFlow,
        source: &dyn ChangeSource,
        ctx: &RunContext,
        reporter: &dyn Reporter,
    ) -> Result<FlowReport>;
    /// Replaces the rows of `target` matching the flow's predicate with the files of
    /// `files` not applied yet (all of them with `ctx.full_refresh`). `exported`: an
    /// export of the pipeline writes those files, so a missing folder is no batch yet.
    #[allow(clippy::too_many_arguments)]
    async fn replace_where(
        &self,
        name: &str,
        flow: &ReplaceWhereFlow,
        files: &IngestFlow,
        exported: bool,
        target: &mut dyn SilverTable,
        ctx: &RunContext,
        reporter: &dyn Reporter,
    ) -> Result<FlowReport>;
    /// The state an export flow saved last, as a commit (run, time, report), `None` before
    /// its first run.
    async fn last_export(&self, name: &str, flow: &ExportFlow) -> Result<Option<LastCommit>>;
    /// The source version an export flow has written up to, `None` before its first run.
    async fn exported_version(&self, name: &str, flow: &ExportFlow) -> Result<Option<i64>>;
    /// Files of `files` that `table` has not loaded yet (listed, or waiting to settle).
    async fn files_waiting(
        &self,
        name: &str,
        files: &IngestFlow,
        table: &dyn SilverTable,
    ) -> Result<usize>;
}
