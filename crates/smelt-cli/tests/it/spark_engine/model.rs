//! The SCD1 and SCD2 models of `smelt-test` on the Spark engine: the model is the oracle,
//! as it is of every table format embedded. Bronze is a Delta table written by
//! smelt's Delta lake; each run is `smelt run` of a pipeline with `engine: spark` on the
//! test cluster, killed (SIGABRT) at the silver `MERGE` for a crash; silver and its
//! tombstones are read back by the embedded Delta reader. What the Spark engine does not
//! run is left out: replays (`--since`, refused on Spark) and runs in key partitions (an
//! embedded memory limit: on Spark a plain run).

use arrow::array::RecordBatch;
use async_trait::async_trait;
use smelt_engine::report::FlowReport;
use smelt_spec::{ApplyFlow, TableName};
use smelt_test::delta::Delta;
use smelt_test::{Harness, How, Target};

use crate::cluster::SparkCluster;
use crate::common;

/// The Spark engine over a Delta lake in a temporary folder (`spark.yaml` there).
pub(crate) struct Spark {
    lake: Harness<Delta>,
}

#[async_trait(?Send)]
impl Target for Spark {
    const REPLAYS: bool = false;

    async fn start() -> Self {
        SparkCluster::start();
        Spark {
            lake: <Harness<Delta> as Target>::start().await,
        }
    }

    fn apply_flow(&self, flow: &str, into: &str, ddl: &str, body: &str) -> ApplyFlow {
        let apply = self.lake.apply_flow(flow, into, ddl, body);
        let url = &SparkCluster::start().url;
        let yaml = format!(
            "engine: spark\nconnect: {url}\nlake: ./lake\nflows:\n  {flow}:\n    apply:\n      \
             from: b.t\n      into: {into}\n      schema: s.sql\n      cast_dialect: spark\n{body}"
        );
        std::fs::write(self.lake.dir.path().join("spark.yaml"), yaml).expect("writing spark.yaml");
        apply
    }

    async fn append(&mut self, batch: RecordBatch) {
        self.lake.append(batch).await;
    }

    async fn run(&self, _name: &str, _flow: &ApplyFlow, how: How) -> Option<FlowReport> {
        assert!(how.replay_after.is_none(), "no replay on Spark");
        let mut args = vec!["-p", "spark.yaml", "--json", "run"];
        if how.full_refresh {
            args.push("--full-refresh");
        }
        let dir = self.lake.dir.path();
        let mut smelt = std::process::Command::new(env!("CARGO_BIN_EXE_smelt"));
        common::clean_env(&mut smelt, dir);
        smelt.args(&args);
        if how.crash {
            let out = common::abort_at_in(dir, "before_spark_silver", &args);
            assert!(
                common::signal_of(&out.status).is_some(),
                "the run was not killed at the silver MERGE: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        let out = smelt.output().expect("smelt runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the Spark run failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON report");
        Some(serde_json::from_value(report["flows"][0].clone()).expect("a flow report"))
    }

    async fn scan(&self, table: &TableName) -> Option<RecordBatch> {
        self.lake.scan(table).await
    }
}

// The SCD1 and SCD2 properties, one random delivery each (a delivery is about ten runs, and
// a run of the Spark engine takes about 10 s on the 2-core test machine), and the
// spelled-out cases of both models: scenarios of [`super::SCENARIOS`].

/// One random SCD1 delivery (more with `PROPTEST_CASES`).
pub(super) fn scd1_silver_and_tombstones_match_the_model_after_every_run() {
    super::one_case()
        .run(&smelt_test::scd1::delivery(), |plan| {
            smelt_test::scd1::deliver::<Spark>(&plan);
            Ok(())
        })
        .unwrap();
}

/// One random SCD2 delivery (more with `PROPTEST_CASES`).
pub(super) fn scd2_history_matches_the_model_after_every_run() {
    super::one_case()
        .run(&smelt_test::scd2::delivery(), |plan| {
            smelt_test::scd2::deliver::<Spark>(&plan, false);
            Ok(())
        })
        .unwrap();
}

pub(super) fn scd1_null_and_composite_keys_with_late_deletes_and_a_tie() {
    smelt_test::scd1::null_and_composite_keys::<Spark>(false);
}

pub(super) fn scd1_null_and_composite_keys_with_late_deletes_and_a_tie_merge_on_read() {
    smelt_test::scd1::null_and_composite_keys::<Spark>(true);
}

pub(super) fn scd2_deletes_that_arrive_before_the_versions_they_close() {
    smelt_test::scd2::deletes_that_arrive_before_the_versions_they_close::<Spark>();
}
