//! A table format under test, and the harness that runs flows on it as `smelt run` does.

use std::path::Path;

use arrow::array::{BooleanArray, RecordBatch};
use async_trait::async_trait;
use smelt_engine::EngineError;
use smelt_engine::flow::FlowRun;
use smelt_engine::flow::apply::{ApplyTables, RunContext, run_apply, tombstone_table};
use smelt_engine::ports::{Lake, LakeTable, Silent, SourceOptions, TableRole, Watermark};
use smelt_engine::rejects::rejects_table;
use smelt_engine::report::FlowReport;
use smelt_spec::{ApplyFlow, FlowKind, Pipeline, TableName};

use crate::crash::CrashOnCommit;

/// A table format's lake, as the suites need it.
#[async_trait]
pub trait Backend: Send + Sync + Sized {
    /// A new, empty lake kept in `dir`.
    async fn create(dir: &Path) -> Self;
    /// The lake the engine runs on.
    fn lake(&self) -> &dyn Lake;
    /// What a pipeline file says before `flows:` to reach this lake (a catalog).
    fn head(&self) -> String {
        "lake: ./lake\n".into()
    }
    /// Table `schema.table`'s name in this lake (`catalog.schema.table` in a catalog).
    fn name(&self, table: &str) -> String {
        table.to_string()
    }
    /// Every row table `table` holds, read by the format's own reader (not smelt's
    /// lookups); `None` when it does not exist.
    async fn scan(&self, table: &TableName) -> Option<RecordBatch>;
}

/// How a run goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct How {
    /// `--since`: replays the bronze commits after this one (an index into the commits
    /// appended, not a version).
    pub replay_after: Option<usize>,
    /// `--full-refresh`.
    pub full_refresh: bool,
    /// A memory limit so small that the changes are applied in key partitions (several
    /// stages of silver and tombstones in one run).
    pub partitioned: bool,
    /// Dies at silver's commit (after the tombstones commit).
    pub crash: bool,
}

/// Where the model suites ([`crate::scd1`], [`crate::scd2`]) run: a table format under the
/// embedded engine ([`Harness`]), or another engine (the Spark engine, in smelt-cli's tests).
/// The model is the oracle of every target.
#[async_trait(?Send)]
pub trait Target: Sized {
    /// Whether the target replays a window of bronze (`--since`); the suites leave replays
    /// out where it does not.
    const REPLAYS: bool = true;
    /// A new, empty lake.
    async fn start() -> Self;
    /// The apply flow `flow` of a pipeline whose flow body (under `apply:`, indented six
    /// spaces) is `body`, `{from}` and `{into}` standing for bronze `b.t` and silver
    /// `into`, and whose schema file `s.sql` holds `ddl` (`{into}` for the silver name).
    fn apply_flow(&self, flow: &str, into: &str, ddl: &str, body: &str) -> ApplyFlow;
    /// Appends `batch` to bronze `b.t` in one commit (creating the table first).
    async fn append(&mut self, batch: RecordBatch);
    /// One run of `flow` named `name`, as `smelt run` does it (every table opened anew);
    /// its report, `None` for a run that crashed (`how.crash`).
    async fn run(&self, name: &str, flow: &ApplyFlow, how: How) -> Option<FlowReport>;
    /// Every row of table `table`, by the format's own reader; `None` when it does not
    /// exist.
    async fn scan(&self, table: &TableName) -> Option<RecordBatch>;
}

/// A lake of `B` in a temporary folder, with its bronze commits.
pub struct Harness<B> {
    pub dir: tempfile::TempDir,
    pub backend: B,
    /// The bronze version each appended commit made.
    versions: Vec<i64>,
}

impl<B: Backend> Harness<B> {
    /// Table `schema.table` of this lake.
    pub fn table(&self, table: &str) -> TableName {
        TableName::parse(&self.backend.name(table)).expect("a table name")
    }

    /// The bronze version appended commit `commit` made.
    pub fn version_of(&self, commit: usize) -> i64 {
        self.versions[commit]
    }
}

