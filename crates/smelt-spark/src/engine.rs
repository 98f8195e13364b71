//! The Spark engine behind the engine's run loop ([`smelt_engine::run::Executor`]): each
//! flow run compiled into statements and sent over one Spark Connect session; `validate`,
//! `plan` and `compile` from the same code.

use async_trait::async_trait;
use smelt_engine::context::RunContext;
use smelt_engine::ports::{EventLog, Reporter};
use smelt_engine::report::{FlowEvent, FlowReport};
use smelt_engine::run::{Executor, RunSettings};
use smelt_engine::status::{FlowStatus, utc_text};
use smelt_engine::validate::Problem;
use smelt_engine::{EngineError, Result};
use smelt_spec::{
    AppendFlow, ApplyFlow, ColumnDef, ExportFlow, Flow, FlowKind, IngestFlow, Pipeline,
    ReplaceWhereFlow, TableName,
};

use crate::append::{self, Append};
use crate::client::Spark;
use crate::export::{self, Export};
use crate::ingest::{self, Ingest};
use crate::places::Places;
use crate::replace::{self, Replace};
use crate::scd1::discover::Last;
use crate::scd1::{Scd1, VIEWS, columns, discover, spark_type};
use crate::session::{Mode, Session, Statement};
use crate::support::refusals;
use crate::{event_log, sql};

