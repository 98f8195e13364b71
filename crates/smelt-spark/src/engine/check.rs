//! What `validate` checks of each flow on the cluster, beyond what the engine refuses: the
//! tables and columns a flow reads and writes, and its conditions run as Spark SQL.

use smelt_engine::context::RunContext;
use smelt_engine::{EngineError, Result};
use smelt_spec::{AppendFlow, ApplyFlow, ColumnDef, IngestFlow, ReplaceWhereFlow};

use super::SparkEngine;
use crate::ingest::{self, Ingest};
use crate::scd1::{columns, discover, spark_type};
use crate::session::{Mode, Session};
use crate::{append, replace, sql};

impl SparkEngine {
    /// The problems of apply flow `name` on the cluster: its columns against silver and
    /// bronze (as embedded finds them), then its conditions.
    pub(super) async fn check_apply(&self, name: &str, spec: &ApplyFlow) -> Vec<EngineError> {
        let s = Session::new(&self.spark, name, Mode::Plan, &smelt_engine::ports::Silent);
        let state = match discover(&s, &self.places, name, spec).await {
            Ok(state) => state,
            Err(e) => return vec![e],
        };
        let columns = match columns::check(spec, &state) {
            Ok(columns) => columns,
            Err(problems) => return problems,
        };
        match self.check_predicates(spec, &columns.silver.columns).await {
            Ok(()) => Vec::new(),
            Err(e) => vec![e],
        }
    }

    /// The problems of append flow `name` on the cluster: its columns against the source
    /// and the target, and its `where` over the source's columns.
    pub(super) async fn check_append(&self, name: &str, spec: &AppendFlow) -> Vec<EngineError> {
        let s = Session::new(&self.spark, name, Mode::Plan, &smelt_engine::ports::Silent);
        let state = match append::discover(&s, &self.places, name, spec).await {
            Ok(state) => state,
            Err(e) => return vec![e],
        };
        if let Err(problems) = append::columns(spec, &state) {
            return problems;
        }
        if let Some(pred) = &spec.filter {
            let sql = format!(
                "SELECT * FROM {} WHERE ({pred}) LIMIT 0",
                self.places.sql(&spec.from)
            );
            if let Err(e) = self.spark.sql("check `where`", &sql).await {
                return vec![EngineError::user(
                    format!("`where` does not run on Spark: {e}"),
                    "write it as a Spark SQL condition over the source's columns",
                )];
            }
        }
        Vec::new()
    }

    /// The problems of replace_where flow `name` on the cluster: its columns against the
    /// source and the target, and its predicate over the target's columns.
    pub(super) async fn check_replace(
        &self,
        name: &str,
        spec: &ReplaceWhereFlow,
    ) -> Vec<EngineError> {
        let s = Session::new(&self.spark, name, Mode::Plan, &smelt_engine::ports::Silent);
        let exported = self.exported(name);
        let state = match replace::discover(&s, &self.places, (name, spec), exported, false).await {
            Ok((state, batch)) if batch.as_ref().is_some_and(|b| b.to_load.is_empty()) => {
                // No files to read yet: the target alone, as embedded.
                return smelt_engine::flow::replace_where::target_schema(spec, state.target_schema)
                    .err()
                    .into_iter()
                    .collect();
            }
            Ok((state, _)) => state,
            Err(e) => return vec![e],
        };
        let columns = match replace::columns(spec, &state) {
            Ok(columns) => columns,
            Err(problems) => return problems,
        };
        let predicate = match replace::unfilled(spec, &columns) {
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
                format!("`predicate` does not run on Spark: {e}"),
                "write it as a Spark SQL condition over the target's columns",
            )],
        }
    }

    /// Whether an export of the pipeline writes the files flow `name` reads.
    pub(super) fn exported(&self, name: &str) -> bool {
        let flows = &self.pipeline.flows;
        flows
            .iter()
            .find(|f| f.name == name)
            .is_some_and(|flow| flows.iter().any(|g| flow.reads_files_of(g)))
    }

    /// The problems of ingest flow `name` on the cluster: bronze unreadable, or its landing
    /// folder.
    pub(super) async fn check_ingest(&self, name: &str, spec: &IngestFlow) -> Vec<EngineError> {
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
    pub(super) async fn check_predicates(
        &self,
        spec: &ApplyFlow,
        silver: &[ColumnDef],
    ) -> Result<()> {
        self.check_conditions(spec, silver).await?;
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
                        format!("`apply_as_deletes` does not run on Spark: {e}"),
                        "write it as a Spark SQL predicate over bronze's columns",
                    )
                })?;
        }
        Ok(())
    }

    /// The expectations and `where`, run on the cluster over the columns they see in a run:
    /// an expectation silver's cast (non-audit) columns and the change's `_commit_timestamp`
    /// and `_commit_version`; `where` silver's columns but the update audit column.
    pub(super) async fn check_conditions(
        &self,
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
                        format!("{what} does not run on Spark: {e}"),
                        "write it as a Spark SQL condition over silver's columns",
                    )
                })?;
            let ty = rows
                .schema
                .as_ref()
                .and_then(|s| s.fields().first().map(|f| f.data_type().clone()));
            if ty.is_some_and(|t| t != arrow::datatypes::DataType::Boolean) {
                return Err(EngineError::user(
                    format!("{what} (`{pred}`) is not a condition"),
                    "write a comparison such as `Name IS NOT NULL`",
                ));
            }
        }
        Ok(())
    }
}
