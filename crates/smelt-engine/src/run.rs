//! One run of a pipeline (DESIGN §3): the selected flows in dependency order, each read
//! through the [`Lake`], stopping at the first failure; then the event log.

use smelt_spec::{Flow, Pipeline};

use crate::context::RunContext;
use crate::flow::{FlowCx, build};
use crate::ports::{EventLog, FileStores, Lake, Reporter};
use crate::report::{FlowEvent, FlowReport, ReportKind, ReportStatus};
use crate::window::parse_instant;
use crate::{EngineError, Result, failpoint};

/// What a run did.
#[derive(Debug)]
pub struct RunOutcome {
    /// The run id.
    pub run_id: String,
    /// The reports of the flows that ran, in run order.
    pub reports: Vec<FlowReport>,
    /// The flow that failed and why ([`EngineError::InFlow`]); the flows after it did
    /// not run.
    pub failed: Option<EngineError>,
}

/// Checks `--since`/`--until` before any flow runs: a window that does not parse, or one
/// asked of flows that cannot replay one (all but apply flows), is a usage error.
pub fn check_window(settings: &RunContext, flows: &[&Flow], now_us: i64) -> Result<()> {
    for (option, value) in [("--since", &settings.since), ("--until", &settings.until)] {
        if let Some(value) = value {
            parse_instant(value, settings.tz.as_deref(), now_us, option)?;
        }
    }
    if settings.since.is_some() {
        let cannot: Vec<String> = flows
            .iter()
            .filter(|f| !matches!(f.kind, smelt_spec::FlowKind::Apply(_)))
            .map(|f| format!("`{}` ({})", f.name, ReportKind::from(&f.kind).as_str()))
            .collect();
        if !cannot.is_empty() {
            let apply: Vec<&str> = flows
                .iter()
                .filter(|f| matches!(f.kind, smelt_spec::FlowKind::Apply(_)))
                .map(|f| f.name.as_str())
                .collect();
            return Err(EngineError::user(
                format!(
                    "`--since` replays a window of source versions into apply flows; {} cannot replay one",
                    cannot.join(", ")
                ),
                if apply.is_empty() {
                    "run them without `--since`".to_string()
                } else {
                    format!(
                        "name the apply flows to replay: `smelt run --since … {}`",
                        apply.join(" ")
                    )
                },
            ));
        }
    }
    Ok(())
}

/// Who executes the flows of a run: the embedded engine (this crate, through the lake's
/// ports) or a cluster (`smelt-spark`). The run loop, the DAG order, the reports and the
/// event log are the same for both.
#[async_trait::async_trait]
pub trait Executor: Send + Sync {
    /// Runs (or plans, with `ctx.dry_run`) one flow; an event-log row a crash lost is
    /// pushed to `events` first.
    async fn run_flow(
        &self,
        flow: &Flow,
        ctx: &RunContext,
        events: &mut Vec<FlowEvent>,
        reporter: &dyn Reporter,
    ) -> Result<FlowReport>;
    /// The event log the run's rows go to.
    fn event_log(&self) -> &dyn EventLog;
}

/// The embedded engine: every flow run in this process, through `lake` and `files`.
struct Embedded<'a> {
    pipeline: &'a Pipeline,
    lake: &'a dyn Lake,
    files: &'a dyn FileStores,
}

#[async_trait::async_trait]
impl Executor for Embedded<'_> {
    async fn run_flow(
        &self,
        flow: &Flow,
        ctx: &RunContext,
        events: &mut Vec<FlowEvent>,
        reporter: &dyn Reporter,
    ) -> Result<FlowReport> {
        let cx = FlowCx {
            pipeline: self.pipeline,
            lake: self.lake,
            files: self.files,
            ctx,
            reporter,
        };
        build(flow).run(&cx, events).await
    }

    fn event_log(&self) -> &dyn EventLog {
        self.lake.event_log()
    }
}

/// Runs (or plans) `flows` of `pipeline` in dependency order (file order otherwise),
/// stopping at the first failing flow. Every flow run (not plans) is appended to the
/// lake's event log, with the rows a crash kept from earlier runs.
pub async fn run(
    pipeline: &Pipeline,
    flows: &[&Flow],
    lake: &dyn Lake,
    files: &dyn FileStores,
    ctx: RunContext,
    reporter: &dyn Reporter,
) -> Result<RunOutcome> {
    let embedded = Embedded {
        pipeline,
        lake,
        files,
    };
    run_on(flows, &embedded, ctx, reporter).await
}

/// Runs (or plans) `flows` on `executor`: dependency order, the first failure stops the
/// run, then the event log.
pub async fn run_on(
    flows: &[&Flow],
    executor: &dyn Executor,
    ctx: RunContext,
    reporter: &dyn Reporter,
) -> Result<RunOutcome> {
    let flows = crate::dag::run_order(flows)?;
    check_window(&ctx, &flows, ctx.run_timestamp_us)?;
    let mut reports = Vec::new();
    let mut events = Vec::new();
    let mut failed = None;
    for flow in flows {
        let started_at_us = now_us();
        let result = executor.run_flow(flow, &ctx, &mut events, reporter).await;
        match result {
            Ok(report) => {
                reporter.finished(&flow.name, Some(&report));
                events.push(FlowEvent {
                    report: report.clone(),
                    started_at_us,
                    finished_at_us: now_us(),
                    error: None,
                });
                reports.push(report);
            }
            Err(e) => {
                reporter.finished(&flow.name, None);
                let report = FlowReport {
                    status: ReportStatus::Failed,
                    ..FlowReport::head(
                        &flow.name,
                        ReportKind::from(&flow.kind),
                        flow.source(),
                        flow.target(),
                        &ctx.run_id,
                    )
                };
                events.push(FlowEvent {
                    report,
                    started_at_us,
                    finished_at_us: now_us(),
                    // The message (the row names the flow) and, on a line of its own,
                    // the next step.
                    error: Some(match e.hint() {
                        Some(hint) => format!("{e}\nhint: {hint}"),
                        None => e.to_string(),
                    }),
                });
                failed = Some(EngineError::in_flow(&flow.name, e));
                break;
            }
        }
    }
    if !ctx.dry_run {
        failpoint("before_event_log")?;
        if let Err(e) = executor.event_log().append(&events).await {
            reporter.warn(&match failed {
                None => format!(
                    "the run is committed, but its event log rows could not be written: {e}"
                ),
                // A failed run may have committed nothing: say only what is known.
                Some(_) => format!("the run's event log rows could not be written: {e}"),
            });
        }
    }
    Ok(RunOutcome {
        run_id: ctx.run_id,
        reports,
        failed,
    })
}

/// The source versions of a replay window: read after the first, up to the second.
pub(crate) async fn window(
    source: &dyn crate::ports::ChangeSource,
    settings: &RunContext,
    since: &str,
    now_us: i64,
) -> Result<(i64, i64)> {
    let tz = settings.tz.as_deref();
    let since_us = parse_instant(since, tz, now_us, "--since")?;
    let after = source.version_at(since_us - 1).await?.unwrap_or(-1);
    let to = match settings.until.as_deref() {
        Some(u) => {
            let until_us = parse_instant(u, tz, now_us, "--until")?;
            if until_us < since_us {
                return Err(EngineError::user(
                    format!("--until ({u}) is before --since ({since})"),
                    "swap them",
                ));
            }
            source.version_at(until_us).await?.unwrap_or(-1)
        }
        None => source.version(),
    };
    Ok((after, to))
}

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}
