//! A real Spark cluster for the tests (DESIGN §10): a standalone master, two one-core workers
//! and a Spark Connect server with Delta Lake, all on 127.0.0.1, installed by
//! `testenv/setup.sh` (PySpark from PyPI, the Delta jars from Maven Central) and started by
//! `testenv/spark/start.sh` when a test first needs it, shared by every test of the process
//! (the Spark tests run side by side on it), and stopped when the test process ends — by a
//! watchdog started with it, however the process ends. `SMELT_TEST_SPARK_REMOTE=sc://…`
//! points the tests at a cluster already running instead.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The cluster of this test process, once a test asked for it.
static CLUSTER: OnceLock<SparkCluster> = OnceLock::new();

/// Whose turn it is to run smelt's Spark engine on the cluster.
static TURN: Mutex<()> = Mutex::new(());

/// The turn of a test that runs smelt on the cluster, held until it ends: such tests take
/// turns. Run side by side, two SCD2 scenarios came out wrong where each alone was right
/// (the cause is not found yet); the other tests run beside them.
pub fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running cluster (or the one named by `SMELT_TEST_SPARK_REMOTE`).
pub struct SparkCluster {
    /// The Spark Connect URL.
    pub url: String,
}

impl SparkCluster {
    /// The cluster of `testenv/spark`: the one this process started, else a new one (about
    /// 40 s to start), or the one named by `SMELT_TEST_SPARK_REMOTE`.
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
