//! What a flow runs with: [`FlowCx`], the lake, the file stores and the run's settings, for
//! a runner; [`FlowRun`], the flow, its spec, the run's settings and where progress goes,
//! for the steps of its kind, which start its report from it ([`FlowRun::report`]).

use smelt_spec::{AppendFlow, ApplyFlow, ExportFlow, IngestFlow, Pipeline, ReplaceWhereFlow};

use crate::context::RunContext;
use crate::ports::{FileStores, Lake, Reporter};
use crate::report::{FlowReport, ReportKind};

/// What a flow of a run reads and writes through, and the run's settings.
pub(crate) struct FlowCx<'a> {
    pub(crate) pipeline: &'a Pipeline,
    pub(crate) lake: &'a dyn Lake,
    pub(crate) files: &'a dyn FileStores,
    pub(crate) ctx: &'a RunContext,
    pub(crate) reporter: &'a dyn Reporter,
}

/// What a check or a status reads through.
pub(crate) struct LakeCx<'a> {
    pub(crate) pipeline: &'a Pipeline,
    pub(crate) lake: &'a dyn Lake,
    pub(crate) files: &'a dyn FileStores,
}

impl<'a> FlowCx<'a> {
    /// Opens table `name`, which a flow writes as `role`, with the change feed the
    /// pipeline wants of it ([`Pipeline::change_feed`]).
    pub(crate) async fn output(
        &self,
        name: &smelt_spec::TableName,
        role: crate::ports::TableRole,
    ) -> crate::Result<Box<dyn crate::ports::LakeTable>> {
        let mut table = self.lake.table(name, role).await?;
        table
            .keep_change_feed(self.pipeline.change_feed(name).on())
            .await?;
        Ok(table)
    }

    /// The run of flow `name`, of spec `spec`, with this run's settings.
    pub(crate) fn run<S>(&'a self, name: &'a str, spec: &'a S) -> FlowRun<'a, S> {
        FlowRun {
            name,
            spec,
            ctx: self.ctx,
            reporter: self.reporter,
        }
    }
}

/// One run of a flow of kind `S`: what every step of it reads. Copied freely (references
/// only); the report it starts ([`FlowRun::report`]) is the one place a report's head is
/// written.
pub struct FlowRun<'a, S> {
    /// The flow's name.
    pub name: &'a str,
    /// What the flow does.
    pub spec: &'a S,
    /// The run's settings.
    pub ctx: &'a RunContext,
    /// Where progress and warnings go.
    pub reporter: &'a dyn Reporter,
}

impl<S> Clone for FlowRun<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for FlowRun<'_, S> {}

impl<'a, S: FlowSpec> FlowRun<'a, S> {
    /// A run of flow `name`.
    pub fn new(
        name: &'a str,
        spec: &'a S,
        ctx: &'a RunContext,
        reporter: &'a dyn Reporter,
    ) -> Self {
        Self {
            name,
            spec,
            ctx,
            reporter,
        }
    }

    /// The report of this run as it starts: the flow, its kind, what it reads and writes,
    /// the run id.
    pub fn report(&self) -> FlowReport {
        report_head(self.name, self.spec, &self.ctx.run_id)
    }

    /// Says phase `phase` of the flow starts.
    pub fn phase(&self, phase: &str) {
        self.reporter.phase(self.name, phase);
    }
}

/// The report of a run (`run_id`) of flow `name` as it starts: its kind, what it reads and
/// writes; the rest empty. Every engine starts its reports here.
pub fn report_head<S: FlowSpec>(name: &str, spec: &S, run_id: &str) -> FlowReport {
    FlowReport::head(name, S::KIND, spec.reads(), spec.writes(), run_id)
}

/// A flow kind's spec, as its report names it.
pub trait FlowSpec {
    /// The kind.
    const KIND: ReportKind;
    /// What it reads: a table, a landing folder, or a replace_where's `from:` text.
    fn reads(&self) -> String;
    /// What it writes: a table or an export folder.
    fn writes(&self) -> String;
}

impl FlowSpec for ApplyFlow {
    const KIND: ReportKind = ReportKind::Apply;
    fn reads(&self) -> String {
        self.from.to_string()
    }
    fn writes(&self) -> String {
        self.into.to_string()
    }
}

impl FlowSpec for IngestFlow {
    const KIND: ReportKind = ReportKind::Ingest;
    fn reads(&self) -> String {
        self.from.clone()
    }
    fn writes(&self) -> String {
        self.into.to_string()
    }
}

impl FlowSpec for AppendFlow {
    const KIND: ReportKind = ReportKind::Append;
    fn reads(&self) -> String {
        self.from.to_string()
    }
    fn writes(&self) -> String {
        self.into.to_string()
    }
}

impl FlowSpec for ReplaceWhereFlow {
    const KIND: ReportKind = ReportKind::ReplaceWhere;
    fn reads(&self) -> String {
        self.from_text.clone()
    }
    fn writes(&self) -> String {
        self.into.to_string()
    }
}

impl FlowSpec for ExportFlow {
    const KIND: ReportKind = ReportKind::Export;
    fn reads(&self) -> String {
        self.from.to_string()
    }
    fn writes(&self) -> String {
        self.to.clone()
    }
}
