//! What `validate` checks of each flow on the cluster, beyond what the engine refuses: the
//! tables and columns a flow reads and writes, and its conditions run as Spark SQL.

use smelt_engine::context::RunContext;
use smelt_engine::{EngineError, Result};
use smelt_spec::{AppendFlow, ApplyFlow, ColumnDef, IngestFlow, ReplaceWhereFlow};

use super::SparkEngine;
use crate::flow::apply::{columns, discover};
use crate::flow::ingest::{self, Ingest};
use crate::flow::{append, replace_where as replace};
use crate::predicate::spark_sql;
use crate::session::{Mode, Session};
use crate::sql;
use crate::sql::spark_type;
use smelt_rules::predicate::{self as scope, Sees};

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
        match self
            .check_predicates(spec, &columns.silver.columns, &state.bronze_schema)
            .await
        {
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
            let columns: Vec<&str> = state
                .source_schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            let spark = match spark_sql(pred, "`where`", Some(&columns)) {
                Ok(spark) => spark,
                Err(e) => return vec![e],
            };
            let sql = format!(
                "SELECT * FROM {} WHERE ({spark}) LIMIT 0",
                self.places.sql(&spec.from)
            );
            if let Err(e) = self.spark.sql("check `where`", &sql).await {
                return vec![EngineError::user(
                    format!("`where` (`{pred}`) does not run on Spark: {e}"),
                    "write it with the columns, operators and functions docs/pipeline.md lists for predicates",
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
        match self
            .check_condition("`predicate`", &spec.predicate, &predicate, &nulls)
            .await
        {
            Ok(()) => Vec::new(),
            Err(e) => vec![e],
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

    /// The expectations, `where` and `apply_as_deletes`: each checked against the columns it
    /// sees (the rules both engines apply), written as Spark SQL, and run on the cluster
    /// over those columns, typed as in a run (`silver`, `bronze` as stored).
    pub(super) async fn check_predicates(
        &self,
        spec: &ApplyFlow,
        silver: &[ColumnDef],
        bronze: &arrow::datatypes::SchemaRef,
    ) -> Result<()> {
        let typed = |c: &ColumnDef| {
            format!(
                "CAST(NULL AS {}) AS {}",
                spark_type(c.ty),
                sql::ident(&c.name)
            )
        };
        let change = [
            "CAST(NULL AS TIMESTAMP) AS _commit_timestamp".to_string(),
            "CAST(NULL AS BIGINT) AS _commit_version".to_string(),
        ];
        let names: Vec<&str> = silver.iter().map(|c| c.name.as_str()).collect();
        let bronze_names: Vec<&str> = bronze.fields().iter().map(|f| f.name().as_str()).collect();
        let bronze_type = |c: &str| {
            let ty = bronze
                .field_with_name(c)
                .ok()
                .map(|f| f.data_type().clone());
            ty.and_then(|t| smelt_engine::schema::column_type(&t))
                .map_or("STRING".to_string(), spark_type)
        };
        for (what, pred, sees) in scope::apply_predicates(spec) {
            let seen = scope::scope(spec, sees, &names, &bronze_names);
            // The columns it sees, typed as in a run: silver's, bronze's as stored, the
            // change's own.
            let cols: Vec<String> = seen
                .iter()
                .map(|c| match (sees, c.as_str()) {
                    (_, "_commit_version") => change[1].clone(),
                    (_, "_commit_timestamp") => change[0].clone(),
                    (Sees::Change, c) => {
                        format!("CAST(NULL AS {}) AS {}", bronze_type(c), sql::ident(c))
                    }
                    (_, c) => silver.iter().find(|d| d.name == c).map_or_else(
                        || format!("CAST(NULL AS STRING) AS {}", sql::ident(c)),
                        typed,
                    ),
                })
                .collect();
            let seen: Vec<&str> = seen.iter().map(String::as_str).collect();
            let spark = spark_sql(pred, &what, Some(&seen))?;
            self.check_condition(&what, pred, &spark, &cols).await?;
        }
        Ok(())
    }

    /// Predicate `pred` of option `what`, as Spark SQL (`spark`), run over `cols` (typed
    /// NULLs): it must run, and be a condition.
    async fn check_condition(
        &self,
        what: &str,
        pred: &str,
        spark: &str,
        cols: &[String],
    ) -> Result<()> {
        let sql = format!(
            "SELECT ({spark}) AS x FROM (SELECT {}) LIMIT 0",
            cols.join(", ")
        );
        let rows = self
            .spark
            .sql("check a condition", &sql)
            .await
            .map_err(|e| {
                EngineError::user(
                    format!("{what} (`{pred}`) does not run on Spark: {e}"),
                    "write it with the columns, operators and functions docs/pipeline.md lists for predicates",
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
        Ok(())
    }
}