/// A flow this engine runs.
#[derive(Debug, Clone, Copy)]
enum Runnable<'f> {
    Apply(&'f ApplyFlow),
    Append(&'f AppendFlow),
    Replace(&'f ReplaceWhereFlow),
    Ingest(&'f IngestFlow),
    Export(&'f ExportFlow),
}

/// A pipeline on a Spark cluster.
pub struct SparkEngine {
    spark: Spark,
    pipeline: Pipeline,
    places: Places,
    settings: RunSettings,
}

impl SparkEngine {
    /// Connects to the cluster at `url` for `pipeline`'s flows, run with `settings`.
    pub async fn connect(url: &str, pipeline: &Pipeline, settings: &RunSettings) -> Result<Self> {
        Ok(Self {
            spark: Spark::connect(url).await?,
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
            let refused = refusals(&self.pipeline, flow, &self.settings);
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

    /// The problems of apply flow `name` on the cluster: its columns against silver and
    /// bronze (as embedded finds them), then its conditions.
    async fn check_apply(&self, name: &str, spec: &ApplyFlow) -> Vec<EngineError> {
        let s = Session::new(&self.spark, name, Mode::Plan, &smelt_engine::ports::Silent);
        let state = match discover(&s, &self.places, name, spec).await {
            Ok(state) => state,
            Err(e) => return vec![e],
        };
        let columns = match columns::check(name, spec, &state) {
            Ok(columns) => columns,
            Err(problems) => return problems,
        };
        match self
            .check_predicates(name, spec, &columns.silver.columns)
            .await
        {
            Ok(()) => Vec::new(),
            Err(e) => vec![e],
        }
    }

    /// The problems of append flow `name` on the cluster: its columns against the source
    /// and the target, and its `where` over the source's columns.
    async fn check_append(&self, name: &str, spec: &AppendFlow) -> Vec<EngineError> {
        let s = Session::new(&self.spark, name, Mode::Plan, &smelt_engine::ports::Silent);
        let state = match append::discover(&s, &self.places, name, spec).await {
            Ok(state) => state,
            Err(e) => return vec![e],
        };
        if let Err(problems) = append::columns(name, spec, &state) {
            return problems;
        }
        if let Some(pred) = &spec.filter {
            let sql = format!(
                "SELECT * FROM {} WHERE ({pred}) LIMIT 0",
                self.places.sql(&spec.from)
            );
            if let Err(e) = self.spark.sql("check `where`", &sql).await {
                return vec![EngineError::user(
                    format!("flow `{name}`: `where` does not run on Spark: {e}"),
                    "write it as a Spark SQL condition over the source's columns",
                )];
            }
        }
        Vec::new()
    }

    /// The problems of replace_where flow `name` on the cluster: its columns against the
    /// source and the target, and its predicate over the target's columns.
    async fn check_replace(&self, name: &str, spec: &ReplaceWhereFlow) -> Vec<EngineError> {
        let s = Session::new(&self.spark, name, Mode::Plan, &smelt_engine::ports::Silent);
        let exported = self.exported(name);
        let state = match replace::discover(&s, &self.places, (name, spec), exported, false).await {
            Ok((state, batch)) if batch.as_ref().is_some_and(|b| b.to_load.is_empty()) => {
                // No files to read yet: the target alone, as embedded.
                return smelt_engine::replace::target_schema(name, spec, state.target_schema)
                    .err()
                    .into_iter()
                    .collect();
            }
            Ok((state, _)) => state,
            Err(e) => return vec![e],
        };
        let columns = match replace::columns(name, spec, &state) {
            Ok(columns) => columns,
            Err(problems) => return problems,
        };
        let predicate = match replace::unfilled(name, spec, &columns) {
            Ok(p) => p,
            Err(e) => return vec![e],
        };
        let nulls: Vec<String> = columns
            .iter()
            .map(|c| {
                format!(
                    "CAST(NULL AS {}) AS {}",
                    spark_type(c.ty),
                    sql::ident(&c.name)
                )
            })
            .collect();
        let sql = format!(
            "SELECT ({predicate}) AS x FROM (SELECT {}) LIMIT 0",
            nulls.join(", ")
        );
        match self.spark.sql("check `predicate`", &sql).await {
            Ok(_) => Vec::new(),
            Err(e) => vec![EngineError::user(
                format!("flow `{name}`: `predicate` does not run on Spark: {e}"),
                "write it as a Spark SQL condition over the target's columns",
            )],
        }
    }

    /// Whether an export of the pipeline writes the files flow `name` reads.
    fn exported(&self, name: &str) -> bool {
        let flows = &self.pipeline.flows;
        flows
            .iter()
            .find(|f| f.name == name)
            .is_some_and(|flow| flows.iter().any(|g| flow.reads_files_of(g)))
    }

    /// The problems of ingest flow `name` on the cluster: bronze unreadable, or its landing
    /// folder.
    async fn check_ingest(&self, name: &str, spec: &IngestFlow) -> Vec<EngineError> {
        let s = Session::new(&self.spark, name, Mode::Plan, &smelt_engine::ports::Silent);
        if let Err(e) = ingest::discover(&s, &self.places, name, spec).await {
            return vec![e];
        }
        let ingest = Ingest {
            name,
            spec,
            places: &self.places,
            ctx: &RunContext::new(false, false),
        };
        let listed = ingest.list(&s).await.err().into_iter().collect();
        self.drop_views(&s).await;
        listed
    }

    /// The expectations, `where` and `apply_as_deletes`, run on the cluster over the
    /// columns of a run (`silver`).
    async fn check_predicates(
        &self,
        name: &str,
        spec: &ApplyFlow,
        silver: &[ColumnDef],
    ) -> Result<()> {
        self.check_conditions(name, spec, silver).await?;
        if let Some(pred) = &spec.apply_as_deletes {
            let sql = format!(
                "SELECT * FROM {} WHERE ({pred}) LIMIT 0",
                self.places.sql(&spec.from)
            );
            self.spark
                .sql("check `apply_as_deletes`", &sql)
                .await
                .map_err(|e| {
                    EngineError::user(
                        format!("flow `{name}`: `apply_as_deletes` does not run on Spark: {e}"),
                        "write it as a Spark SQL predicate over bronze's columns",
                    )
                })?;
        }
        Ok(())
    }

    /// The expectations and `where`, run on the cluster over the columns they see in a run:
    /// an expectation silver's cast (non-audit) columns and the change's `_commit_timestamp`
    /// and `_commit_version`; `where` silver's columns but the update audit column.
    async fn check_conditions(
        &self,
        name: &str,
        spec: &ApplyFlow,
        silver: &[ColumnDef],
    ) -> Result<()> {
        let audit = |c: &ColumnDef, a: &Option<String>| a.as_deref() == Some(c.name.as_str());
        let typed = |c: &ColumnDef| {
            format!(
                "CAST(NULL AS {}) AS {}",
                spark_type(c.ty),
                sql::ident(&c.name)
            )
        };
        let expectation_cols: Vec<String> = silver
            .iter()
            .filter(|c| {
                !audit(c, &spec.audit.ingest_timestamp) && !audit(c, &spec.audit.update_timestamp)
            })
            .map(typed)
            .chain([
                "CAST(NULL AS TIMESTAMP) AS _commit_timestamp".to_string(),
                "CAST(NULL AS BIGINT) AS _commit_version".to_string(),
            ])
            .collect();
        let where_cols: Vec<String> = silver
            .iter()
            .filter(|c| !audit(c, &spec.audit.update_timestamp))
            .map(typed)
            .collect();
        let conditions = spec
            .expectations
            .iter()
            .map(|(e, pred)| (format!("expectation `{e}`"), pred, &expectation_cols))
            .chain(
                spec.filter
                    .iter()
                    .map(|pred| ("`where`".to_string(), pred, &where_cols)),
            );
        for (what, pred, cols) in conditions {
            let sql = format!(
                "SELECT ({pred}) AS x FROM (SELECT {}) LIMIT 0",
                cols.join(", ")
            );
            let rows = self
                .spark
                .sql("check a condition", &sql)
                .await
                .map_err(|e| {
                    EngineError::user(
                        format!("flow `{name}`: {what} does not run on Spark: {e}"),
                        "write it as a Spark SQL condition over silver's columns",
                    )
                })?;
            let ty = rows
                .schema
                .as_ref()
                .and_then(|s| s.fields().first().map(|f| f.data_type().clone()));
            if ty.is_some_and(|t| t != arrow::datatypes::DataType::Boolean) {
                return Err(EngineError::user(
                    format!("flow `{name}`: {what} (`{pred}`) is not a condition"),
                    "write a comparison such as `Name IS NOT NULL`",
                ));
            }
        }
        Ok(())
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
        result?;
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
        match self.runnable(flow)? {
            Runnable::Apply(spec) => {
                let state = discover(s, &self.places, name, spec).await?;
                if let Some(events) = events {
                    self.recover(name, state.silver.as_ref(), events).await;
                }
                let scd1 = Scd1 {
                    name,
                    spec,
                    places: &self.places,
                    ctx,
                };
                scd1.run(s, &state).await
            }
            Runnable::Append(spec) => {
                let state = append::discover(s, &self.places, name, spec).await?;
                if let Some(events) = events {
                    self.recover(name, state.target.as_ref(), events).await;
                }
                let append = Append {
                    name,
                    spec,
                    places: &self.places,
                    ctx,
                };
                append.run(s, &state).await
            }
            Runnable::Replace(spec) => {
                let (state, batch) = replace::discover(
                    s,
                    &self.places,
                    (name, spec),
                    self.exported(name),
                    ctx.full_refresh,
                )
                .await?;
                if let Some(events) = events {
                    self.recover(name, state.target.as_ref(), events).await;
                }
                let replace = Replace {
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
                    self.recover(name, state.bronze.as_ref(), events).await;
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

    fn runnable<'f>(&self, flow: &'f Flow) -> Result<Runnable<'f>> {
        let mut refused = refusals(&self.pipeline, flow, &self.settings);
        if !refused.is_empty() {
            return Err(refused.remove(0));
        }
        match &flow.kind {
            FlowKind::Apply(spec) => Ok(Runnable::Apply(spec)),
            FlowKind::Append(spec) => Ok(Runnable::Append(spec)),
            FlowKind::ReplaceWhere(spec) => Ok(Runnable::Replace(spec)),
            FlowKind::Ingest(spec) => Ok(Runnable::Ingest(spec)),
            FlowKind::Export(spec) => Ok(Runnable::Export(spec)),
        }
    }

    /// The run's views and caches, dropped (the cluster's memory freed) whatever happened;
    /// a view before those it reads (Spark would otherwise cache again every cache over a
    /// view dropped, reading the tables again).
    async fn drop_views(&self, s: &Session<'_>) {
        let views = crate::scd2::VIEWS
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
                .sql(
                    "drop a view",
                    &format!("DROP VIEW IF EXISTS {}", sql::ident(view)),
                )
                .await;
        }
    }

    /// An event-log row lost to a crash after silver's last commit comes back from it.
    async fn recover(&self, flow: &str, last: Option<&Last>, events: &mut Vec<FlowEvent>) {
        let Some(last) = last else { return };
        let Some(text) = &last.metadata else { return };
        let Ok(meta) = serde_json::from_str::<serde_json::Value>(text) else {
            return;
        };
        let (Some(run_id), Some(report)) =
            (meta["smelt.run_id"].as_str(), meta["smelt.report"].as_str())
        else {
            return;
        };
        let Ok(report) = serde_json::from_str::<FlowReport>(report) else {
            return;
        };
        if report.flow != flow {
            return;
        }
        if let Ok(false) = event_log::has_run(&self.spark, &self.places, run_id, flow).await {
            events.push(FlowEvent {
                report,
                started_at_us: last.at_us,
                finished_at_us: last.at_us,
                error: None,
            });
        }
    }

    /// Where each of `flows` stands (`smelt status`), read through Spark: bronze's version,
    /// silver's watermark and last commit. What cannot be read, and what this engine does
    /// not run, is the row's problem.
    pub async fn status(&self, flows: &[&Flow]) -> Vec<FlowStatus> {
        let mut rows = Vec::new();
        for flow in flows {
            let mut row = FlowStatus::of(flow);
            match self.runnable(flow) {
                Ok(r) => {
                    if let Err(e) = self.status_of(flow, r, &mut row).await {
                        row.problem = Some(e.to_string());
                    }
                }
                Err(e) => row.problem = Some(e.to_string()),
            }
            rows.push(row.with_lag());
        }
        rows
    }

    async fn status_of(&self, flow: &Flow, r: Runnable<'_>, row: &mut FlowStatus) -> Result<()> {
        let s = Session::new(
            &self.spark,
            &flow.name,
            Mode::Plan,
            &smelt_engine::ports::Silent,
        );
        if let Runnable::Export(spec) = r {
            let state = export::discover(&s, &self.places, &flow.name, spec).await?;
            row.bronze_version = Some(state.source_version);
            row.watermark = state.saved.version;
            if state.saved.number == 0 {
                row.problem = Some("not exported yet: run `smelt run`".into());
            }
            return Ok(());
        }
        let mut files = None;
        let (source_version, watermark, last, into) = match r {
            Runnable::Apply(spec) => {
                let state = discover(&s, &self.places, &flow.name, spec).await?;
                let (v, w) = (state.bronze_version, state.watermark);
                (v, w, state.silver, &spec.into)
            }
            Runnable::Append(spec) => {
                let state = append::discover(&s, &self.places, &flow.name, spec).await?;
                let (v, w) = (state.source_version, state.watermark);
                (v, w, state.target, &spec.into)
            }
            Runnable::Replace(spec) => {
                let exported = self.exported(&flow.name);
                let (state, batch) =
                    replace::discover(&s, &self.places, (&flow.name, spec), exported, false)
                        .await?;
                self.drop_views(&s).await;
                files = batch.map(|b| b.to_load.len());
                let (v, w) = (state.source_version, state.watermark);
                (v, w, state.target, &spec.into)
            }
            Runnable::Export(_) => unreachable!("returned above"),
            Runnable::Ingest(spec) => {
                let state = ingest::discover(&s, &self.places, &flow.name, spec).await?;
                let ingest = Ingest {
                    name: &flow.name,
                    spec,
                    places: &self.places,
                    ctx: &RunContext::new(false, false),
                };
                let found = ingest
                    .list(&s)
                    .await
                    .map(|l| l.into_iter().map(|(f, _)| f).collect());
                self.drop_views(&s).await;
                let waiting = smelt_engine::ingest::ledger::plan_found(
                    &flow.name,
                    spec,
                    found?,
                    &state.loaded,
                    false,
                )?;
                row.files_waiting = Some(waiting.to_load.len() + waiting.pending);
                let w = state.watermark;
                (w.unwrap_or(0), w, state.bronze, &spec.into)
            }
        };
        row.bronze_version = Some(source_version);
        if files.is_some() {
            // A batch of files has no source version, as embedded.
            row.bronze_version = None;
            row.files_waiting = files;
        }
        row.watermark = watermark;
        match last {
            Some(last) => {
                row.silver_version = Some(last.version);
                self.last_run(into, row).await?;
            }
            None => row.problem = Some(format!("`{into}` not created yet: run `smelt run`")),
        }
        Ok(())
    }

    /// When silver last changed and by which run, as embedded: its latest commit passing
    /// over maintenance (OPTIMIZE, VACUUM, smelt's own maintenance commits), within the last
    /// 100; else the latest.
    async fn last_run(&self, into: &TableName, row: &mut FlowStatus) -> Result<()> {
        let sql = format!("DESCRIBE HISTORY {} LIMIT 101", self.places.sql(into));
        let rows = self.spark.sql("read silver's history", &sql).await?;
        let (ops, meta, at) = (
            rows.strings("operation"),
            rows.strings("userMetadata"),
            rows.micros("timestamp"),
        );
        let json = |i: usize| -> serde_json::Value {
            meta[i]
                .as_deref()
                .and_then(|m| serde_json::from_str(m).ok())
                .unwrap_or_default()
        };
        let maintenance = |i: usize| {
            json(i).get("smelt.operation").is_some()
                || matches!(
                    ops[i].as_deref(),
                    Some("OPTIMIZE" | "VACUUM START" | "VACUUM END")
                )
        };
        let n = ops.len().min(meta.len()).min(at.len());
        let Some(i) = (0..n).find(|&i| !maintenance(i)).or((n > 0).then_some(0)) else {
            return Ok(());
        };
        row.last_run_at = at[i].and_then(|us| utc_text(us.div_euclid(1000)));
        row.last_run_id = json(i)["smelt.run_id"].as_str().map(str::to_string);
        Ok(())
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
