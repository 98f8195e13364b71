//! The Spark engine behind the engine's run loop ([`smelt_engine::run::Executor`]): each
//! flow run compiled into statements and sent over one Spark Connect session; `validate`,
//! `plan` and `compile` from the same code.

use async_trait::async_trait;
use smelt_engine::context::RunContext;
use smelt_engine::ports::keys;
use smelt_engine::ports::{EventLog, Reporter};
use smelt_engine::report::{FlowEvent, FlowReport};
use smelt_engine::run::Executor;
use smelt_engine::validate::Problem;
use smelt_engine::{EngineError, Result};
use smelt_spec::{
    AppendFlow, ApplyFlow, ExportFlow, Flow, FlowKind, IngestFlow, Pipeline, ReplaceWhereFlow,
};

use crate::client::Spark;
use crate::delta::describe::Last;
use crate::flow::append::{self, Append};
use crate::flow::apply::{Apply, VIEWS, discover};
use crate::flow::export::{self, Export};
use crate::flow::ingest::{self, Ingest};
use crate::flow::replace_where::{self as replace, ReplaceWhere};
use crate::places::Places;
use crate::session::{Mode, Session, Statement};
use crate::{event_log, sql};

mod check;
mod status;

/// The session settings flow runs change (beside the watermark's, reset after each write).
const RUN_SETTINGS: [&str; 8] = [
    "spark.sql.parquet.mergeSchema",
    "spark.sql.sources.partitionOverwriteMode",
    "spark.sql.legacy.codingErrorAction",
    "spark.sql.legacy.javaCharsets",
    "spark.sql.mapKeyDedupPolicy",
    "spark.sql.files.maxRecordsPerFile",
    "spark.sql.parquet.outputTimestampType",
    "spark.sql.session.timeZone",
];

