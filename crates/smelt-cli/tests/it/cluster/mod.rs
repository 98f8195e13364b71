//! A real Spark cluster for the tests (DESIGN §10): a standalone master, two one-core workers
//! and a Spark Connect server with Delta Lake, all on 127.0.0.1, installed by
//! `testenv/setup.sh` (PySpark from PyPI, the Delta jars from Maven Central) and started by
//! `testenv/spark/start.sh` when a test first needs it, shared by every test of the process,
//! and stopped when the test process ends — by a watchdog started with it, however the
//! process ends. `SMELT_TEST_SPARK_REMOTE=sc://…` points the tests at a cluster already
//! running instead.
//!
//! The scenarios of smelt's Spark engine ([`crate::spark_engine::SCENARIOS`]) run in one test,
//! [`runs_every_spark_scenario_in_turn`], two at a time on the one cluster (as two teams'
//! pipelines would: each smelt run has its own Spark session and its flow its own view names, see
//! `smelt-spark/src/views.rs`), beside the other tests, without holding the test threads the
//! rest of the suite needs. It is named to start early: the test harness starts tests in the
//! order of their names, and this one is the longest. `SMELT_TEST_SPARK_SCENARIOS=a,b` runs
//! only the scenarios whose names contain `a` or `b`; `SMELT_TEST_SPARK_AT_ONCE=n` runs `n` at
//! a time (1: in turn).

use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The cluster of this test process, once a test asked for it.
static CLUSTER: OnceLock<SparkCluster> = OnceLock::new();

#[test]
fn runs_every_spark_scenario_in_turn() {
    let only = std::env::var("SMELT_TEST_SPARK_SCENARIOS").ok();
    let chosen: Vec<_> = crate::spark_engine::SCENARIOS
        .iter()
        .filter(|(name, _)| {
            only.as_deref()
                .is_none_or(|only| only.split(',').any(|part| name.contains(part.trim())))
        })
        .collect();
    assert!(
        !chosen.is_empty(),
        "no Spark scenario's name contains any of SMELT_TEST_SPARK_SCENARIOS={:?}; \
         the scenarios: {}",
        only.unwrap_or_default(),
        crate::spark_engine::SCENARIOS
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let url = &SparkCluster::start().url;
    let at_once: usize = std::env::var("SMELT_TEST_SPARK_AT_ONCE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
        .max(1);
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    let run_some = || {
        while let Some((name, scenario)) = chosen.get(next.fetch_add(1, Ordering::SeqCst)) {
            let started = Instant::now();
            // A failed scenario's panic is printed (with the test's output) and the next runs.
            let passed = catch_unwind(AssertUnwindSafe(|| scenario(url))).is_ok();
            let line = format!(
                "Spark scenario {name}: {} in {:.0} s\n",
                if passed { "ok" } else { "FAILED" },
                started.elapsed().as_secs_f64()
            );
            // Progress for whoever watches the suite (stderr, not the test's captured output).
            let _ = std::io::stderr().write_all(line.as_bytes());
            if !passed {
                failed.lock().unwrap().push(*name);
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 0..at_once {
            scope.spawn(run_some);
        }
    });
    let failed = failed.into_inner().unwrap();
    assert!(
        failed.is_empty(),
        "{} of {} Spark scenarios failed (their panics are above): {}",
        failed.len(),
        chosen.len(),
        failed.join(", ")
    );
}

/// A running cluster (or the one named by `SMELT_TEST_SPARK_REMOTE`).
pub struct SparkCluster {
    /// The Spark Connect URL.
    pub url: String,
}

impl SparkCluster {
    /// The cluster of `testenv/spark`: the one this process started, else a new one (20 to
    /// 30 s to start), or the one named by `SMELT_TEST_SPARK_REMOTE`.
    pub fn start() -> &'static Self {
        CLUSTER.get_or_init(Self::new)
    }

    fn new() -> Self {
        if let Ok(url) = std::env::var("SMELT_TEST_SPARK_REMOTE") {
            return Self { url };
        }
        let script = testenv().join("start.sh");
        assert!(
            testenv().join(".venv/bin/python").exists(),
            "the test Spark cluster is not installed: run `testenv/setup.sh` (the README's test command does)"
        );
        let dir = tempfile::Builder::new()
            .prefix("smelt-spark-")
            .tempdir()
            .unwrap()
            .keep();
        // Stops the cluster and removes its folder once this process is gone: it outlives
        // the test process, so it is never waited for.
        #[allow(clippy::zombie_processes)]
        Command::new("setsid")
            .args([
                "bash",
                "-c",
                r#"while kill -0 "$0" 2>/dev/null; do sleep 1; done; bash "$1" "$2"; rm -rf "$2""#,
            ])
            .arg(std::process::id().to_string())
            .arg(testenv().join("stop.sh"))
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the cluster's watchdog starts");
        let out = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .output()
            .unwrap();
        let cluster = Self {
            url: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        };
        assert!(
            out.status.success() && cluster.url.starts_with("sc://"),
            "starting the Spark cluster failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        cluster
    }
}

impl SparkCluster {
    /// A Spark Connect session on the cluster and the runtime that drives it.
    pub fn connect(&self) -> (tokio::runtime::Runtime, smelt_spark::client::Spark) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let spark = runtime
            .block_on(smelt_spark::client::Spark::connect(&self.url))
            .unwrap();
        (runtime, spark)
    }
}

fn testenv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testenv/spark")
}
