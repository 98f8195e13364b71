//! The Spark engine against its reference, the embedded engine (DESIGN §10, issue 39): the
//! same pipeline over the same bronze (one folder, placed with `tables:`), run embedded into
//! one lake and on the test Spark cluster into another, must give equal silver, tombstones
//! and reports (all but the run's own timestamps), step by step — seed 000's product2 (rows
//! re-sent within a commit, sequenced by `_commit_timestamp`) and product2_deletes (soft
//! deletes, late changes, a restore); runs killed between the Spark engine's statements,
//! rerun, end in the same tables, and so do runs SIGKILLed at random moments; what the engine
//! does not run is refused at `validate`; seed 004 on Iceberg ([`spark_iceberg`]).

mod model;
mod spark_iceberg;
mod spark_parquet;

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

const PRODUCT2: &str = "  product2:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__silver
      schema: silver.sql
      sequence_by: [_commit_timestamp]
      cast_dialect: spark
";

const DELETES: &str = "  product2:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__silver
      schema: ../product2/silver.sql
      sequence_by: [SystemModstamp]
      apply_as_deletes: IsDeleted = 'true'
      cast_dialect: spark
";

/// `where` keeping the products not archived (soft_delete.sql archives one).
const NOT_ARCHIVED: &str = "      where: NOT coalesce(IsArchived, false)\n";

/// Seed 000: the first three rows, then the second batch (a TRUNCATE and rows re-sent with
/// equal commit timestamps), then nothing new.
fn product2(url: &str) {
    let pair = Pair::new(Project::product2(), PRODUCT2, url);
    pair.bronze("bronze.sql");
    pair.bronze("insert_1.sql");
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["inserted"], 3, "{:?}", first.1);
    same_reports("product2 step 1", &first);
    pair.same_tables("product2 step 1", false);

    pair.bronze("insert_2.sql");
    // A plan says what the run will do, and writes nothing.
    let planned = (
        pair.p.flows(&["-p", "embedded.yaml", "plan"]),
        pair.p.flows(&["-p", "spark.yaml", "plan"]),
    );
    assert_eq!(planned.1[0]["status"], "planned", "{:?}", planned.1);
    same_reports("product2 plan of step 2", &planned);
    let second = pair.run(&[]);
    assert_eq!(
        comparable(&planned.1, &[])[0]["inserted"],
        comparable(&second.1, &[])[0]["inserted"]
    );
    same_reports("product2 step 2", &second);
    pair.same_tables("product2 step 2", false);

    let third = pair.run(&[]);
    assert_eq!(third.1[0]["status"], "up_to_date", "{:?}", third.1);
    same_reports("product2 step 3", &third);

    let rebuilt = pair.run(&["--full-refresh"]);
    same_reports("product2 rebuild", &rebuilt);
    pair.same_tables("product2 rebuild", false);

    // The event log, written through Spark: one row per flow run (plans write none).
    let (_, log) = pair.rows(
        "SELECT status, count(*) AS n FROM _smelt.event_log GROUP BY status ORDER BY status",
        &[],
    );
    assert_eq!(
        log,
        vec![
            serde_json::json!({"status": "applied", "n": 3}),
            serde_json::json!({"status": "up_to_date", "n": 1}),
        ],
        "{log:?}"
    );

    // `smelt status` through Spark says what the embedded engine's says of its own lake:
    // one bronze version not applied yet.
    pair.bronze("insert_2.sql");
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"][0].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for field in ["watermark", "bronze_version", "versions_behind", "problem"] {
        assert_eq!(e[field], s[field], "status `{field}`: {e} vs {s}");
    }
    assert_eq!(s["versions_behind"], 1, "{s}");
    assert!(
        s["last_run_id"].is_string() && s["last_run_at"].is_string(),
        "{s}"
    );

    // `smelt compile` shows the statements of the next run: reads, then the writes.
    let compiled = pair.p.ok(&["-p", "spark.yaml", "compile"]);
    for part in [
        "_metadata.row_index",
        "MERGE INTO delta.`",
        "txnAppId=`smelt/product2`",
    ] {
        assert!(compiled.contains(part), "`{part}` not in:\n{compiled}");
    }
}