/// A flow this engine runs.
#[derive(Debug, Clone, Copy)]
enum Runnable<'f> {
    Apply(&'f ApplyFlow),
    Append(&'f AppendFlow),
    ReplaceWhere(&'f ReplaceWhereFlow),
    Ingest(&'f IngestFlow),
    Export(&'f ExportFlow),
}

/// A pipeline on a Spark cluster.
pub struct SparkEngine {
    spark: Spark,
    pipeline: Pipeline,
    places: Places,
    /// The settings of the run it connected for (what it refuses depends on them).
    settings: RunContext,
}

impl SparkEngine {
    /// Connects to the cluster at `url` for `pipeline`'s flows, run with `settings`.
    pub async fn connect(url: &str, pipeline: &Pipeline, settings: &RunContext) -> Result<Self> {
        let spark = Spark::connect(url).await?;
        crate::iceberg::register_catalogs(&spark, pipeline).await?;
        Ok(Self {
            spark,
            places: Places::new(pipeline)?,
            pipeline: pipeline.clone(),
            settings: settings.clone(),
        })
    }

    /// Every problem of `flows` on this engine: what it does not run, and, for what it
    /// runs, bronze missing or lacking a column silver needs.
    pub async fn check(&self, flows: &[&Flow]) -> Vec<Problem> {
        let mut problems = Vec::new();
        for flow in flows {
            let problem = |error| Problem {
                flow: flow.name.clone(),
                error,
            };
            let refused = self.refusals(flow);
            if !refused.is_empty() {
                problems.extend(refused.into_iter().map(problem));
                continue;
            }
            let found = match &flow.kind {
                FlowKind::Apply(spec) => self.check_apply(&flow.name, spec).await,
                FlowKind::Append(spec) => self.check_append(&flow.name, spec).await,
                FlowKind::ReplaceWhere(spec) => self.check_replace(&flow.name, spec).await,
                FlowKind::Ingest(spec) => self.check_ingest(&flow.name, spec).await,
                FlowKind::Export(spec) => {
                    let s = Session::new(
                        &self.spark,
                        &flow.name,
                        Mode::Plan,
                        &smelt_engine::ports::Silent,
                    );
                    export::discover(&s, &self.places, &flow.name, spec)
                        .await
                        .err()
                        .into_iter()
                        .collect()
                }
            };
            // A source a flow of the pipeline writes is made before this flow runs.
            let upstream = |e: &EngineError| match e {
                EngineError::TableNotFound { table, .. } => self
                    .pipeline
                    .flows
                    .iter()
                    .any(|f| f.writes().is_some_and(|t| &t.to_string() == table)),
                _ => false,
            };
            problems.extend(found.into_iter().filter(|e| !upstream(e)).map(problem));
        }
        problems
    }

    /// The statements of `flow`'s next run, in order (`smelt compile`): the reads are run
    /// (they decide what the run reads), the writes only shown.
    pub async fn compile(&self, flow: &Flow, ctx: &RunContext) -> Result<Vec<Statement>> {
        let s = Session::new(
            &self.spark,
            &flow.name,
            Mode::Compile,
            &smelt_engine::ports::Silent,
        );
        let result = self.run_on(&s, flow, ctx, None).await;
        self.drop_views(&s).await;
        result.map_err(|e| EngineError::in_flow(&flow.name, e))?;
        Ok(s.statements())
    }

    /// Runs `flow` on `s` as its mode says; a run's `events` get the event-log row a crash
    /// lost.
    async fn run_on(
        &self,
        s: &Session<'_>,
        flow: &Flow,
        ctx: &RunContext,
        events: Option<&mut Vec<FlowEvent>>,
    ) -> Result<FlowReport> {
        let name = &flow.name;
        crate::views::scope_to(self.places.lake(), name);
        match self.runnable(flow)? {
            Runnable::Apply(spec) => {
                let state = discover(s, &self.places, name, spec).await?;
                if let Some(events) = events {
                    self.recover(s.reporter, name, state.silver.as_ref(), events)
                        .await;
                }
                let spark = crate::predicate::apply_flow(spec)?;
                let apply = Apply {
                    name,
                    spec: &spark,
                    written: spec,
                    places: &self.places,
                    ctx,
                };
                apply.run(s, &state).await
            }
            Runnable::Append(spec) => {
                let state = append::discover(s, &self.places, name, spec).await?;
                if let Some(events) = events {
                    self.recover(s.reporter, name, state.target.as_ref(), events)
                        .await;
                }
                let source: Vec<&str> = state
                    .source_schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect();
                let spark = crate::predicate::append_flow(spec, &source)?;
                let append = Append {
                    name,
                    spec: &spark,
                    places: &self.places,
                    ctx,
                };
                append.run(s, &state).await
            }
            Runnable::ReplaceWhere(spec) => {
                let (state, batch) = replace::discover(
                    s,
                    &self.places,
                    (name, spec),
                    self.exported(name),
                    ctx.full_refresh,
                )
                .await?;
                if let Some(events) = events {
                    self.recover(s.reporter, name, state.target.as_ref(), events)
                        .await;
                }
                let replace = ReplaceWhere {
                    name,
                    spec,
                    places: &self.places,
                    ctx,
                };
                replace.run(s, &state, batch.as_ref()).await
            }
            Runnable::Export(spec) => {
                let state = export::discover(s, &self.places, name, spec).await?;
                let export = Export {
                    name,
                    spec,
                    places: &self.places,
                    ctx,
                };
                export.run(s, &state).await
            }
            Runnable::Ingest(spec) => {
                let state = ingest::discover(s, &self.places, name, spec).await?;
                if let Some(events) = events {
                    self.recover(s.reporter, name, state.bronze.as_ref(), events)
                        .await;
                }
                let ingest = Ingest {
                    name,
                    spec,
                    places: &self.places,
                    ctx,
                };
                ingest.run(s, &state).await
            }
        }
    }

    /// Every reason this engine cannot run `flow` as asked ([`smelt_rules::capability`]).
    fn refusals(&self, flow: &Flow) -> Vec<EngineError> {
        let since = self.settings.since.is_some();
        smelt_rules::capability::spark_refusals(&self.pipeline, flow, since)
            .into_iter()
            .map(EngineError::rule)
            .collect()
    }

    fn runnable<'f>(&self, flow: &'f Flow) -> Result<Runnable<'f>> {
        let mut refused = self.refusals(flow);
        if !refused.is_empty() {
            return Err(refused.remove(0));
        }
        match &flow.kind {
            FlowKind::Apply(spec) => Ok(Runnable::Apply(spec)),
            FlowKind::Append(spec) => Ok(Runnable::Append(spec)),
            FlowKind::ReplaceWhere(spec) => Ok(Runnable::ReplaceWhere(spec)),
            FlowKind::Ingest(spec) => Ok(Runnable::Ingest(spec)),
            FlowKind::Export(spec) => Ok(Runnable::Export(spec)),
        }
    }

    /// The run's views and caches, dropped (the cluster's memory freed), and its session
    /// settings reset, whatever happened;
    /// a view before those it reads (Spark would otherwise cache again every cache over a
    /// view dropped, reading the tables again).
    async fn drop_views(&self, s: &Session<'_>) {
        let views = crate::flow::apply::scd2::VIEWS
            .iter()
            .chain([
                &append::VIEW,
                &replace::VIEW,
                &replace::files::VIEW,
                &export::VIEW,
            ])
            .chain(VIEWS.iter().rev())
            .chain(ingest::sql::VIEWS.iter());
        for view in views {
            let _ = s
                .spark
                .sql("drop a view", &format!("DROP VIEW IF EXISTS {view}"))
                .await;
        }
        // The session settings a flow run changes, back to the cluster's for the next flow
        // (an Iceberg write's snapshot properties too, whatever happened to the write).
        let summary = crate::iceberg::summary_keys(s.flow);
        let confs = RUN_SETTINGS
            .iter()
            .map(|c| c.to_string())
            .chain(summary.iter().map(|k| sql::ident(k)));
        for conf in confs {
            let _ = s
                .spark
                .sql("reset a setting", &format!("RESET {conf}"))
                .await;
        }
    }

    /// An event-log row lost to a crash after silver's last commit comes back from it.
    async fn recover(
        &self,
        reporter: &dyn Reporter,
        flow: &str,
        last: Option<&Last>,
        events: &mut Vec<FlowEvent>,
    ) {
        let Some(last) = last else { return };
        let Some(text) = &last.metadata else { return };
        let Ok(meta) = serde_json::from_str::<serde_json::Value>(text) else {
            return;
        };
        let (Some(run_id), Some(report)) =
            (meta[keys::RUN_ID].as_str(), meta[keys::REPORT].as_str())
        else {
            return;
        };
        let Ok(report) = serde_json::from_str::<FlowReport>(report) else {
            return;
        };
        if report.flow != flow {
            return;
        }
        match event_log::has_run(&self.spark, &self.places, run_id, flow).await {
            Ok(false) => events.push(FlowEvent {
                report,
                started_at_us: last.at_us,
                finished_at_us: last.at_us,
                error: None,
            }),
            Ok(true) => {}
            Err(e) => reporter.warn(&smelt_rules::messages::cannot_check_event_log(flow, &e)),
        }
    }

    /// Ends the session.
    pub async fn close(self) {
        self.spark.close().await;
    }
}

#[async_trait]
impl Executor for SparkEngine {
    async fn run_flow(
        &self,
        flow: &Flow,
        ctx: &RunContext,
        events: &mut Vec<FlowEvent>,
        reporter: &dyn Reporter,
    ) -> Result<FlowReport> {
        let mode = if ctx.dry_run { Mode::Plan } else { Mode::Run };
        let s = Session::new(&self.spark, &flow.name, mode, reporter);
        let events = (!ctx.dry_run).then_some(events);
        let result = self.run_on(&s, flow, ctx, events).await;
        self.drop_views(&s).await;
        reporter.done(&flow.name);
        // The time of each kind of statement sent, discovery included: where a run's time goes.
        result.map(|report| FlowReport {
            phases_ms: s.phases(),
            ..report
        })
    }

    fn event_log(&self) -> &dyn EventLog {
        self
    }
}

#[async_trait]
impl EventLog for SparkEngine {
    async fn append(&self, events: &[FlowEvent]) -> Result<()> {
        event_log::append(&self.spark, &self.places, events).await
    }

    async fn has_run(&self, run_id: &str, flow: &str) -> Result<bool> {
        event_log::has_run(&self.spark, &self.places, run_id, flow).await
    }
}
