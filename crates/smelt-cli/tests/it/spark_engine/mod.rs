//! The Spark engine against its reference, the embedded engine (DESIGN §10, issue 39): the
//! same pipeline over the same bronze (one folder, placed with `tables:`), run embedded into
//! one lake and on the test Spark cluster into another, must give equal silver, tombstones
//! and reports (all but the run's own timestamps), step by step — seed 000's product2 (rows
//! re-sent within a commit, sequenced by `_commit_timestamp`) and product2_deletes (soft
//! deletes, late changes, a restore); runs killed between the Spark engine's statements,
//! rerun, end in the same tables, and so do runs SIGKILLed at random moments; what the engine
//! does not run is refused at `validate`; seed 004 on Iceberg ([`spark_iceberg`]).
//!
//! One file per flow kind ([`apply`], [`append`], [`replace_where`], [`ingest`], [`export`]), the
//! random streams in [`random`], the models in [`model`]; every scenario is named in
//! [`SCENARIOS`], which `cluster::runs_every_spark_scenario_in_turn` runs two at a time.

mod append;
mod apply;
mod export;
mod ingest;
mod layouts;
mod model;
mod random;
mod replace_where;
mod spark_iceberg;
mod spark_parquet;

use append::*;
use apply::*;
use export::*;
use ingest::*;
use random::*;
use replace_where::*;

use crate::common::{self, Project};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;
use smelt_spark::client::Spark;
use smelt_spark::sql::string_literal;

/// The report fields the engines cannot agree on, and why: every other field of an apply
/// flow's report is compared.
const NOT_COMPARED: &[(&str, &str)] = &[
    ("run_id", "a new id per run"),
    ("phases_ms", "each engine's own phases, in wall-clock time"),
    (
        "files_written",
        "silver's files are each engine's: Spark's MERGE writes one per shuffle partition",
    ),
    ("files_removed", "silver's files are each engine's"),
    (
        "files_marked",
        "Delta's MERGE on Spark does not say how many files it marked (docs/spark.md)",
    ),
    (
        "bytes_written",
        "each engine's Parquet writer and file layout",
    ),
    (
        "partitions",
        "embedded: key partitions under its memory limit (none when up to date); Spark: one plan",
    ),
    (
        "silver_version",
        "Spark creates silver and its tombstones in commits of their own",
    ),
];

/// A project with two pipeline files over one bronze folder: `embedded.yaml` (lake
/// `lake_e`) and `spark.yaml` (lake `lake_s`, `engine: spark`).
struct Pair {
    p: Project,
    /// The pipeline files' `tables:` (where the shared source tables are).
    tables: &'static str,
}

impl Pair {
    fn new(p: Project, flows: &str, url: &str) -> Self {
        Self::placing(
            p,
            "  medallion_demo.product2__bronze: ./bronze\n",
            flows,
            url,
        )
    }

    /// A pair whose shared tables are `tables` (lines of a `tables:` map).
    fn placing(p: Project, tables: &'static str, flows: &str, url: &str) -> Self {
        let pair = Self { p, tables };
        pair.flows(flows, url);
        pair
    }

    /// Both pipeline files with `flows`.
    fn flows(&self, flows: &str, url: &str) {
        let tables = match self.tables {
            "" => String::new(),
            some => format!("tables:\n{some}"),
        };
        self.p.write(
            "embedded.yaml",
            &format!("lake: ./lake_e\n{tables}flows:\n{flows}"),
        );
        self.p.write(
            "spark.yaml",
            &format!("engine: spark\nconnect: {url}\nlake: ./lake_s\n{tables}flows:\n{flows}"),
        );
    }

    /// The error of `smelt validate` on each engine, `(embedded, spark)`.
    fn validate_fails(&self) -> (String, String) {
        let with = |file: &str| self.p.fails(&["-p", file, "validate"], 1).1;
        (with("embedded.yaml"), with("spark.yaml"))
    }