/// Seed 000 with soft deletes: a delete, late older changes that must not resurrect it, a
/// restore; archived products filtered out by `where` (deleted, with a tombstone). The Spark
/// runs of the delete and the late changes are killed (SIGABRT) before silver's statement —
/// after the tombstones' — and run again: the tables must still come out as embedded.
fn product2_deletes(url: &str) {
    let flows = format!("{DELETES}{NOT_ARCHIVED}");
    let pair = Pair::new(Project::product2_deletes(), &flows, url);
    pair.bronze("../product2/bronze.sql");
    pair.bronze("../product2/insert_1.sql");
    same_reports("deletes step 1", &pair.run(&[]));
    pair.same_tables("deletes step 1", false);

    // The delete's run is killed before its tombstones, then before silver (after the
    // tombstones); the late changes' run before silver.
    let kills: [(&str, &str, &[&str]); 2] = [
        (
            "deletes step 2",
            "soft_delete.sql",
            &["before_spark_tombstones", "before_spark_silver"],
        ),
        ("deletes step 3", "late.sql", &["before_spark_silver"]),
    ];
    for (step, file, points) in kills {
        pair.bronze(file);
        let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
        for point in points {
            let out = pair.p.abort_at(point, &["-p", "spark.yaml", "run"]);
            assert!(
                common::signal_of(&out.status).is_some(),
                "{step}: the run was not killed at {point}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
        assert_eq!(rerun[0]["status"], "applied", "{rerun:?}");
        same_reports(&format!("{step}, run again"), &(embedded, rerun));
        pair.same_tables(&format!("{step}, killed and run again"), true);
    }

    pair.bronze("restore.sql");
    let restored = pair.run(&[]);
    same_reports("deletes step 4", &restored);
    pair.same_tables("deletes step 4", true);
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date");
}

const HISTORY: &str = "  product2_history:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__history
      schema: ../product2/silver.sql
      scd: 2
      sequence_by: [SystemModstamp]
      apply_as_deletes: IsDeleted = 'true'
      track_history_except: [LastViewedDate, LastReferencedDate]
      cast_dialect: spark
";

/// The SCD2 history and its tombstones equal in both lakes (where the embedded run made
/// them).
fn same_history(pair: &Pair, step: &str) {
    let history = "SELECT * FROM medallion_demo.product2__history ORDER BY Id, __START_AT";
    let (e, s) = pair.rows(history, &["_update_timestamp"]);
    assert!(!e.is_empty(), "{step}: embedded history is empty");
    assert_eq!(e, s, "{step}: history differs (left embedded, right Spark)");
    if pair
        .p
        .file("lake_e/medallion_demo/product2__history__tombstones")
        .exists()
    {
        let t = "SELECT * FROM medallion_demo.product2__history__tombstones ORDER BY Id, SystemModstamp";
        let (e, s) = pair.rows(t, &["_deleted_at"]);
        assert_eq!(
            e, s,
            "{step}: history tombstones differ (left embedded, right Spark)"
        );
    }
}

/// Seed 000's example as SCD type 2 (`examples/product2_deletes`' `product2_history`): a
/// delete closing a version, late older changes rebuilding the history (and a late change
/// before the delete), a restore opening a new version, archived products filtered out by
/// `where`; the Spark runs of the delete and of the late changes killed before the
/// tombstones' and silver's statements and run again; a plan; a rebuild.
fn history(url: &str) {
    let flows = format!("{HISTORY}{NOT_ARCHIVED}");
    let pair = Pair::new(Project::product2_deletes(), &flows, url);
    pair.bronze("../product2/bronze.sql");
    pair.bronze("../product2/insert_1.sql");
    same_reports("history step 1", &pair.run(&[]));
    same_history(&pair, "history step 1");
    let kills: [(&str, &str, &[&str]); 2] = [
        (
            "history step 2",
            "soft_delete.sql",
            &["before_spark_tombstones", "before_spark_silver"],
        ),
        ("history step 3", "late.sql", &["before_spark_silver"]),
    ];
    for (step, file, points) in kills {
        pair.bronze(file);
        let planned = (
            pair.p.flows(&["-p", "embedded.yaml", "plan"]),
            pair.p.flows(&["-p", "spark.yaml", "plan"]),
        );
        same_reports(&format!("{step}, plan"), &planned);
        let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
        for point in points {
            let out = pair.p.abort_at(point, &["-p", "spark.yaml", "run"]);
            assert!(
                common::signal_of(&out.status).is_some(),
                "{step}: the run was not killed at {point}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
        assert_eq!(rerun[0]["status"], "applied", "{rerun:?}");
        same_reports(&format!("{step}, run again"), &(embedded, rerun));
        same_history(&pair, &format!("{step}, killed and run again"));
    }
    pair.bronze("restore.sql");
    same_reports("history step 4", &pair.run(&[]));
    same_history(&pair, "history step 4");
    let rebuilt = pair.run(&["--full-refresh"]);
    same_reports("history rebuild", &rebuilt);
    same_history(&pair, "history rebuild");
}

/// Seed 000 with soft deletes, the Spark runs SIGKILLed at pseudo-random moments (up to 1.1
/// times the last uninterrupted Spark run): whatever statement was under way — the reads, a
/// MERGE the cluster goes on with after its client died — the rerun must end in the embedded
/// engine's tables. A rerun racing the dead client's last statement loses the commit race,
/// fails saying "run again", and is run again.
fn random_kills(url: &str) {
    let flows = format!("{DELETES}{NOT_ARCHIVED}");
    let pair = Pair::new(Project::product2_deletes(), &flows, url);
    pair.bronze("../product2/bronze.sql");
    pair.bronze("../product2/insert_1.sql");
    pair.p.flows(&["-p", "embedded.yaml", "run"]);
    let started = std::time::Instant::now();
    pair.p.flows(&["-p", "spark.yaml", "run"]);
    let mut typical = started.elapsed();
    let mut rng = proptest::test_runner::TestRng::deterministic_rng(
        proptest::test_runner::RngAlgorithm::ChaCha,
    );
    let mut kills = Vec::new();
    for file in ["soft_delete.sql", "late.sql", "restore.sql"] {
        pair.bronze(file);
        pair.p.flows(&["-p", "embedded.yaml", "run"]);
        let unit = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let delay = typical.mul_f64(unit * 1.1);
        let mut child = pair.p.piped(&["-p", "spark.yaml", "run"]).spawn().unwrap();
        std::thread::sleep(delay);
        // SIGKILL; a run that has already exited (not reaped yet) is left as it is.
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let killed = common::signal_of(&out.status) == Some(9);
        assert!(
            killed || out.status.success(),
            "{file}: a run killed after {delay:?} ended with {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        kills.push((file, delay, killed));
        let started = std::time::Instant::now();
        for attempt in 1.. {
            let out = pair
                .p
                .piped(&["-p", "spark.yaml", "--json", "run"])
                .output()
                .unwrap();
            if out.status.success() {
                break;
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("another writer committed") && stderr.contains("run again"),
                "{file}: the rerun failed:\n{stderr}"
            );
            assert!(attempt < 3, "{file}: lost the commit race {attempt} times");
        }
        typical = started.elapsed();
        pair.same_tables(
            &format!("{file}, SIGKILLed and run again ({kills:?})"),
            true,
        );
    }
    assert!(
        kills.iter().any(|(_, _, killed)| *killed),
        "no Spark run was killed before it finished: {kills:?}"
    );
}

/// `on_cast_error: quarantine` and `on_violation: quarantine`: a value that does not cast, or
/// a change failing an expectation (false or NULL), leaves its change out and lands in the
/// rejects table with the raw row; the Spark run is killed before the rejects' statement and
/// before silver's (after the rejects'), then run again. Then `on_violation: fail` stops
/// both engines at the same change.
fn quarantine(url: &str) {
    let expect = "      expect:\n        named: Name IS NOT NULL\n        no_toys: coalesce(Family, '') <> 'Toys'\n";
    let flows = format!(
        "{PRODUCT2}      on_cast_error: quarantine\n{expect}      on_violation: quarantine\n"
    );
    let pair = Pair::new(Project::product2(), &flows, url);
    pair.bronze("bronze.sql");
    pair.bronze("insert_1.sql");
    same_reports("quarantine step 1", &pair.run(&[]));
    pair.p.write(
        "bad.sql",
        "INSERT INTO medallion_demo.product2__bronze (Id, Name, IsActive, CreatedDate) VALUES \
         ('01t000000000001AAA', 'renamed', 'maybe', '2026-07-01T09:00:00Z'), \
         ('01t000000000009AAA', 'new', 'true', 'yesterday'), \
         ('01t000000000002AAA', 'renamed too', 'false', NULL)",
    );
    pair.bronze("bad.sql");
    // Expectations: a NULL name (failing both: counted for the first only, as it is left
    // out), a toy, and a change of the same key that passes after one that fails.
    pair.p.write(
        "unexpected.sql",
        "INSERT INTO medallion_demo.product2__bronze (Id, Name, Family) VALUES \
         ('01t000000000003AAA', NULL, 'Toys'), ('01t000000000010AAA', 'toy', 'Toys'), \
         ('01t000000000002AAA', NULL, 'Hardware'), ('01t000000000002AAA', 'fine', 'Hardware')",
    );
    pair.bronze("unexpected.sql");
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    assert_eq!(embedded[0]["quarantined"], 5, "{embedded:?}");
    assert_eq!(
        embedded[0]["expectations"],
        serde_json::json!({"named": 2, "no_toys": 1}),
        "{embedded:?}"
    );
    for point in ["before_spark_rejects", "before_spark_silver"] {
        let out = pair.p.abort_at(point, &["-p", "spark.yaml", "run"]);
        assert!(
            common::signal_of(&out.status).is_some(),
            "the run was not killed at {point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let spark = pair.p.flows(&["-p", "spark.yaml", "run"]);
    same_reports(
        "quarantine step 2, killed and run again",
        &(embedded, spark),
    );
    pair.same_tables("quarantine step 2", false);
    let rejects = "SELECT * FROM medallion_demo.product2__silver__rejects \
                   ORDER BY source_version, column_name, raw_row";
    let (e, s) = pair.rows(rejects, &["run_id", "rejected_at"]);
    assert_eq!(e.len(), 5, "{e:?}");
    assert_eq!(e, s, "rejects differ (left embedded, right Spark)");

    // `on_violation: fail`: both stop at the same change, naming the expectation and key.
    let failing = format!("{PRODUCT2}{expect}      on_violation: fail\n");
    let pair = Pair::new(pair.p, &failing, url);
    pair.p.write(
        "toy.sql",
        "INSERT INTO medallion_demo.product2__bronze (Id, Name, Family) VALUES \
         ('01t000000000011AAA', 'fine', 'Service'), ('01t000000000012AAA', 'toy', 'Toys')",
    );
    pair.bronze("toy.sql");
    let (_, embedded) = pair.p.fails(&["-p", "embedded.yaml", "run"], 1);
    let (_, spark) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    pin_failures("expectation_failed", &pair.p, &embedded, &spark);
}

/// `on_sequence_conflict: fail`: two changes of one key in one commit (equal
/// `_commit_timestamp`) that differ stop both engines before anything is written, naming the
/// key.
fn conflicts_fail(url: &str) {
    let flows = format!("{PRODUCT2}      on_sequence_conflict: fail\n");
    let pair = Pair::new(Project::product2(), &flows, url);
    pair.bronze("bronze.sql");
    pair.p.write(
        "tie.sql",
        "INSERT INTO medallion_demo.product2__bronze (Id, Name) VALUES \
         ('01t000000000001AAA', 'one'), ('01t000000000002AAA', 'a'), ('01t000000000002AAA', 'b')",
    );
    pair.bronze("tie.sql");
    let (_, e) = pair.p.fails(&["-p", "embedded.yaml", "run"], 1);
    let (_, s) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    pin_failures("sequence_conflict", &pair.p, &e, &s);
    assert!(
        !pair
            .p
            .file("lake_s/medallion_demo/product2__silver")
            .exists(),
        "a failed Spark run wrote silver"
    );
}

/// `source_deletes: apply`: bronze's own deletes delete the key — a `DELETE` (change data),
/// then a `TRUNCATE` (files removed without change data, read as deletes) and rows sent
/// again after it.
fn source_deletes(url: &str) {
    let flows = format!("{PRODUCT2}      source_deletes: apply\n");
    let pair = Pair::new(Project::product2(), &flows, url);
    pair.bronze("bronze.sql");
    pair.bronze("insert_1.sql");
    same_reports("source deletes step 1", &pair.run(&[]));
    pair.p.write(
        "delete.sql",
        "DELETE FROM medallion_demo.product2__bronze WHERE Id = '01t000000000002AAA'",
    );
    pair.bronze("delete.sql");
    let deleted = pair.run(&[]);
    assert_eq!(deleted.0[0]["deleted"], 1, "{:?}", deleted.0);
    same_reports("source deletes step 2", &deleted);
    pair.same_tables("source deletes step 2", true);
    pair.p.write(
        "truncate.sql",
        "TRUNCATE TABLE medallion_demo.product2__bronze",
    );
    pair.bronze("truncate.sql");
    pair.p.write(
        "again.sql",
        "INSERT INTO medallion_demo.product2__bronze (Id, Name) VALUES ('01t000000000003AAA', 'back')",
    );
    pair.bronze("again.sql");
    let truncated = pair.run(&[]);
    same_reports("source deletes step 3", &truncated);
    pair.same_tables("source deletes step 3", true);
}

/// Schema drift (DESIGN §4) as embedded: a bronze column silver's DDL lacks is reported,
/// then added by `schema_evolution: add_new_columns` (a plan writes nothing); a DDL that
/// disagrees with the table, or declares a column it lacks, fails `validate` with the
/// embedded engine's message.
fn schema_drift(url: &str) {
    let p = Project::product2();
    let ddl = std::fs::read_to_string(p.file("silver.sql")).unwrap();
    p.write(
        "silver.sql",
        &ddl.replace("`StockKeepingUnit` STRING,\n", ""),
    );
    let pair = Pair::new(p, PRODUCT2, url);
    pair.bronze("bronze.sql");
    pair.bronze("insert_1.sql");
    let first = pair.run(&[]);
    assert_eq!(
        first.1[0]["new_columns"],
        serde_json::json!(["StockKeepingUnit"])
    );
    same_reports("drift step 1", &first);
    pair.same_tables("drift step 1", false);

    let evolving = format!("{PRODUCT2}      schema_evolution: add_new_columns\n");
    pair.flows(&evolving, url);
    pair.bronze("insert_2.sql");
    let planned = (
        pair.p.flows(&["-p", "embedded.yaml", "plan"]),
        pair.p.flows(&["-p", "spark.yaml", "plan"]),
    );
    same_reports("drift plan of step 2", &planned);
    pair.same_tables("drift plan of step 2", false);
    // Killed before its ALTER TABLE: the rerun adds the columns and writes as embedded.
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    let out = pair
        .p
        .abort_at("before_spark_add_columns", &["-p", "spark.yaml", "run"]);
    assert!(
        common::signal_of(&out.status).is_some(),
        "the run was not killed before its ALTER TABLE: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second = (embedded, pair.p.flows(&["-p", "spark.yaml", "run"]));
    assert_eq!(
        second.1[0]["columns_added"],
        serde_json::json!(["StockKeepingUnit"])
    );
    same_reports("drift step 2, killed and run again", &second);
    pair.same_tables("drift step 2", false);
    let rebuilt = pair.run(&["--full-refresh"]);
    same_reports("drift rebuild", &rebuilt);
    pair.same_tables("drift rebuild", false);

    // The DDL against the table: a type that differs, a column the table lacks.
    pair.p
        .write("silver.sql", &ddl.replace("`Name` STRING", "`Name` BIGINT"));
    let (e, s) = pair.validate_fails();
    pin_failures("ddl_type_differs_from_table", &pair.p, &e, &s);
    pair.p.write(
        "silver.sql",
        &ddl.replace(
            "`StockKeepingUnit` STRING,\n",
            "`StockKeepingUnit` STRING,\n  `Extra` STRING,\n",
        ),
    );
    pair.flows(PRODUCT2, url);
    let (e, s) = pair.validate_fails();
    pin_failures("ddl_column_missing_from_table", &pair.p, &e, &s);
}

/// `write_mode: merge_on_read` as embedded: product2_deletes' steps (a delete, late changes,
/// a restore) with silver's replaced and deleted rows marked in deletion vectors: the tables
/// (Spark's read by the embedded engine, deletion vectors applied) and reports equal, and
/// no MERGE of Spark's silver copied a row into a new file (Delta's `numTargetRowsCopied`):
/// the rows left in a file it touched stay there, under a deletion vector.
fn merge_on_read(url: &str, writer: &Writer) {
    let flows = format!("{DELETES}      write_mode: merge_on_read\n");
    let pair = Pair::new(Project::product2_deletes(), &flows, url);
    pair.bronze("../product2/bronze.sql");
    pair.bronze("../product2/insert_1.sql");
    same_reports("merge-on-read step 1", &pair.run(&[]));
    pair.same_tables("merge-on-read step 1", false);
    // Spark's first MERGE leaves a file per key (its shuffle's partitions): compacted to one,
    // as a real silver's files hold many keys, a later MERGE has rows to keep in it.
    let silver = pair.p.file("lake_s/medallion_demo/product2__silver");
    writer.sql(&format!("OPTIMIZE delta.`{}`", silver.display()));
    for (step, file) in [
        ("merge-on-read step 2", "soft_delete.sql"),
        ("merge-on-read step 3", "late.sql"),
        ("merge-on-read step 4", "restore.sql"),
    ] {
        pair.bronze(file);
        same_reports(step, &pair.run(&[]));
        pair.same_tables(step, true);
    }
    let log = silver.join("_delta_log");
    let mut marked = 0;
    for entry in std::fs::read_dir(&log).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let actions: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for info in actions.iter().map(|a| &a["commitInfo"]) {
            if info["operation"] == "MERGE" {
                let copied = &info["operationMetrics"]["numTargetRowsCopied"];
                assert_eq!(
                    copied,
                    "0",
                    "{}: rows rewritten, not marked",
                    path.display()
                );
            }
        }
        marked += actions
            .iter()
            .filter(|a| a["add"]["deletionVector"].is_object())
            .count();
    }
    assert!(marked > 0, "no deletion vector in Spark's silver log");
}

/// An append flow's report fields the engines cannot agree on (beyond [`NOT_COMPARED`]).
const APPEND_NOT_COMPARED: &[&str] = &[
    // Not counted on Spark: an `INSERT OVERWRITE` does not say (docs/spark.md).
    "rows_replaced",
];

fn same_append_reports(step: &str, pair: &(Vec<Value>, Vec<Value>)) {
    same_reports_but(step, APPEND_NOT_COMPARED, pair);
}

/// Seed 004's append example (`examples/append_active`, its own pipeline file) on both
/// engines over one input table: its three builds — the active rows of the input (1 and 3),
/// then only those added since (4), then nothing — equal outputs and reports.
fn append_active(url: &str) {
    let p = Project::example("append_active");
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let flows = &yaml[yaml.find("flows:\n").unwrap() + "flows:\n".len()..];
    let pair = Pair::placing(p, "  foundry.input: ./input\n", flows, url);
    let builds = [
        ("append_active build 1", Some("input.sql"), 2),
        ("append_active build 2", Some("input_2.sql"), 3),
        ("append_active build 3", None, 3),
    ];
    for (step, input, rows) in builds {
        if let Some(file) = input {
            pair.bronze(file);
        }
        let runs = pair.run(&[]);
        same_append_reports(step, &runs);
        let (e, s) = pair.rows("SELECT * FROM foundry.output ORDER BY id", &[]);
        assert_eq!(e.len(), rows, "{step}: {e:?}");
        assert_eq!(
            e, s,
            "{step}: the output differs (left embedded, right Spark)"
        );
        if input.is_none() {
            assert_eq!(runs.1[0]["status"], "up_to_date", "{step}: {:?}", runs.1);
        }
    }
}

/// Seed 004's append flow over product2's bronze: the active rows, cast to a DDL's types.
const APPEND: &str = "  active:
    append:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__active
      schema: active.sql
      cast_dialect: spark
      where: IsActive = 'true'
";

/// Rows added to bronze: an active row whose time does not cast, an inactive one, an
/// active one with a blank time (NULL, not a failure).
const MORE_ROWS: &str = "INSERT INTO medallion_demo.product2__bronze (Id, Name, IsActive, SystemModstamp, IsDeleted) VALUES \
    ('01t000000000009AAA', 'new', 'true', 'not a time', 'false'), \
    ('01t00000000000AAAA', 'inactive', 'false', '2026-08-01T00:00:00.000+0000', 'false'), \
    ('01t00000000000BAAA', 'blank', 'true', '  ', 'yes')";

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

/// An append flow (seed 004) on both engines: the snapshot, then new rows (the Spark run
/// killed before its write and run again), a commit that rewrites rows (`on_rewrite: fail`
/// stops both with one message, `skip` leaves it out), a plan, a rebuild, and
/// `on_cast_error: fail`.
fn append(url: &str) {
    let p = Project::product2();
    p.write(
        "active.sql",
        "CREATE TABLE `medallion_demo.product2__active` (\n`Id` STRING NOT NULL,\n`Name` STRING,\n\
         `IsActive` BOOL,\n`SystemModstamp` TIMESTAMP,\n`IsDeleted` BOOL\n);\n",
    );
    let pair = Pair::new(p, APPEND, url);
    let appended = |step: &str| {
        let sql = "SELECT * FROM medallion_demo.product2__active ORDER BY Id, Name, SystemModstamp";
        let (e, s) = pair.rows(sql, &[]);
        assert!(!e.is_empty(), "{step}: nothing appended embedded");
        assert_eq!(e, s, "{step}: targets differ (left embedded, right Spark)");
    };
    pair.bronze("bronze.sql");
    pair.bronze("insert_1.sql");
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["mode"], "snapshot", "{:?}", first.1);
    same_append_reports("append step 1", &first);
    appended("append step 1");

    pair.p.write("more.sql", MORE_ROWS);
    pair.bronze("more.sql");
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    let out = pair
        .p
        .abort_at("before_spark_append", &["-p", "spark.yaml", "run"]);
    assert!(
        common::signal_of(&out.status).is_some(),
        "the append was not killed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(
        rerun[0]["cast_failures"],
        serde_json::json!({"SystemModstamp": 1}),
        "{rerun:?}"
    );
    same_append_reports("append step 2, killed and run again", &(embedded, rerun));
    appended("append step 2");

    pair.p.write(
        "delete.sql",
        "DELETE FROM medallion_demo.product2__bronze WHERE Id = '01t000000000002AAA'",
    );
    pair.bronze("delete.sql");
    pair.bronze("insert_2.sql");
    let (_, e) = pair.p.fails(&["-p", "embedded.yaml", "run"], 1);
    let (_, s) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    assert_eq!(
        line_of(&e, "rewrites rows"),
        line_of(&s, "rewrites rows"),
        "on_rewrite: fail"
    );
    pin_failures("append_refuses_a_rewrite", &pair.p, &e, &s);

    pair.flows(&format!("{APPEND}      on_rewrite: skip\n"), url);
    let skipped = pair.run(&[]);
    assert_eq!(
        skipped.1[0]["skipped_versions"].as_array().unwrap().len(),
        1
    );
    same_append_reports("append step 3, a rewrite skipped", &skipped);
    appended("append step 3");
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);
    same_append_reports("append step 4", &again);

    pair.bronze("more.sql");
    let compiled = pair.p.ok(&["-p", "spark.yaml", "compile"]);
    for part in [
        "INSERT INTO delta.`",
        "txnAppId=`smelt/active`",
        "try_cast(",
    ] {
        assert!(compiled.contains(part), "`{part}` not in:\n{compiled}");
    }
    let planned = (
        pair.p.flows(&["-p", "embedded.yaml", "plan"]),
        pair.p.flows(&["-p", "spark.yaml", "plan"]),
    );
    assert_eq!(planned.1[0]["status"], "planned", "{:?}", planned.1);
    same_append_reports("append plan", &planned);
    let rebuilt = pair.run(&["--full-refresh"]);
    assert_eq!(rebuilt.1[0]["mode"], "rebuild", "{:?}", rebuilt.1);
    same_append_reports("append rebuild", &rebuilt);
    appended("append rebuild");

    pair.flows(&format!("{APPEND}      on_cast_error: fail\n"), url);
    pair.bronze("more.sql");
    let (_, e) = pair.p.fails(&["-p", "embedded.yaml", "run"], 1);
    let (_, s) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    let part =
        "cannot cast column `SystemModstamp` to TIMESTAMP: value \"not a time\" at input row 0";
    assert_eq!(line_of(&e, part), line_of(&s, part), "on_cast_error: fail");
    pin_failures("append_cast_failure", &pair.p, &e, &s);
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"][0].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for field in ["watermark", "bronze_version", "versions_behind", "problem"] {
        assert_eq!(e[field], s[field], "append status `{field}`: {e} vs {s}");
    }
}

/// Seed 003's selective overwrite from a table: the source's snapshot replaces the target
/// rows from its least `sale_date` on, cast (NUMERIC to DECIMAL(18,2), TIMESTAMP to
/// TIMESTAMP_NTZ) by `try_cast`.
const REPLACE: &str = "  sales:
    replace_where:
      from: abc.export_demo_table
      into: demo.sales
      predicate: \"sale_date >= {min(sale_date)}\"
      cast_dialect: spark
";

/// A replace_where flow's report fields the engines cannot agree on (beyond
/// [`NOT_COMPARED`]).
const REPLACE_NOT_COMPARED: &[&str] = &[
    // The predicate as run: its bounds are `arrow_cast(…)` embedded, `CAST(… AS …)` on Spark
    // (and its names backquoted there).
    "predicate",
];

/// The target of seed 003 without the export's column, and its three rows.
const SALES: &str = "CREATE OR REPLACE TABLE demo.sales (sale_id BIGINT, product_name STRING, \
    quantity BIGINT, unit_price DECIMAL(18, 2), sale_date DATE, updated_at TIMESTAMP_NTZ);
INSERT INTO demo.sales VALUES
  (1, 'Notebook', 2, 500.00, '2026-07-20', '2026-07-20 01:00:00'),
  (2, 'Pen', 10, 120.00, '2026-07-20', '2026-07-20 02:00:00'),
  (3, 'File', 1, 300.00, '2026-07-21', '2026-07-21 01:00:00');
";

/// Seed 003's `replace_where` from a table (examples/export_replace's tables), as
/// embedded: a target column the source lacks, the first replace (the predicate's bound
/// from the batch), nothing new, a new source version whose run is killed before its write
/// and run again, `compile` and `plan`, a value that overflows its decimal, a batch row
/// outside a fixed predicate (nothing written), a rebuild, and `status`.
fn replace_where(url: &str) {
    let p = Project::example("export_replace");
    let pair = Pair::placing(p, "  abc.export_demo_table: ./source\n", REPLACE, url);
    let both = |args: &[&str]| {
        for file in ["embedded.yaml", "spark.yaml"] {
            let mut all = vec!["-p", file];
            all.extend_from_slice(args);
            pair.p.ok(&all);
        }
    };
    pair.bronze("source.sql");
    both(&["sql", "-f", "target.sql"]);
    let (_, e) = pair.p.fails(&["-p", "embedded.yaml", "run"], 1);
    let (_, s) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    pin_failures("replace_where_target_column_not_in_input", &pair.p, &e, &s);

    pair.p.write("sales.sql", SALES);
    both(&["sql", "-f", "sales.sql"]);
    let replaced = |step: &str| {
        let sql = "SELECT * FROM demo.sales ORDER BY sale_id";
        let (e, s) = pair.rows(sql, &[]);
        assert!(!e.is_empty(), "{step}: the embedded target is empty");
        assert_eq!(e, s, "{step}: targets differ (left embedded, right Spark)");
    };
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["rows_replaced"], 3, "{:?}", first.1);
    let predicate = first.1[0]["predicate"].as_str().unwrap_or_default();
    // The Spark SQL run: the predicate rendered for Spark, its bound filled.
    assert_eq!(predicate, "`sale_date` >= CAST('2026-07-20' AS DATE)");
    same_reports_but("replace step 1", REPLACE_NOT_COMPARED, &first);
    replaced("replace step 1");
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);
    same_reports_but("replace step 2", REPLACE_NOT_COMPARED, &again);

    pair.p.write(
        "more.sql",
        "INSERT INTO abc.export_demo_table VALUES \
         (5, 'Chair', 3, 4500.00, DATE '2026-07-22', TIMESTAMP '2026-07-22 03:00:00+00')",
    );
    pair.bronze("more.sql");
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    let out = pair
        .p
        .abort_at("before_spark_replace", &["-p", "spark.yaml", "run"]);
    assert!(
        common::signal_of(&out.status).is_some(),
        "the replace was not killed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    same_reports_but(
        "replace step 3, killed and run again",
        REPLACE_NOT_COMPARED,
        &(embedded, rerun),
    );
    replaced("replace step 3");

    pair.p.write(
        "huge.sql",
        "INSERT INTO abc.export_demo_table VALUES \
         (6, 'Gold', 1, 100000000000000000000.00, DATE '2026-07-23', TIMESTAMP '2026-07-23 00:00:00+00')",
    );
    pair.bronze("huge.sql");
    let compiled = pair.p.ok(&["-p", "spark.yaml", "compile"]);
    for part in [
        "INSERT INTO delta.`",
        "REPLACE WHERE `sale_date` >= CAST('2026-07-20' AS DATE)",
        "txnAppId=`smelt/sales`",
        "try_cast(r.`unit_price` AS DECIMAL(18,2))",
    ] {
        assert!(compiled.contains(part), "`{part}` not in:\n{compiled}");
    }
    let planned = (
        pair.p.flows(&["-p", "embedded.yaml", "plan"]),
        pair.p.flows(&["-p", "spark.yaml", "plan"]),
    );
    assert_eq!(planned.1[0]["status"], "planned", "{:?}", planned.1);
    same_reports_but("replace plan", REPLACE_NOT_COMPARED, &planned);
    let overflow = pair.run(&[]);
    assert_eq!(
        overflow.1[0]["cast_failures"],
        serde_json::json!({"unit_price": 1}),
        "{:?}",
        overflow.1
    );
    same_reports_but(
        "replace step 4, an overflow",
        REPLACE_NOT_COMPARED,
        &overflow,
    );
    replaced("replace step 4");

    // A fixed predicate the batch's older rows fall outside: nothing is written.
    let fixed = REPLACE.replace("{min(sale_date)}", "'2026-07-21'");
    pair.flows(&fixed, url);
    pair.p.write(
        "update.sql",
        "UPDATE abc.export_demo_table SET quantity = 4 WHERE sale_id = 2",
    );
    pair.bronze("update.sql");
    let (_, e) = pair.p.fails(&["-p", "embedded.yaml", "run"], 1);
    let (_, s) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    pin_failures("replace_where_row_outside", &pair.p, &e, &s);
    replaced("replace step 5, refused");

    pair.flows(REPLACE, url);
    let rebuilt = pair.run(&["--full-refresh"]);
    same_reports_but("replace rebuild", REPLACE_NOT_COMPARED, &rebuilt);
    replaced("replace rebuild");
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"][0].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for field in ["watermark", "bronze_version", "versions_behind", "problem"] {
        assert_eq!(e[field], s[field], "replace status `{field}`: {e} vs {s}");
    }
}

/// What the Spark engine does not run yet is refused by name at `validate`, before anything
/// runs; `--engine embedded` runs the same file embedded.
fn refusals(url: &str, writer: &Writer) {
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

    // Bronze tables whose files are not plain rows: refused by name.
    let pair = Pair::new(Project::product2(), PRODUCT2, url);
    let bronze = format!("delta.`{}`", pair.p.file("bronze").display());
    let columns = "Id STRING, Name STRING";
    for (layout, name) in [
        ("PARTITIONED BY (Name)", "bronze_partitioned"),
        (
            "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
            "bronze_with_deletion_vectors",
        ),
    ] {
        let _ = std::fs::remove_dir_all(pair.p.file("bronze"));
        writer.sql(&format!(
            "CREATE TABLE {bronze} ({columns}) USING DELTA {layout}"
        ));
        let (_, stderr) = pair.p.fails(&["-p", "spark.yaml", "validate"], 1);
        pin_spark(name, &pair.p, &stderr);
    }
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

/// A bronze row of the random streams: key, sequence, value, deleted flag (all text, as
/// bronze holds them; `None` is NULL).
type Row = (Option<String>, Option<String>, Option<String>, &'static str);

fn text_of(choices: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        1 => Just(None),
        6 => proptest::sample::select(choices).prop_map(|s| Some(s.to_string())),
    ]
}

fn row() -> impl Strategy<Value = Row> {
    (
        // Few keys (repeats inside a commit are the point), a NULL key now and then.
        prop_oneof![1 => Just(None), 12 => proptest::sample::select(&["a", "b", "c", "d"][..]).prop_map(|s| Some(s.to_string()))],
        // Few sequences: ties and late changes; one that does not cast.
        text_of(&["1", "2", "3", "4", "x"]),
        text_of(&["10", "20", "30", "oops", ""]),
        proptest::sample::select(&["false", "false", "false", "true"][..]),
    )
}

/// Commits of 1–8 rows, written by Spark in two files each.
fn stream() -> impl Strategy<Value = Vec<Vec<Row>>> {
    proptest::collection::vec(proptest::collection::vec(row(), 1..9), 2..5)
}

const RANDOM: &str = "  r:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__silver
      schema: silver.sql
      sequence_by: [seq]
      apply_as_deletes: IsDeleted = 'true'
      cast_dialect: spark
      expect:
        small: v < 25
      on_violation: drop
      where: v <> 20
";

/// Random change streams — keys repeated inside a commit and across its two files, equal
/// and NULL sequences, late changes, deletes, values that do not cast, NULL keys, changes
/// dropped by an expectation (`v < 25`: 30, "oops" and NULL fail it), keys filtered out by
/// `where` (`v <> 20`: deleted from silver, with a tombstone) — applied
/// commit by commit by both engines, then replayed from the snapshot (`--full-refresh`).
fn random_streams(url: &str, writer: &Writer) {
    // One random case (more with `PROPTEST_CASES`): the model suites (`model.rs`) draw
    // random streams on Spark too.
    let mut runner = one_case();
    runner
        .run(&stream(), |commits| {
            let p = Project::with_pipeline("flows: {}\n");
            p.write(
                "silver.sql",
                "CREATE TABLE medallion_demo.product2__silver (Id STRING NOT NULL, seq INT, v INT, \
                 IsDeleted BOOLEAN, PRIMARY KEY (Id))",
            );
            let pair = Pair::new(p, RANDOM, url);
            let table = random_bronze(&pair, writer);
            for (i, rows) in commits.iter().enumerate() {
                insert_rows(writer, &table, rows);
                let step = format!("commit {i} of {commits:?}");
                same_reports(&step, &pair.run(&[]));
                pair.same_tables_if_any(&step);
            }
            let step = format!("rebuild of {commits:?}");
            same_reports(&step, &pair.run(&["--full-refresh"]));
            pair.same_tables_if_any(&step);
            Ok(())
        })
        .unwrap();
}

const RANDOM_HISTORY: &str = "  r:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__silver
      schema: silver.sql
      scd: 2
      sequence_by: [seq]
      apply_as_deletes: IsDeleted = 'true'
      track_history: [v]
      cast_dialect: spark
      where: v <> 20
";

/// Random change streams as in [`random_streams`], into SCD type 2 history: late changes
/// splitting versions, in-place updates (only `v` is tracked: a change of `seq` alone
/// updates the version), deletes before the versions they close (tombstones), replays of
/// one sequence — applied commit by commit by both engines, then rebuilt. First the streams
/// that found bugs.
fn random_histories(url: &str, writer: &Writer) {
    let some = |s: &str| Some(s.to_string());
    // Streams that found bugs first. An upsert and a delete of one key and sequence in one
    // commit: the delete, read last, wins (Spark kept the upsert).
    let found: Vec<Vec<Row>> = vec![
        vec![
            (some("c"), some("x"), some(""), "false"),
            (some("a"), some("2"), some("10"), "false"),
            (some("c"), some("4"), some("30"), "false"),
        ],
        vec![
            (some("c"), some("4"), some(""), "false"),
            (some("b"), some("x"), None, "false"),
        ],
    ];
    history_stream(url, writer, &found);
    // A late change with the stored version's tracked values: the stored version merges
    // into the version the change opens, and is deleted at its own start (Spark kept it).
    let merged: Vec<Vec<Row>> = vec![
        vec![(some("a"), some("5"), some("10"), "false")],
        vec![(some("a"), some("3"), some("10"), "false")],
    ];
    history_stream(url, writer, &merged);
    // One random case (more with `PROPTEST_CASES`): the model suites (`model.rs`) draw
    // random streams on Spark too.
    let mut runner = one_case();
    runner
        .run(&stream(), |commits| {
            history_stream(url, writer, &commits);
            Ok(())
        })
        .unwrap();
}

/// `commits` applied commit by commit into SCD2 history by both engines, then rebuilt: the
/// history, the tombstones and the reports equal at every step.
fn history_stream(url: &str, writer: &Writer, commits: &[Vec<Row>]) {
    let p = Project::with_pipeline("flows: {}\n");
    p.write(
        "silver.sql",
        "CREATE TABLE medallion_demo.product2__silver (Id STRING NOT NULL, seq INT, v INT, \
         IsDeleted BOOLEAN, PRIMARY KEY (Id))",
    );
    let pair = Pair::new(p, RANDOM_HISTORY, url);
    let table = random_bronze(&pair, writer);
    let silver = "SELECT * FROM medallion_demo.product2__silver ORDER BY Id, __START_AT";
    let tombstones = "SELECT * FROM medallion_demo.product2__silver__tombstones ORDER BY Id, seq";
    let same = |step: &str| {
        let (e, s) = pair.rows(silver, &["_update_timestamp"]);
        assert_eq!(e, s, "{step}: history differs (left embedded, right Spark)");
        if pair
            .p
            .file("lake_e/medallion_demo/product2__silver__tombstones")
            .exists()
        {
            let (e, s) = pair.rows(tombstones, &["_deleted_at"]);
            assert_eq!(
                e, s,
                "{step}: tombstones differ (left embedded, right Spark)"
            );
        }
    };
    for (i, rows) in commits.iter().enumerate() {
        insert_rows(writer, &table, rows);
        let step = format!("commit {i} of {commits:?}");
        same_reports(&step, &pair.run(&[]));
        same(&step);
    }
    let step = format!("rebuild of {commits:?}");
    same_reports(&step, &pair.run(&["--full-refresh"]));
    same(&step);
}

/// The random streams' bronze table, created by Spark; its SQL name.
fn random_bronze(pair: &Pair, writer: &Writer) -> String {
    let table = format!("delta.`{}`", pair.p.file("bronze").display());
    writer.sql(&format!(
        "CREATE TABLE {table} (Id STRING, seq STRING, v STRING, IsDeleted STRING) USING DELTA \
         TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    ));
    table
}

/// One commit of `rows` into `table`, written by Spark in two files.
fn insert_rows(writer: &Writer, table: &str, rows: &[Row]) {
    let lit = |v: &Option<String>| v.as_deref().map_or("NULL".into(), string_literal);
    let values: Vec<String> = rows
        .iter()
        .map(|(k, s, v, d)| format!("({}, {}, {}, '{d}')", lit(k), lit(s), lit(v)))
        .collect();
    writer.sql(&format!(
        "INSERT INTO {table} SELECT /*+ REPARTITION(2) */ * FROM VALUES {} AS t(Id, seq, v, IsDeleted)",
        values.join(", ")
    ));
}

/// Seed 002's Auto Loader and APPLY CHANGES (`examples/tpch_part`), with the audit's file
/// row on and `cast_dialect: spark` (the Spark engine's casts).
const INGEST: &str = "  part_raw:
    ingest:
      from: ./landing/**/*.tbl
      into: tpch.part_raw
      format: csv
      header: false
      sep: \"|\"
      columns: [p_partkey, p_name, p_mfgr, p_brand, p_type, p_size, p_container, p_retailprice, p_comment]
      audit:
        file_row: _file_row
  part:
    apply:
      from: tpch.part_raw
      into: tpch.part
      schema: silver/part.sql
      sequence_by: [_ingest_timestamp]
      cast_dialect: spark
      audit:
        ingest_timestamp: null
        update_timestamp: null
";

/// An ingest flow's report fields the engines cannot agree on (beyond [`NOT_COMPARED`]).
pub(crate) const INGEST_NOT_COMPARED: &[&str] = &[];

/// The Spark pipeline's run in `p` killed (SIGABRT) at failpoint `point`: it must die there.
fn abort_spark_run(p: &Project, point: &str) {
    let out = p.abort_at(point, &["-p", "spark.yaml", "run"]);
    assert!(
        common::signal_of(&out.status).is_some(),
        "the run was not killed at {point}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `text` written to `name` in `p`, modified at `at` seconds after 2026-07-01 (a whole
/// second: a Spark listing knows a file's time to the millisecond only).
fn land(p: &Project, name: &str, text: &str, at: u64) {
    let path = p.file(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    stamp(&path, at);
}

fn stamp(path: &std::path::Path, at: u64) {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_782_864_000 + at);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(time)
        .unwrap();
}

/// Bronze, its rejects and silver equal in both lakes; the reports of both flows.
fn same_ingest(pair: &Pair, step: &str, reports: &(Vec<Value>, Vec<Value>)) {
    same_reports_but(
        step,
        INGEST_NOT_COMPARED,
        &(vec![reports.0[0].clone()], vec![reports.1[0].clone()]),
    );
    // The apply flow's, but the files it read: each engine lays bronze out in files its way.
    same_reports_but(
        step,
        &["files_read", "bytes_read"],
        &(reports.0[1..].to_vec(), reports.1[1..].to_vec()),
    );
    let bronze = "SELECT * FROM tpch.part_raw ORDER BY _datasource, _file_row";
    let (e, s) = pair.rows(bronze, &[]);
    assert!(!e.is_empty(), "{step}: bronze is empty");
    assert_eq!(e, s, "{step}: bronze differs (left embedded, right Spark)");
    let rejects = "SELECT * FROM tpch.part_raw__rejects ORDER BY file, line";
    let (e, s) = pair.rows(rejects, &["run_id", "rejected_at"]);
    assert_eq!(e, s, "{step}: rejects differ (left embedded, right Spark)");
    let silver = "SELECT * FROM tpch.part ORDER BY p_partkey";
    let (e, s) = pair.rows(silver, &[]);
    assert_eq!(e, s, "{step}: silver differs (left embedded, right Spark)");
}

/// Lines an ingest must quarantine, rescue or unquote: a short line, a quoted separator,
/// doubled quotes, a quoted field of 20,000 characters (a regular expression that recursed
/// per character would overflow Java's stack), two fields more than the columns, a blank
/// line, a CRLF line end.
fn odd_lines() -> String {
    let long = format!("\"{}\"\"{}\"", "x|".repeat(5_000), "y".repeat(10_000));
    format!(
        "900001|short|x|\n900002|\"quoted|name\"|Manufacturer#1|Brand#11|PROMO TIN|7|JUMBO BOX|901.00|say \"\"hi\"\"|\n\n\
         900005|long|Manufacturer#3|Brand#33|LARGE|1|BOX|905.00|{long}|\n\
         900003|extra|Manufacturer#2|Brand#22|STANDARD|9|SM CASE|903.00|two more|x|\r\n"
    )
}

/// Seed 002 (`examples/tpch_part`): TPC-H `part.tbl` files land, are loaded once each into
/// bronze and applied to typed silver, on both engines from one landing folder; odd lines
/// quarantined and rescued alike; runs killed before the rejects' and bronze's statements
/// load nothing twice; a rebuild, a plan and the embedded engine reading the Spark engine's
/// ledger.
fn ingest(url: &str) {
    use smelt_bench::tpch;
    let p = Project::tpch_part();
    std::fs::create_dir_all(p.file("landing")).unwrap();
    tpch::write_tbl(&tpch::day1(0.01), &p.file("landing/part-day1.tbl")).unwrap();
    stamp(&p.file("landing/part-day1.tbl"), 0);
    land(&p, "landing/day=2/odd.tbl", &odd_lines(), 10);
    let pair = Pair::placing(p, "", INGEST, url);
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["malformed"], 1, "{:?}", first.1);
    assert_eq!(first.1[0]["rescued"], 1, "{:?}", first.1);
    same_ingest(&pair, "ingest step 1", &first);

    // Day 2: repriced and new parts; the Spark run killed before its bronze commit.
    tpch::write_tbl(&tpch::day2(0.01), &pair.p.file("landing/part-day2.tbl")).unwrap();
    stamp(&pair.p.file("landing/part-day2.tbl"), 20);
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    abort_spark_run(&pair.p, "before_spark_bronze");
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    same_ingest(
        &pair,
        "ingest step 2, killed and run again",
        &(embedded, rerun),
    );

    // A file with malformed lines: killed after its rejects, then before them.
    land(&pair.p, "landing/day=3/odd.tbl", &odd_lines(), 30);
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    for point in ["before_spark_bronze", "before_spark_ingest_rejects"] {
        let out = pair.p.abort_at(point, &["-p", "spark.yaml", "run"]);
        assert!(
            common::signal_of(&out.status).is_some(),
            "not killed at {point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(rerun[0]["to_version"], 3, "{rerun:?}");
    same_ingest(&pair, "ingest step 3, killed twice", &(embedded, rerun));

    // Nothing new; the embedded engine reads the Spark engine's ledger alike.
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);
    same_ingest(&pair, "ingest step 4", &again);
    let across = pair
        .p
        .flows(&["-p", "spark.yaml", "run", "--engine", "embedded"]);
    assert_eq!(across[0]["status"], "up_to_date", "{across:?}");

    land(
        &pair.p,
        "landing/late.tbl",
        "900004|late|m|b|t|1|c|1.00|c|\n",
        40,
    );
    let compiled = pair.p.ok(&["-p", "spark.yaml", "compile", "part_raw"]);
    for part in [
        "binaryFile.`",
        "txnAppId=`smelt/part_raw`",
        "INSERT INTO delta.`",
    ] {
        assert!(compiled.contains(part), "`{part}` not in:\n{compiled}");
    }
    let planned = (
        pair.p.flows(&["-p", "embedded.yaml", "plan"]),
        pair.p.flows(&["-p", "spark.yaml", "plan"]),
    );
    assert_eq!(planned.1[0]["status"], "planned", "{:?}", planned.1);
    same_reports_but("ingest plan", INGEST_NOT_COMPARED, &planned);
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"][0].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for field in ["watermark", "files_waiting", "problem"] {
        assert_eq!(e[field], s[field], "ingest status `{field}`: {e} vs {s}");
    }
    let rebuilt = pair.run(&["--full-refresh"]);
    assert_eq!(rebuilt.1[0]["mode"], "rebuild", "{:?}", rebuilt.1);
    same_ingest(&pair, "ingest rebuild", &rebuilt);
}

/// JSON lines as Auto Loader lands them, with the file row audit on.
const INGEST_JSON: &str = "  events:
    ingest:
      from: ./landing/**/*.json
      into: raw.events
      format: json
      audit:
        file_row: _file_row
";

/// Lines of JSON: nested values (keys out of order), NULL, numbers as JSON writes them, a
/// key written twice, blank and padded lines, two lines that are not objects, a CRLF end.
const EVENTS: &str = "{\"id\": 1, \"name\": \"a\", \"n\": {\"z\": 1, \"y\": [1, 2.50]}, \"f\": 1.0}\n\n  {\"id\": 2, \"name\": null, \"t\": true, \"id\": 3}  \nnot json\n[1,2]\n{\"id\": 4, \"e\": 1e3, \"s\": \"{x\"}\r\n";

/// JSON lines ingested on both engines from one landing folder: equal bronze and rejects
/// (but the reason's parser message); a file in a `day=` folder with a new key and one of
/// the flow's own names, the Spark run killed before its bronze commit and run again.
fn ingest_json(url: &str) {
    let p = Project::with_pipeline("lake: ./lake\nflows: {}\n");
    land(&p, "landing/a.json", EVENTS, 0);
    let pair = Pair::placing(p, "", INGEST_JSON, url);
    let same = |step: &str, reports: &(Vec<Value>, Vec<Value>)| {
        same_reports_but(step, INGEST_NOT_COMPARED, reports);
        let bronze = "SELECT * FROM raw.events ORDER BY _datasource, _file_row";
        let (e, s) = pair.rows(bronze, &[]);
        assert!(!e.is_empty(), "{step}: bronze is empty");
        assert_eq!(e, s, "{step}: bronze differs (left embedded, right Spark)");
        let rejects = "SELECT * FROM raw.events__rejects ORDER BY file, line";
        let (e, s) = pair.rows(rejects, &["run_id", "rejected_at", "reason"]);
        assert_eq!(e, s, "{step}: rejects differ (left embedded, right Spark)");
    };
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["malformed"], 2, "{:?}", first.1);
    same("json step 1", &first);
    land(
        &pair.p,
        "landing/day=2/b.json",
        "{\"id\": 5, \"extra\": \"x\", \"_datasource\": \"mine\"}\n",
        10,
    );
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    abort_spark_run(&pair.p, "before_spark_bronze");
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(rerun[0]["rescued"], 1, "{rerun:?}");
    same("json step 2, killed and run again", &(embedded, rerun));
}

/// Seed 003's selective overwrite from the export's Parquet files.
const REPLACE_FILES: &str = "  sales:
    replace_where:
      from: ./exports/export_demo_table/**/*.parquet
      format: parquet
      into: demo.sales
      cast_dialect: spark
      predicate: \"updated_at >= '2026-07-21 00:00:00'\"
";

/// Seed 003 end to end (`examples/export_replace`): the export written embedded (its own
/// pipeline file), its Parquet files under `export_timestamp=<Tokyo time>/` replacing the
/// period in the target on both engines — the first batch, nothing new, a second export with
/// the Spark run killed before its write, `smelt status`.
fn replace_files(url: &str) {
    let p = Project::example("export_replace");
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let export = &yaml[..yaml.find("  sales:").unwrap()];
    p.write(
        "export.yaml",
        &export.replace(
            "lake: ./lake",
            "lake: ./lake_x\ntables:\n  abc.export_demo_table: ./source",
        ),
    );
    p.ok(&["-p", "export.yaml", "sql", "-f", "source.sql"]);
    p.ok(&["-p", "export.yaml", "run"]);
    let pair = Pair::placing(p, "", REPLACE_FILES, url);
    for file in ["embedded.yaml", "spark.yaml"] {
        pair.p.ok(&["-p", file, "sql", "-f", "target.sql"]);
    }
    let fields = REPLACE_NOT_COMPARED;
    let replaced = |step: &str, reports: &(Vec<Value>, Vec<Value>)| {
        same_reports_but(step, fields, reports);
        let (e, s) = pair.rows("SELECT * FROM demo.sales ORDER BY sale_id", &[]);
        assert!(!e.is_empty(), "{step}: the embedded target is empty");
        assert_eq!(e, s, "{step}: targets differ (left embedded, right Spark)");
    };
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["files_new"], 1, "{:?}", first.1);
    replaced("replace from files step 1", &first);
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);
    replaced("replace from files step 2", &again);

    pair.p.write(
        "more.sql",
        "INSERT INTO abc.export_demo_table VALUES \
         (5, 'Chair', 3, 4500.00, DATE '2026-07-22', TIMESTAMP '2099-07-22 03:00:00+00')",
    );
    pair.p.ok(&["-p", "export.yaml", "sql", "-f", "more.sql"]);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    pair.p.ok(&["-p", "export.yaml", "run"]);
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    let out = pair
        .p
        .abort_at("before_spark_replace", &["-p", "spark.yaml", "run"]);
    assert!(
        common::signal_of(&out.status).is_some(),
        "the replace was not killed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(rerun[0]["files_new"], 1, "{rerun:?}");
    replaced(
        "replace from files step 3, killed and run again",
        &(embedded, rerun),
    );
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"][0].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for field in ["watermark", "bronze_version", "files_waiting", "problem"] {
        assert_eq!(e[field], s[field], "replace status `{field}`: {e} vs {s}");
    }
}

/// An export flow's report fields the engines cannot agree on (beyond [`NOT_COMPARED`]):
/// each engine's own folder, and the partition named by the run's time.
const EXPORT_NOT_COMPARED: &[&str] = &["into", "partition"];

/// Seed 003's whole pipeline (`examples/export_replace`) on each engine, each exporting to
/// a folder of its own and replacing from it: equal targets and reports; a second export
/// with the Spark run killed before its state, before its files and before they are
/// published, then run again (the same rows into the same folder); nothing new;
/// `smelt status`.
fn export(url: &str) {
    let p = Project::example("export_replace");
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let flows = &yaml[yaml.find("flows:\n").unwrap() + "flows:\n".len()..];
    let flows = flows.replace("predicate:", "cast_dialect: spark\n      predicate:");
    let pair = Pair::placing(p, "  abc.export_demo_table: ./source\n", "", url);
    let tables = "tables:\n  abc.export_demo_table: ./source\n";
    pair.p.write(
        "embedded.yaml",
        &format!(
            "lake: ./lake_e\n{tables}flows:\n{}",
            flows.replace("./exports/", "./exports_e/")
        ),
    );
    pair.p.write(
        "spark.yaml",
        &format!(
            "engine: spark\nconnect: {url}\nlake: ./lake_s\n{tables}flows:\n{}",
            flows.replace("./exports/", "./exports_s/")
        ),
    );
    pair.bronze("source.sql");
    for file in ["embedded.yaml", "spark.yaml"] {
        pair.p.ok(&["-p", file, "sql", "-f", "target.sql"]);
    }
    let same = |step: &str, reports: &(Vec<Value>, Vec<Value>)| {
        let first = |r: &[Value]| vec![r[0].clone()];
        let exported = (first(&reports.0), first(&reports.1));
        same_reports_but(step, EXPORT_NOT_COMPARED, &exported);
        // The replace_where reads each engine's own export: its folder, files and bytes.
        let rest = |r: &[Value]| r[1..].to_vec();
        let own = ["predicate", "from", "files_read", "bytes_read"];
        same_reports_but(step, &own, &(rest(&reports.0), rest(&reports.1)));
        let sql = "SELECT * EXCEPT (export_timestamp) FROM demo.sales ORDER BY sale_id";
        let (e, s) = pair.rows(sql, &[]);
        assert!(!e.is_empty(), "{step}: the embedded target is empty");
        assert_eq!(e, s, "{step}: targets differ (left embedded, right Spark)");
    };
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["rows_written"], 2, "{:?}", first.1);
    same("export step 1", &first);

    pair.p.write(
        "more.sql",
        "INSERT INTO abc.export_demo_table VALUES \
         (5, 'Chair', 3, 4500.00, DATE '2026-07-22', TIMESTAMP '2099-07-22 03:00:00+00')",
    );
    pair.bronze("more.sql");
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    // Killed before its state is saved (nothing done), before its files (the state says
    // pending), then, writing that export again, before it is published.
    for point in [
        "before_spark_export_state",
        "before_spark_export",
        "before_spark_export_publish",
    ] {
        let out = pair.p.abort_at(point, &["-p", "spark.yaml", "run"]);
        assert!(
            common::signal_of(&out.status).is_some(),
            "the export was not killed at {point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(rerun[0]["status"], "up_to_date", "{rerun:?}");
    assert_eq!(rerun[1]["files_new"], 1, "{rerun:?}");
    same_reports_but(
        "export step 2, killed and run again",
        &["predicate", "from", "files_read", "bytes_read"],
        &(embedded[1..].to_vec(), rerun[1..].to_vec()),
    );
    let (e, s) = pair.rows("SELECT sale_id FROM demo.sales ORDER BY sale_id", &[]);
    assert_eq!(
        e, s,
        "export step 2: targets differ (left embedded, right Spark)"
    );
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);
    same("export step 3", &again);
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for i in 0..2 {
        for field in ["watermark", "bronze_version", "problem"] {
            assert_eq!(e[i][field], s[i][field], "status `{field}`: {e} vs {s}");
        }
    }
}

/// A predicate means the same on both engines (issue 60): `"Name"` is a column (pasted
/// into Spark SQL it would be a string, and every key deleted), a quote in a string is
/// doubled and a backslash is itself, backquotes name a column too; a name in another case
/// is refused by both engines alike, and a function Spark computes otherwise or `/` by
/// the Spark engine, naming the option and the fix.
fn predicates(url: &str) {
    let flows = format!(
        r#"{PRODUCT2}      where: '"Name" LIKE ''v1%'' OR Name = ''O''''Brien'' OR `Name` = ''a\b'''
      apply_as_deletes: '"IsDeleted" = ''true'''
      expect:
        named: Name IS NOT NULL
"#
    );
    let pair = Pair::new(Project::product2(), &flows, url);
    pair.bronze("bronze.sql");
    pair.p.write(
        "rows.sql",
        r"INSERT INTO medallion_demo.product2__bronze (Id, Name, IsDeleted) VALUES
         ('01t000000000001AAA', 'v1a', 'false'), ('01t000000000002AAA', 'v2b', 'false'),
         ('01t000000000003AAA', 'v1c', 'false'), ('01t000000000004AAA', 'O\'Brien', 'false'),
         ('01t000000000005AAA', 'a\\b', 'false'), ('01t000000000006AAA', 'v1d', 'true')",
    );
    pair.bronze("rows.sql");
    same_reports("predicates", &pair.run(&[]));
    let (e, s) = pair.rows(
        "SELECT Id, Name FROM medallion_demo.product2__silver ORDER BY Id",
        &[],
    );
    let kept: Vec<&str> = e.iter().filter_map(|r| r["Name"].as_str()).collect();
    assert_eq!(kept, ["v1a", "v1c", "O'Brien", r"a\b"], "embedded silver");
    assert_eq!(e, s, "silver differs (left embedded, right Spark)");
    for (predicate, pin) in [
        ("name LIKE 'v1%'", "predicate_names_no_column"),
        ("log(2) > 0", "predicate_function_refused"),
        ("1 / 2 = 0", "predicate_division_refused"),
    ] {
        pair.flows(&format!("{PRODUCT2}      where: \"{predicate}\"\n"), url);
        let (e, s) = pair.validate_fails_or_passes();
        match pin {
            "predicate_names_no_column" => pin_failures(pin, &pair.p, &e, &s),
            // DataFusion's own meaning embedded; refused on Spark only.
            _ => pin_spark(pin, &pair.p, &s),
        }
    }
}

/// A runner of one random case (more with `PROPTEST_CASES`), shrinking little: each case is
/// several Spark runs.
fn one_case() -> TestRunner {
    TestRunner::new(Config {
        cases: smelt_test::cases(1),
        failure_persistence: None,
        max_shrink_iters: 8,
        ..Config::default()
    })
}

/// A scenario, given the cluster's Spark Connect URL; it panics when it fails.
pub(crate) type Scenario = fn(&str);

/// Every scenario of smelt's Spark engine, in the order they run, one after another on the
/// process's one cluster ([`crate::cluster::runs_every_spark_scenario_in_turn`]).
pub(crate) const SCENARIOS: &[(&str, Scenario)] = &[
    ("refused_by_name", |url| refusals(url, &Writer::new(url))),
    ("seed_000_product2", product2),
    ("seed_000_product2_deletes", product2_deletes),
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
        "model_scd2_deletes_that_arrive_before_the_versions_they_close",
        |_| model::scd2_deletes_that_arrive_before_the_versions_they_close(),
    ),
];
