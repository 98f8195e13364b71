//! The SCD1 and SCD2 models of `smelt-test` on the Spark engine: the model is the oracle,
//! as it is of every table format embedded. Bronze is a Delta table written by
//! smelt's Delta lake; each run is `smelt run` of a pipeline with `engine: spark` on the
//! test cluster, killed (SIGABRT) at the silver `MERGE` for a crash; silver and its
//! tombstones are read back by the embedded Delta reader. What the Spark engine does not
//! run is left out: replays (`--since`, refused on Spark) and runs in key partitions (an
//! embedded memory limit: on Spark a plain run).

use std::sync::MutexGuard;

use arrow::array::RecordBatch;
use async_trait::async_trait;
use smelt_engine::report::FlowReport;
use smelt_spec::{ApplyFlow, TableName};
use smelt_test::delta::Delta;
use smelt_test::{Harness, How, Target};

use crate::common;
use crate::spark_cluster::SparkCluster;

/// The Spark engine over a Delta lake in a temporary folder (`spark.yaml` there), and the
/// test's turn on the cluster.
pub(crate) struct Spark {
    lake: Harness<Delta>,
    _turn: MutexGuard<'static, ()>,
}

#[async_trait(?Send)]
impl Target for Spark {
    const REPLAYS: bool = false;

    // The turn is held for the whole test, awaits included: other tests wait for it on
    // their own threads.
    #[allow(clippy::await_holding_lock)]
    async fn start() -> Self {
        let turn = crate::spark_cluster::turn();
        SparkCluster::start();
        Spark {
            lake: <Harness<Delta> as Target>::start().await,
            _turn: turn,
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

// The SCD1 property and the spelled-out cases of both models. The SCD2 properties
// (`smelt_test::scd2::deliver`) are left out here: a delivery is about ten runs, and one run
// of the Spark engine took 1–3 minutes on the 2-core test machine under the suite's load.
smelt_test::proptest::proptest! {
    #![proptest_config(smelt_test::proptest::test_runner::Config {
        cases: smelt_test::cases(1),
        max_shrink_iters: 8,
        ..smelt_test::proptest::test_runner::Config::default()
    })]

    #[test]
    fn scd1_silver_and_tombstones_match_the_model_after_every_run(
        plan in smelt_test::scd1::delivery()
    ) {
        smelt_test::scd1::deliver::<Spark>(&plan);
    }
}

#[test]
fn scd1_null_and_composite_keys_with_late_deletes_and_a_tie() {
    smelt_test::scd1::null_and_composite_keys::<Spark>(false);
}

#[test]
fn scd1_null_and_composite_keys_with_late_deletes_and_a_tie_merge_on_read() {
    smelt_test::scd1::null_and_composite_keys::<Spark>(true);
}

#[test]
fn scd2_deletes_that_arrive_before_the_versions_they_close() {
    smelt_test::scd2::deletes_that_arrive_before_the_versions_they_close::<Spark>();
}
