//! A real Spark cluster for the tests (DESIGN §10): a standalone master, two one-core workers
//! and a Spark Connect server with Delta Lake, all on 127.0.0.1, installed by
//! `testenv/setup.sh` (PySpark from PyPI, the Delta jars from Maven Central) and started by
//! `testenv/spark/start.sh` when a test first needs it, shared by the tests that run while it
//! is up, and stopped when the last of them drops it. `SMELT_TEST_SPARK_REMOTE=sc://…` points
//! the tests at a cluster already running instead.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};

/// The cluster tests hold now, if any.
static RUNNING: Mutex<Weak<SparkCluster>> = Mutex::new(Weak::new());

/// A running cluster (or the one named by `SMELT_TEST_SPARK_REMOTE`).
pub struct SparkCluster {
    /// The Spark Connect URL.
    pub url: String,
    /// The cluster's folder (logs, pids) when this process started it.
    dir: Option<tempfile::TempDir>,
}

impl SparkCluster {
    /// The cluster of `testenv/spark`: the one another test holds, else a new one (about
    /// 40 s to start), or the one named by `SMELT_TEST_SPARK_REMOTE`.
    pub fn start() -> Arc<Self> {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cluster) = running.upgrade() {
            return cluster;
        }
        let cluster = Arc::new(Self::new());
        *running = Arc::downgrade(&cluster);
        cluster
    }

    fn new() -> Self {
        if let Ok(url) = std::env::var("SMELT_TEST_SPARK_REMOTE") {
            return Self { url, dir: None };
        }
        let script = testenv().join("start.sh");
        assert!(
            testenv().join(".venv/bin/python").exists(),
            "the test Spark cluster is not installed: run `testenv/setup.sh` (the README's test command does)"
        );
        let dir = tempfile::Builder::new()
            .prefix("smelt-spark-")
            .tempdir()
            .unwrap();
        let out = Command::new("bash")
            .arg(&script)
            .arg(dir.path())
            .output()
            .unwrap();
        let cluster = Self {
            url: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            dir: Some(dir),
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

impl Drop for SparkCluster {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = Command::new("bash")
                .arg(testenv().join("stop.sh"))
                .arg(dir.path())
                .output();
        }
    }
}

fn testenv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testenv/spark")
}
