//! `smelt status` through Spark: each flow's source version, watermark and last run.

use smelt_engine::Result;
use smelt_engine::context::RunContext;
use smelt_engine::ports::keys;
use smelt_engine::status::{FlowStatus, utc_text};
use smelt_spec::{Flow, TableName};

use super::{Runnable, SparkEngine};
use crate::flow::apply::discover;
use crate::flow::export;
use crate::flow::ingest::{self, Ingest};
use crate::flow::{append, replace_where as replace};
use crate::session::{Mode, Session};

impl SparkEngine {
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
                row.problem = Some(smelt_rules::messages::NOT_EXPORTED_YET.into());
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
            Runnable::ReplaceWhere(spec) => {
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
                let waiting = smelt_engine::flow::ingest::ledger::plan_found(
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
                match into.catalog {
                    // An Iceberg target: its current snapshot, and the run id in its summary.
                    Some(_) => {
                        row.last_run_at = utc_text(last.at_us.div_euclid(1000));
                        row.last_run_id = last
                            .metadata
                            .as_deref()
                            .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
                            .and_then(|m| m[keys::RUN_ID].as_str().map(str::to_string));
                    }
                    None => self.last_run(into, row).await?,
                }
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
            json(i).get(keys::OPERATION).is_some()
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
        row.last_run_id = json(i)[keys::RUN_ID].as_str().map(str::to_string);
        Ok(())
    }
}