    /// What `smelt validate` prints on each engine, `(embedded, spark)`, whether it passes
    /// or not (stderr, or stdout when it passes).
    fn validate_fails_or_passes(&self) -> (String, String) {
        let with = |file: &str| {
            let out = self
                .p
                .smelt()
                .args(["-p", file, "validate"])
                .output()
                .unwrap();
            match out.status.success() {
                true => String::from_utf8_lossy(&out.stdout).into_owned(),
                false => String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        };
        (with("embedded.yaml"), with("spark.yaml"))
    }

    /// Bronze statements (through the embedded engine's SQL).
    fn bronze(&self, file: &str) {
        self.p.ok(&["-p", "embedded.yaml", "sql", "-f", file]);
    }

    /// The flows' reports of one run on each engine, `(embedded, spark)`.
    fn run(&self, args: &[&str]) -> (Vec<Value>, Vec<Value>) {
        let with = |file: &str| {
            let mut all = vec!["-p", file, "run"];
            all.extend_from_slice(args);
            self.p.flows(&all)
        };
        (with("embedded.yaml"), with("spark.yaml"))
    }

    /// Rows of `sql` in each lake (read embedded), less the columns `drop`.
    fn rows(&self, sql: &str, drop: &[&str]) -> (Vec<Value>, Vec<Value>) {
        let of = |file: &str| -> Vec<Value> {
            let out = self.p.ok(&["-p", file, "--json", "sql", sql]);
            let rows: Value = serde_json::from_str(out.trim()).unwrap();
            rows.as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    for d in drop {
                        r.as_object_mut().unwrap().remove(*d);
                    }
                    r
                })
                .collect()
        };
        (of("embedded.yaml"), of("spark.yaml"))
    }

    /// Silver and the tombstones (where the embedded run made them) equal in both lakes,
    /// empty or not.
    fn same_tables_if_any(&self, step: &str) {
        let silver = "SELECT * FROM medallion_demo.product2__silver ORDER BY Id";
        let (e, s) = self.rows(silver, &["_update_timestamp"]);
        assert_eq!(e, s, "{step}: silver differs (left embedded, right Spark)");
        let tombstones = self
            .p
            .file("lake_e/medallion_demo/product2__silver__tombstones");
        if tombstones.exists() {
            let t = "SELECT * FROM medallion_demo.product2__silver__tombstones ORDER BY Id";
            let (e, s) = self.rows(t, &["_deleted_at"]);
            assert_eq!(
                e, s,
                "{step}: tombstones differ (left embedded, right Spark)"
            );
        }
    }

    /// Silver (and the tombstones, when `tombstones`) equal in both lakes.
    fn same_tables(&self, step: &str, tombstones: bool) {
        let silver = "SELECT * FROM medallion_demo.product2__silver ORDER BY Id";
        let (e, s) = self.rows(silver, &["_update_timestamp"]);
        assert!(!e.is_empty(), "{step}: embedded silver is empty");
        assert_eq!(e, s, "{step}: silver differs (left embedded, right Spark)");
        if tombstones {
            let t = "SELECT * FROM medallion_demo.product2__silver__tombstones ORDER BY Id";
            let (e, s) = self.rows(t, &["_deleted_at"]);
            assert_eq!(
                e, s,
                "{step}: tombstones differ (left embedded, right Spark)"
            );
        }
    }
}

/// Each report without the fields of `NOT_COMPARED` and `also_not`.
fn comparable(reports: &[Value], also_not: &[&str]) -> Vec<Value> {
    let skip = |k: &str| NOT_COMPARED.iter().any(|(f, _)| *f == k) || also_not.contains(&k);
    reports
        .iter()
        .map(|r| {
            let fields = r.as_object().cloned().unwrap_or_default();
            fields
                .into_iter()
                .filter(|(k, _)| !skip(k))
                .collect::<serde_json::Map<_, _>>()
                .into()
        })
        .collect()
}

/// Every field of the reports but those the engines cannot agree on ([`NOT_COMPARED`]).
fn same_reports(step: &str, reports: &(Vec<Value>, Vec<Value>)) {
    same_reports_but(step, &[], reports)
}

/// [`same_reports`] but for `also_not`, fields of a flow that reads what each engine wrote
/// itself (its files and bytes read).
fn same_reports_but(step: &str, also_not: &[&str], (e, s): &(Vec<Value>, Vec<Value>)) {
    let (e, s) = (comparable(e, also_not), comparable(s, also_not));
    let differ: Vec<String> = e
        .iter()
        .zip(&s)
        .flat_map(|(e, s)| {
            let keys = e.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>());
            keys.unwrap_or_default()
                .into_iter()
                .filter(|k| e[k.as_str()] != s[k.as_str()])
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        e, s,
        "{step}: reports differ in {differ:?} (left embedded, right Spark)"
    );
}

/// The line of `stderr` holding `part`.
/// Pins a failure's messages, the embedded engine's and the Spark engine's, in one snapshot.
fn pin_failures(name: &str, p: &Project, embedded: &str, spark: &str) {
    let both = format!(
        "embedded:\n{}\nspark:\n{}",
        common::pinned(p, embedded),
        common::pinned(p, spark)
    );
    pin_spark(name, p, &both);
}

/// Pins a Spark engine's message (the cluster's port as `[port]`, the commit time of a
/// sequence as `[time]`, a row's number in a batch as `[n]`).
pub(crate) fn pin_spark(name: &str, p: &Project, text: &str) {
    let filters = vec![
        (r"127\.0\.0\.1:\d+", "127.0.0.1:[port]"),
        (
            r"_commit_timestamp=[0-9TZ:. -]+",
            "_commit_timestamp=[time]",
        ),
        // A row's number in its batch follows the order of the files read.
        (r"\brow \d+ of ", "row [n] of "),
    ];
    insta::with_settings!({filters => filters}, {
        insta::assert_snapshot!(name, common::pinned(p, text));
    });
}

