//! One [`FlowRunner`] per flow kind, built from the spec by [`build`] — the only `match`
//! on the flow kind. A runner opens what its flow reads and writes through the ports,
//! runs it, checks it against the lake, and says where it stands.

pub mod append;
pub mod apply;
mod cx;
pub mod export;
pub mod ingest;
pub mod replace_where;
pub mod status;

pub(crate) use cx::{FlowCx, LakeCx};
pub use cx::{FlowRun, FlowSpec, report_head};

use async_trait::async_trait;
use smelt_spec::{Flow, FlowKind, IngestFlow, TableName};

use crate::flow::ingest::ledger::files_waiting;
use crate::ports::{ChangeSource, Lake, LakeTable, LastCommit};
use crate::report::{FlowEvent, FlowReport};
use crate::{EngineError, Result};
use status::FlowStatus;

/// Runs, checks and inspects one flow.
#[async_trait]
pub(crate) trait FlowRunner: Send + Sync {
    /// Runs (or plans, with `cx.ctx.dry_run`) the flow; an event-log row a crash lost is
    /// pushed to `events` first.
    async fn run(&self, cx: &FlowCx<'_>, events: &mut Vec<FlowEvent>) -> Result<FlowReport>;
    /// Every problem a run would meet before reading a change. `source` is the table the
    /// flow reads, when it exists.
    async fn check(&self, cx: &LakeCx<'_>, source: Option<&dyn ChangeSource>) -> Vec<EngineError> {
        let _ = (cx, source);
        Vec::new()
    }
    /// The table the flow writes, if any.
    fn output(&self) -> Option<&TableName>;
    /// The landing folder the flow reads files from, if any.
    fn landing(&self) -> Option<&IngestFlow> {
        None
    }
    /// Fills the flow's watermark, written-table version and last run into `row`.
    async fn status(&self, cx: &LakeCx<'_>, row: &mut FlowStatus) -> Result<()> {
        match self.output() {
            Some(table) => status::of_written_table(cx, table, self.landing(), row).await,
            None => Ok(()),
        }
    }
}

/// The runner of `flow`.
pub(crate) fn build<'a>(flow: &'a Flow) -> Box<dyn FlowRunner + 'a> {
    let name = flow.name.as_str();
    match &flow.kind {
        FlowKind::Apply(spec) => Box::new(apply::Apply { name, spec }),
        FlowKind::Ingest(spec) => Box::new(ingest::Ingest { name, spec }),
        FlowKind::Append(spec) => Box::new(append::Append { name, spec }),
        FlowKind::ReplaceWhere(spec) => Box::new(replace_where::ReplaceWhere { flow, spec }),
        FlowKind::Export(spec) => Box::new(export::Export { name, spec }),
    }
}

impl FlowCx<'_> {
    /// An event-log row lost to a crash after the last commit of `table` (written by
    /// `flow`) comes back from that commit, into `events`.
    pub(crate) async fn recover_event(
        &self,
        flow: &str,
        table: &dyn LakeTable,
        events: &mut Vec<FlowEvent>,
    ) {
        if self.ctx.dry_run {
            return;
        }
        match table.last_commit().await {
            Ok(last) => self.recover_from(flow, last, events).await,
            Err(e) => self.cannot_check(flow, e),
        }
    }

    /// The same for a flow whose last write is `last` (an export's saved state).
    pub(crate) async fn recover_from(
        &self,
        flow: &str,
        last: Option<LastCommit>,
        events: &mut Vec<FlowEvent>,
    ) {
        if self.ctx.dry_run {
            return;
        }
        match lost_event(self.lake, flow, last).await {
            Ok(Some(event)) => events.push(event),
            Ok(None) => {}
            Err(e) => self.cannot_check(flow, e),
        }
    }

    pub(crate) fn cannot_check(&self, flow: &str, e: EngineError) {
        self.reporter
            .warn(&smelt_rules::messages::cannot_check_event_log(flow, &e));
    }
}

/// The event of `last`, the last write of `flow`, when the event log lacks it (a crash
/// between that write and the event-log append).
async fn lost_event(
    lake: &dyn Lake,
    flow: &str,
    last: Option<LastCommit>,
) -> Result<Option<FlowEvent>> {
    let Some(last) = last else {
        return Ok(None);
    };
    let (Some(run_id), Some(report)) = (last.run_id, last.report) else {
        return Ok(None);
    };
    let Ok(report) = serde_json::from_str::<FlowReport>(&report) else {
        return Ok(None);
    };
    if report.flow != flow || lake.event_log().has_run(&run_id, flow).await? {
        return Ok(None);
    }
    Ok(Some(FlowEvent {
        report,
        started_at_us: last.at_ms * 1000,
        finished_at_us: last.at_ms * 1000,
        error: None,
    }))
}

/// The problem listing `landing` has, if any. A local folder that does not exist yet is
/// none when an export of the pipeline writes it (`exported`).
pub(crate) async fn landing_problem(
    cx: &LakeCx<'_>,
    landing: &IngestFlow,
    table: &TableName,
    exported: bool,
) -> Option<EngineError> {
    if exported && cx.files.landing_missing(landing) {
        return None;
    }
    let problem = async {
        let output = cx.lake.inspect(table).await?;
        let files = cx.files.landing(landing)?;
        files_waiting(landing, &*files, &*output).await
    };
    problem.await.err()
}