#[async_trait(?Send)]
impl<B: Backend> Target for Harness<B> {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let backend = B::create(dir.path()).await;
        Harness {
            dir,
            backend,
            versions: Vec::new(),
        }
    }

    fn apply_flow(&self, flow: &str, into: &str, ddl: &str, body: &str) -> ApplyFlow {
        let (from, into) = (self.backend.name("b.t"), self.backend.name(into));
        let dir = self.dir.path();
        std::fs::write(dir.join("s.sql"), ddl.replace("{into}", &into)).expect("writing s.sql");
        let yaml = format!(
            "{head}flows:\n  {flow}:\n    apply:\n      from: {from}\n      into: {into}\n      schema: s.sql\n{body}",
            head = self.backend.head()
        );
        let pipeline =
            Pipeline::from_str(&yaml, &dir.join("smelt.yaml")).expect("a valid pipeline");
        let FlowKind::Apply(apply) = pipeline.flows[0].kind.clone() else {
            panic!("an apply flow")
        };
        apply
    }

    async fn append(&mut self, batch: RecordBatch) {
        let lake = self.backend.lake();
        let name = self.table("b.t");
        let mut bronze = lake.table(&name, TableRole::Bronze).await.expect("bronze");
        if bronze.schema().is_none() {
            bronze
                .create(batch.schema())
                .await
                .expect("creating bronze");
        }
        let rows = batch.num_rows();
        bronze
            .stage(batch, &BooleanArray::from(vec![false; rows]), &[])
            .await
            .expect("staging bronze");
        let commit = self.versions.len();
        let watermark = Watermark {
            app_id: "test/bronze".into(),
            version: commit as i64,
            run_id: format!("bronze-{commit}"),
            report: None,
            extra: Vec::new(),
            source: None,
        };
        bronze
            .commit(&[], &watermark)
            .await
            .expect("committing bronze");
        let source = lake
            .source(&name, SourceOptions::default())
            .await
            .expect("bronze");
        self.versions.push(source.version());
    }

    /// `how.partitioned` runs in key partitions under a memory limit of one byte.
    async fn run(&self, name: &str, flow: &ApplyFlow, how: How) -> Option<FlowReport> {
        let lake = self.backend.lake();
        let source = lake
            .source(&flow.from, SourceOptions::default())
            .await
            .expect("bronze");
        let silver = lake
            .table(&flow.into, TableRole::Silver)
            .await
            .expect("silver");
        let mut silver: Box<dyn LakeTable> = if how.crash {
            Box::new(CrashOnCommit(silver))
        } else {
            silver
        };
        let tombstones = tombstone_table(&flow.into);
        let mut tombstones = lake
            .table(&tombstones, TableRole::Tombstones)
            .await
            .expect("tombstones");
        let rejects = rejects_table(&flow.into);
        let mut rejects = lake
            .table(&rejects, TableRole::Rejects)
            .await
            .expect("rejects");
        let mut ctx = RunContext::new(false, how.full_refresh);
        ctx.replay_after = how.replay_after.map(|c| self.version_of(c));
        if how.partitioned {
            ctx.memory_limit = Some(1);
        }
        let tables = ApplyTables {
            silver: silver.as_mut(),
            tombstones: tombstones.as_mut(),
            rejects: rejects.as_mut(),
        };
        let result = run_apply(
            FlowRun::new(name, flow, &ctx, &Silent),
            source.as_ref(),
            tables,
        )
        .await;
        if how.crash {
            assert!(
                matches!(result, Err(EngineError::Failpoint(_))),
                "{result:?}"
            );
            return None;
        }
        Some(result.unwrap_or_else(|e| panic!("the run failed: {e}")))
    }

    async fn scan(&self, table: &TableName) -> Option<RecordBatch> {
        self.backend.scan(table).await
    }
}

/// Bronze commits of `bundles` (changes that stay together), in order: `cuts[i]` bundles in
/// commit `i`, the rest in a last commit.
pub fn cut_into_commits<T: Clone>(bundles: &[Vec<T>], cuts: &[usize]) -> Vec<Vec<T>> {
    let mut commits = Vec::new();
    let mut rest = bundles;
    for &cut in cuts {
        if rest.is_empty() {
            break;
        }
        let take = cut.min(rest.len());
        commits.push(rest[..take].concat());
        rest = &rest[take..];
    }
    if !rest.is_empty() {
        commits.push(rest.concat());
    }
    commits
}

/// Runs `f` on a runtime of its own (one per property case).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}