fn line_of<'a>(stderr: &'a str, part: &str) -> &'a str {
    stderr
        .lines()
        .find(|l| l.contains(part))
        .unwrap_or_else(|| panic!("`{part}` not in:\n{stderr}"))
}

/// What the Spark engine does not run yet is refused by name at `validate`, before anything
/// runs; `--engine embedded` runs the same file embedded.
fn refusals(url: &str) {
    let flows =
        format!("{DELETES}      on_sequence_conflict: quarantine\n      widen_types: true\n");
    let pair = Pair::new(Project::product2_deletes(), &flows, url);
    pair.bronze("../product2/bronze.sql");
    let (_, stderr) = pair.p.fails(&["-p", "spark.yaml", "validate"], 1);
    pin_spark("options_refused_at_validate", &pair.p, &stderr);
    let (_, stderr) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    pin_spark("options_refused_at_run", &pair.p, &stderr);
    assert!(
        !pair.p.file("lake_s").exists(),
        "a refused run wrote something"
    );
    pair.p
        .ok(&["-p", "spark.yaml", "--engine", "embedded", "validate"]);
}

/// A Spark session of the test's own, to write bronze tables as Spark writes them.
struct Writer {
    runtime: tokio::runtime::Runtime,
    spark: Spark,
}

impl Writer {
    fn new(url: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let spark = runtime.block_on(Spark::connect(url)).unwrap();
        Self { runtime, spark }
    }

    fn sql(&self, statement: &str) {
        self.runtime
            .block_on(self.spark.sql("writing bronze", statement))
            .unwrap_or_else(|e| panic!("{e}\n{statement}"));
    }
}

/// The Spark pipeline's run in `p` killed (SIGABRT) at failpoint `point`: it must die there.
fn abort_spark_run(p: &Project, point: &str) {
    let out = p.abort_at(point, &["-p", "spark.yaml", "run"]);
    assert!(
        common::signal_of(&out.status).is_some(),
        "the run was not killed at {point}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A scenario, given the cluster's Spark Connect URL; it panics when it fails.
pub(crate) type Scenario = fn(&str);

/// Every scenario of smelt's Spark engine, in the order they run, one after another on the
/// process's one cluster ([`crate::cluster::runs_every_spark_scenario_in_turn`]).
pub(crate) const SCENARIOS: &[(&str, Scenario)] = &[
    ("refused_by_name", refusals),
    ("seed_000_product2", product2),
    ("seed_000_product2_deletes", product2_deletes),
    ("databricks_bronze", |url| {
        layouts::databricks_bronze(url, &Writer::new(url))
    }),
    ("mapped_bronze_with_change_data", |url| {
        layouts::mapped_bronze_with_change_data(url, &Writer::new(url))
    }),
    ("runs_killed_at_random", random_kills),
    ("quarantined_changes", quarantine),
    ("sequence_conflicts_fail", conflicts_fail),
    ("bronze_deletes_applied", source_deletes),
    ("schema_drift_and_new_columns", schema_drift),
    ("merge_on_read_silver", |url| {
        merge_on_read(url, &Writer::new(url))
    }),
    ("seed_004_append", append),
    ("append_active_example", append_active),
    ("seed_003_replace_where", replace_where),
    ("scd2_history", history),
    ("random_change_streams", |url| {
        random_streams(url, &Writer::new(url))
    }),
    ("random_histories_scd2", |url| {
        random_histories(url, &Writer::new(url))
    }),
    ("seed_002_ingest", ingest),
    ("ingest_json_lines", ingest_json),
    ("ingest_parquet_types", spark_parquet::ingest_parquet),
    ("replace_where_from_files", replace_files),
    ("seed_003_export", export),
    ("seed_004_iceberg", spark_iceberg::foundry),
    ("predicates_mean_the_same", predicates),
    (
        "model_scd1_silver_and_tombstones_match_the_model_after_every_run",
        |_| model::scd1_silver_and_tombstones_match_the_model_after_every_run(),
    ),
    (
        "model_scd1_null_and_composite_keys_with_late_deletes_and_a_tie",
        |_| model::scd1_null_and_composite_keys_with_late_deletes_and_a_tie(),
    ),
    (
        "model_scd1_null_and_composite_keys_with_late_deletes_and_a_tie_merge_on_read",
        |_| model::scd1_null_and_composite_keys_with_late_deletes_and_a_tie_merge_on_read(),
    ),
    (
        "model_scd2_history_matches_the_model_after_every_run",
        |_| model::scd2_history_matches_the_model_after_every_run(),
    ),
    (
        "model_scd2_deletes_that_arrive_before_the_versions_they_close",
        |_| model::scd2_deletes_that_arrive_before_the_versions_they_close(),
    ),
];
