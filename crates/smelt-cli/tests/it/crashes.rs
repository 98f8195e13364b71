//! Crashes through the real binary: every failpoint kills a `smelt` process on the spot
//! (`SMELT_FAILPOINT=<point>:abort`: SIGABRT, nothing cleaned up, nothing flushed), and real
//! `smelt run`s are SIGKILLed at random moments of a multi-version workload. After a rerun,
//! and the rest of the workload, the lake must be what an uninterrupted run of the same
//! workload leaves — see [`snapshot`] for what "the same" compares, and what it leaves out.
//!
//! The event log: a crash loses the crashed run's rows (the process dies before the
//! event-log append), and the rerun finds the flows the crashed run committed up to date.
//! "The same as an uninterrupted run" is taken to mean: per flow, the rows of the runs that
//! did something (every status but `up_to_date`), in order, are the same — so a flow whose
//! commit landed before the crash appears exactly once (its row recovered by the next run),
//! and one whose commit did not land appears once, from the rerun. The extra `up_to_date`
//! rows of reruns (and `up_to_date` rows in general) are left out on both sides: they record
//! that a run happened, not what it did.

#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::common::{Project, files_under, signal_of, text};
use serde_json::{Map, Value};

const SIGABRT: i32 = 6;
const SIGKILL: i32 = 9;

// ------------------------------------------------------------------------ workloads

/// One step of a workload, done the same way in every project that plays it.
enum Step {
    /// `smelt sql -f <file>` (a file of the project).
    SqlFile(&'static str),
    /// `smelt sql <statement>`.
    Sql(String),
    /// Writes a project file (a DDL or pipeline that changes between runs).
    Write(&'static str, &'static str),
    /// Lands a file for an ingest flow, modified `at` seconds after 2024-01-01 00:00 UTC: a
    /// fixed time, so that both projects' bronze `_ingest_timestamp` (the file's modification
    /// time) agree.
    Land(&'static str, &'static str, u64),
    /// `smelt <args>`. Each failpoint of `crash` is one drill: a project where one run of
    /// this step aborts at that point before the step is run normally.
    Run {
        args: &'static [&'static str],
        crash: &'static [&'static str],
    },
}

fn run(args: &'static [&'static str]) -> Step {
    Step::Run { args, crash: &[] }
}

fn crash(args: &'static [&'static str], points: &'static [&'static str]) -> Step {
    Step::Run {
        args,
        crash: points,
    }
}

/// A pipeline, its workload, and the failpoints its runs are crashed at.
struct Scenario {
    name: &'static str,
    /// A fresh project holding the pipeline.
    start: fn() -> Project,
    steps: Vec<Step>,
}

impl Scenario {
    /// Its drills: (index of the crashed step, failpoint).
    fn drills(&self) -> Vec<(usize, &'static str)> {
        let mut out = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            if let Step::Run { crash, .. } = step {
                out.extend(crash.iter().map(|p| (i, *p)));
            }
        }
        out
    }
}

/// Every scenario: together their drills cover every failpoint (checked by
/// `every_failpoint_is_drilled`).
fn scenarios() -> Vec<Scenario> {
    vec![
        deletes(),
        deletes_merge_on_read(),
        maintenance(),
        quarantine(),
        widen(),
        ingest(),
        ingest_iceberg(),
        deletes_iceberg(),
        quarantine_iceberg(),
        append(),
        export_replace(),
        sql_dml(),
    ]
}

/// `smelt sql` UPDATE, DELETE and MERGE on product2's bronze, each aborted with its data
/// files written and its commit not (`before_sql_commit`), then run again; a run applies
/// what they changed.
fn sql_dml() -> Scenario {
    fn start() -> Project {
        let p = Project::product2();
        p.write(
            "update.sql",
            "UPDATE medallion_demo.product2__bronze SET Name = concat(Name, ' (fixed)') \
             WHERE Id = '01t000000000001AAA'",
        );
        p.write(
            "delete.sql",
            "DELETE FROM medallion_demo.product2__bronze WHERE Id = '01t000000000002AAA'",
        );
        p.write(
            "merge.sql",
            "MERGE INTO medallion_demo.product2__bronze AS b \
             USING (SELECT '01t000000000003AAA' AS Id, 'merged' AS Name \
                    UNION ALL SELECT '01t000000000077AAA', 'new by merge') AS s \
             ON b.Id = s.Id \
             WHEN MATCHED THEN UPDATE SET Name = s.Name \
             WHEN NOT MATCHED THEN INSERT (Id, Name) VALUES (s.Id, s.Name)",
        );
        p
    }
    Scenario {
        name: "smelt sql UPDATE, DELETE, MERGE",
        start,
        steps: vec![
            Step::SqlFile("bronze.sql"),
            Step::SqlFile("insert_1.sql"),
            run(&["run"]),
            crash(&["sql", "-f", "update.sql"], &["before_sql_commit"]),
            crash(&["sql", "-f", "delete.sql"], &["before_sql_commit"]),
            crash(&["sql", "-f", "merge.sql"], &["before_sql_commit"]),
            run(&["run"]),
        ],
    }
}

/// A product deleted by a bronze change that closes nothing (no history yet): SCD1 and
/// SCD2 both keep a tombstone for it.
const GHOST_DELETE: &str = "INSERT INTO medallion_demo.product2__bronze \
     (Id, Name, IsActive, IsDeleted, IsArchived, CreatedDate, SystemModstamp) VALUES \
     ('01t000000000009AAA', 'ゴースト', 'true', 'true', 'false', \
      '2026-07-05T09:00:00.000+0000', '2026-08-01T06:00:00.000+0000')";

/// A late change of that product, older than its delete: stale in SCD1, a closed version
/// `[07-20, 08-01T06)` in SCD2 (read back from the tombstone).
const GHOST_LATE: &str = "INSERT INTO medallion_demo.product2__bronze \
     (Id, Name, IsActive, IsDeleted, IsArchived, CreatedDate, SystemModstamp) VALUES \
     ('01t000000000009AAA', 'ゴースト (late)', 'true', 'false', 'false', \
      '2026-07-05T09:00:00.000+0000', '2026-07-20T00:00:00.000+0000')";

/// `examples/product2_deletes`: SCD1 with soft deletes and tombstones (`product2`) and the
/// same changes as SCD2 (`product2_history`), each flow crashed at its tombstones and
/// silver commits, and both before the event log.
fn deletes() -> Scenario {
    Scenario {
        name: "deletes (SCD1 + SCD2)",
        start: Project::product2_deletes,
        steps: vec![
            Step::SqlFile("../product2/bronze.sql"),
            Step::SqlFile("../product2/insert_1.sql"),
            run(&["run"]),
            Step::SqlFile("soft_delete.sql"),
            Step::Sql(GHOST_DELETE.into()),
            crash(
                &["run", "product2"],
                &["before_tombstones_commit", "before_silver_commit"],
            ),
            crash(
                &["run", "product2_history"],
                &["before_tombstones_commit", "before_silver_commit"],
            ),
            Step::SqlFile("late.sql"),
            Step::Sql(GHOST_LATE.into()),
            crash(&["run"], &["before_event_log"]),
            Step::SqlFile("restore.sql"),
            run(&["run"]),
        ],
    }
}

/// `project`'s pipeline with its apply flows writing into Iceberg catalog `ice` (a SQL
/// catalog, warehouse `./warehouse`): silver, tombstones and rejects there, bronze in Delta.
fn into_iceberg(project: Project) -> Project {
    let yaml = std::fs::read_to_string(project.file("smelt.yaml")).unwrap();
    let yaml = yaml
        .replace(
            "lake: ./lake\n",
            "lake: ./lake\ncatalogs:\n  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}\n",
        )
        .replace("into: medallion_demo.", "into: ice.medallion_demo.");
    assert!(yaml.contains("into: ice."), "{yaml}");
    project.write("smelt.yaml", &yaml);
    std::fs::create_dir_all(project.file("warehouse")).unwrap();
    project
}

/// [`deletes`] into Iceberg: SCD1 and SCD2 silver and their tombstones in a catalog, each
/// crashed before its tombstones and silver commits.
fn deletes_iceberg() -> Scenario {
    Scenario {
        name: "deletes (SCD1 + SCD2) into Iceberg",
        start: || into_iceberg(Project::product2_deletes()),
        ..deletes()
    }
}

/// [`quarantine`] into Iceberg: the rejects table in the catalog, crashed before its commit
/// and before silver's.
fn quarantine_iceberg() -> Scenario {
    Scenario {
        name: "quarantine into Iceberg",
        start: || into_iceberg((quarantine().start)()),
        ..quarantine()
    }
}

/// [`deletes`] with every apply flow writing merge-on-read (the lake default
/// `write_mode: merge_on_read`): replaced and deleted rows marked in deletion vectors.
fn deletes_merge_on_read() -> Scenario {
    fn start() -> Project {
        let p = Project::product2_deletes();
        let pipeline = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
        p.write(
            "smelt.yaml",
            &format!("write_mode: merge_on_read\n{pipeline}"),
        );
        p
    }
    Scenario {
        name: "deletes (SCD1 + SCD2), merge-on-read",
        start,
        ..deletes()
    }
}

/// [`deletes_merge_on_read`] with derived change data (`change_data: derived`) and a flow
/// reading the SCD1 silver's change feed into a gold table: no change data file written,
/// the gold flow derives the changes.
fn deletes_derived() -> Scenario {
    fn start() -> Project {
        let p = Project::product2_deletes();
        let pipeline = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
        let derived = pipeline.replace("    apply:\n", "    apply:\n      change_data: derived\n");
        assert_ne!(derived, pipeline);
        let ddl = std::fs::read_to_string(p.file("../product2/silver.sql")).unwrap();
        let gold = ddl.replace("product2__silver`", "product2__gold`");
        assert_ne!(gold, ddl);
        p.write("gold.sql", &gold);
        p.write(
            "smelt.yaml",
            &format!(
                "write_mode: merge_on_read\n{derived}  product2_gold:
    apply:
      from: medallion_demo.product2__silver
      into: medallion_demo.product2__gold
      schema: gold.sql
      sequence_by: [_commit_timestamp]
      source_deletes: apply
      on_sequence_conflict: fail
"
            ),
        );
        p
    }
    Scenario {
        name: "deletes (SCD1 + SCD2), merge-on-read, derived change data",
        start,
        ..deletes()
    }
}

/// [`deletes_merge_on_read`] with maintenance between its runs: `optimize: auto` on the
/// SCD1 flow crashed after the run's commit; `smelt optimize` crashed with its files written
/// and not committed; `smelt vacuum --retain 0s` crashed after its first delete.
fn maintenance() -> Scenario {
    fn start() -> Project {
        let p = Project::product2_deletes();
        let pipeline = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
        let auto = pipeline.replacen(
            "  product2:\n    apply:\n",
            "  product2:\n    apply:\n      optimize: auto\n",
            1,
        );
        assert_ne!(auto, pipeline);
        p.write("smelt.yaml", &format!("write_mode: merge_on_read\n{auto}"));
        p
    }
    Scenario {
        name: "maintenance (optimize, vacuum), merge-on-read",
        start,
        steps: vec![
            Step::SqlFile("../product2/bronze.sql"),
            Step::SqlFile("../product2/insert_1.sql"),
            run(&["run"]),
            Step::SqlFile("soft_delete.sql"),
            Step::Sql(GHOST_DELETE.into()),
            crash(&["run", "product2"], &["before_auto_optimize"]),
            run(&["run"]),
            Step::SqlFile("late.sql"),
            run(&["run"]),
            crash(&["optimize"], &["before_optimize_commit"]),
            crash(&["vacuum", "--retain", "0s"], &["before_vacuum_rest"]),
            Step::SqlFile("restore.sql"),
            run(&["run"]),
        ],
    }
}

/// product2 quarantining cast failures and a failed expectation: crashed before the
/// rejects commit, and between it and the silver commit.
fn quarantine() -> Scenario {
    fn start() -> Project {
        let p = Project::product2();
        let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
        let yaml = yaml.replace("on_cast_error: null ", "on_cast_error: quarantine ");
        assert!(yaml.contains("on_cast_error: quarantine"), "{yaml}");
        p.write(
            "smelt.yaml",
            &format!(
                "{}\n      expect:\n        named: Name IS NOT NULL\n      on_violation: quarantine\n",
                yaml.trim_end()
            ),
        );
        p
    }
    Scenario {
        name: "quarantine",
        start,
        steps: vec![
            Step::SqlFile("bronze.sql"),
            Step::SqlFile("insert_1.sql"),
            run(&["run"]),
            Step::Sql(
                "INSERT INTO medallion_demo.product2__bronze (Id, Name, IsActive) VALUES \
                 ('01t000000000009AAA', 'bad flag', 'maybe'), \
                 ('01t000000000010AAA', NULL, 'true'), \
                 ('01t000000000008AAA', 'good', 'true')"
                    .into(),
            ),
            crash(&["run"], &["before_rejects_commit", "before_silver_commit"]),
            Step::SqlFile("insert_2.sql"),
            Step::Sql(
                "INSERT INTO medallion_demo.product2__bronze (Id, Name, IsActive) VALUES \
                 ('01t000000000011AAA', 'worse flag', 'perhaps'), \
                 ('01t000000000009AAA', 'fixed flag', 'false')"
                    .into(),
            ),
            run(&["run"]),
        ],
    }
}

/// `widen_types: true`: the DDL's INT becomes BIGINT; crashed before the widening commit,
/// and after it (before the data commit).
fn widen() -> Scenario {
    fn start() -> Project {
        let p = Project::with_pipeline(
            "lake: ./lake\nflows:\n  orders:\n    apply:\n      from: shop.orders__bronze\n      into: shop.orders\n      schema: orders.sql\n      widen_types: true\n",
        );
        p.write(
            "orders.sql",
            "CREATE TABLE shop.orders (id STRING NOT NULL, qty INT, PRIMARY KEY (id))",
        );
        p
    }
    Scenario {
        name: "widen types",
        start,
        steps: vec![
            Step::Sql("CREATE TABLE shop.orders__bronze (id STRING, qty STRING)".into()),
            Step::Sql(
                "INSERT INTO shop.orders__bronze VALUES ('a', '1'), ('b', '2147483647')".into(),
            ),
            run(&["run"]),
            Step::Write(
                "orders.sql",
                "CREATE TABLE shop.orders (id STRING NOT NULL, qty BIGINT, PRIMARY KEY (id))",
            ),
            Step::Sql(
                "INSERT INTO shop.orders__bronze VALUES ('c', '9999999999'), ('a', '5')".into(),
            ),
            crash(&["run"], &["before_widen_commit", "before_silver_commit"]),
            Step::Sql("INSERT INTO shop.orders__bronze VALUES ('d', '4')".into()),
            run(&["run"]),
        ],
    }
}

/// CSV files → bronze (malformed lines to the rejects table) → typed silver sequenced by
/// the files' modification times: crashed before the rejects commit, before the bronze
/// commit, between the bronze commit and its ledger entry beside the table, and before the
/// event log (ingest and apply flows recover their rows).
fn ingest() -> Scenario {
    fn start() -> Project {
        let p = Project::with_pipeline(
            "lake: ./lake\nflows:\n  items_raw:\n    ingest:\n      from: ./in\n      into: raw.items\n      format: csv\n  items:\n    apply:\n      from: raw.items\n      into: clean.items\n      schema: items.sql\n      sequence_by: [_ingest_timestamp]\n      audit:\n        ingest_timestamp: null\n        update_timestamp: null\n",
        );
        p.write(
            "items.sql",
            "CREATE TABLE clean.items (id BIGINT NOT NULL, name STRING, _datasource STRING, _ingest_timestamp TIMESTAMP, PRIMARY KEY (id))",
        );
        p
    }
    Scenario {
        name: "ingest",
        start,
        steps: vec![
            Step::Land("in/1.csv", "id,name\n1,apple\n2,banana\nbad\n", 0),
            Step::Land("in/2.csv", "id,name\n3,cherry\n", 60),
            run(&["run"]),
            Step::Land("in/3.csv", "id,name\n1,apricot\n4,date\nworse\n", 120),
            crash(
                &["run"],
                &[
                    "before_ingest_rejects_commit",
                    "before_bronze_commit",
                    "before_delta_ledger",
                    "before_event_log",
                ],
            ),
            Step::Land("in/4.csv", "id,name\n2,blueberry\n5,elderberry\n", 180),
            run(&["run"]),
        ],
    }
}

/// The same landings ingested into an Iceberg bronze (catalog `ice`), crashed also between
/// the bronze commit and its ledger entry beside the table.
fn ingest_iceberg() -> Scenario {
    fn start() -> Project {
        let p = Project::with_pipeline(
            "lake: ./lake\ncatalogs:\n  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}\nflows:\n  items_raw:\n    ingest:\n      from: ./in\n      into: ice.raw.items\n      format: csv\n  items:\n    apply:\n      from: ice.raw.items\n      into: clean.items\n      schema: items.sql\n      sequence_by: [_ingest_timestamp]\n      audit:\n        ingest_timestamp: null\n        update_timestamp: null\n",
        );
        std::fs::create_dir_all(p.file("warehouse")).unwrap();
        p.write(
            "items.sql",
            "CREATE TABLE clean.items (id BIGINT NOT NULL, name STRING, _datasource STRING, _ingest_timestamp TIMESTAMP, PRIMARY KEY (id))",
        );
        p
    }
    Scenario {
        name: "ingest into Iceberg",
        start,
        steps: vec![
            Step::Land("in/1.csv", "id,name\n1,apple\n2,banana\nbad\n", 0),
            run(&["run"]),
            Step::Land("in/3.csv", "id,name\n1,apricot\n4,date\nworse\n", 120),
            crash(
                &["run"],
                &[
                    "before_ingest_rejects_commit",
                    "before_bronze_commit",
                    "before_iceberg_ledger",
                ],
            ),
            Step::Land("in/4.csv", "id,name\n2,blueberry\n5,elderberry\n", 180),
            run(&["run"]),
        ],
    }
}

/// `examples/append_active` (seed 004): crashed before the target commit and before the
/// event log.
fn append() -> Scenario {
    Scenario {
        name: "append",
        start: || Project::example("append_active"),
        steps: vec![
            Step::SqlFile("input.sql"),
            run(&["run"]),
            Step::SqlFile("input_2.sql"),
            crash(&["run"], &["before_target_commit", "before_event_log"]),
            Step::Sql(
                "INSERT INTO foundry.input (id, status, ts, amount) VALUES \
                 (6, 'active', '2026-07-03 09:00:00+00', 60.00), \
                 (7, 'inactive', '2026-07-03 09:05:00+00', 70.00)"
                    .into(),
            ),
            run(&["run"]),
        ],
    }
}

/// `examples/export_replace` (seed 003), the batch replacing from its own least
/// `updated_at`: the export crashed before its state, before its renames, after its first
/// rename and before the event log; the replace_where flow (run alone) before its target commit.
fn export_replace() -> Scenario {
    fn start() -> Project {
        let p = Project::example("export_replace");
        let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
        let yaml = yaml.replace(
            "updated_at >= '2026-07-21 00:00:00'",
            "updated_at >= {min(updated_at)}",
        );
        assert!(yaml.contains("{min(updated_at)}"), "{yaml}");
        p.write("smelt.yaml", &yaml);
        p
    }
    Scenario {
        name: "export + replace_where",
        start,
        steps: vec![
            Step::SqlFile("source.sql"),
            Step::SqlFile("target.sql"),
            crash(
                &["run", "export_demo_table"],
                &[
                    "before_export_state",
                    "before_export_rename",
                    "before_export_rename_rest",
                    "before_event_log",
                ],
            ),
            crash(&["run", "sales"], &["before_target_commit"]),
            Step::Sql(
                "INSERT INTO abc.export_demo_table VALUES (5, 'Lamp', 3, 80.00, \
                 DATE '2026-07-22', TIMESTAMP '2026-07-22 03:00:00+00')"
                    .into(),
            ),
            run(&["run"]),
        ],
    }
}

/// Plays `steps` in `p`; with `drill` = (step, point), one run of that step aborts at the
/// failpoint first (it must die on SIGABRT: a run that never reaches the point fails the
/// drill).
fn play(p: &Project, steps: &[Step], drill: Option<(usize, &str)>) {
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::SqlFile(file) => {
                p.ok(&["sql", "-f", *file]);
            }
            Step::Sql(sql) => {
                p.ok(&["sql", sql.as_str()]);
            }
            Step::Write(name, text) => p.write(name, text),
            Step::Land(name, text, at) => land(p, name, text, *at),
            Step::Run { args, .. } => {
                if let Some((at, point)) = drill
                    && at == i
                {
                    abort(p, point, args);
                }
                p.ok(args);
            }
        }
    }
}

/// Runs `smelt <args>` aborting at `point`; requires death by SIGABRT.
fn abort(p: &Project, point: &str, args: &[&str]) {
    let out = p.abort_at(point, args);
    assert_eq!(
        signal_of(&out.status),
        Some(SIGABRT),
        "`SMELT_FAILPOINT={point}:abort smelt {args:?}` did not die at the failpoint \
         (status {:?}: it never reached it?)\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// 2024-01-01T00:00:00Z, seconds since the epoch.
const LANDING_EPOCH: u64 = 1_704_067_200;

/// Writes a landing file with a fixed modification time.
fn land(p: &Project, name: &str, text: &str, at: u64) {
    p.write(name, text);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(p.file(name))
        .unwrap();
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(LANDING_EPOCH + at))
        .unwrap();
}

/// Plays `scenario` uninterrupted once, then once per drill in a fresh project, and
/// requires every drilled project to end as the uninterrupted one. Every drill runs; the
/// failure lists all that differ.
fn drill(scenario: &Scenario) {
    let drills = scenario.drills();
    assert!(!drills.is_empty(), "{}: no drill", scenario.name);
    let reference = (scenario.start)();
    play(&reference, &scenario.steps, None);
    let want = snapshot(&reference);
    let mut failures = Vec::new();
    for (step, point) in drills {
        let p = (scenario.start)();
        play(&p, &scenario.steps, Some((step, point)));
        if let Some(diff) = diff(&snapshot(&p), &want) {
            let args = match &scenario.steps[step] {
                Step::Run { args, .. } => args.join(" "),
                _ => unreachable!("drills crash runs"),
            };
            failures.push(format!(
                "{}: abort at `{point}` in step {step} (`smelt {args}`), then a rerun:\n{diff}",
                scenario.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} drill(s) differ from the uninterrupted run:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn crashes_at_scd1_and_scd2_delete_commits_rerun_to_the_same_lake() {
    drill(&deletes());
}

#[test]
fn crashes_at_merge_on_read_scd1_and_scd2_delete_commits_rerun_to_the_same_lake() {
    drill(&deletes_merge_on_read());
}

#[test]
fn crashes_with_derived_change_data_rerun_to_the_same_lake() {
    drill(&deletes_derived());
}

/// The same workload written copy-on-write and merge-on-read ends with the same rows in
/// every table (read through `smelt sql`, which applies deletion vectors) and the same
/// status but for the mode and the share of rows marked deleted; and the merge-on-read
/// silver has deletion vectors.
#[test]
fn merge_on_read_and_copy_on_write_end_with_the_same_lake() {
    let rows_and_status = |scenario: &Scenario| {
        let p = (scenario.start)();
        play(&p, &scenario.steps, None);
        let mut s = snapshot(&p);
        s.retain(|k, _| k.starts_with("rows of ") || k == "smelt status");
        let status = s.get_mut("smelt status").unwrap();
        for f in status.iter_mut() {
            let mut v: Value = serde_json::from_str(f).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("write_mode");
            o.remove("deleted_fraction");
            *f = v.to_string();
        }
        (p, s)
    };
    let (_cow, want) = rows_and_status(&deletes());
    let (mor, got) = rows_and_status(&deletes_merge_on_read());
    if let Some(d) = diff(&got, &want) {
        panic!("merge-on-read differs from copy-on-write:\n{d}");
    }
    // Derived change data: the same silver and history, and the gold table reading the
    // derived feed equals silver.
    let (derived, mut got) = rows_and_status(&deletes_derived());
    got.retain(|k, _| k.starts_with("rows of ") && !k.contains("gold"));
    let mut want_rows = want.clone();
    want_rows.retain(|k, _| k.starts_with("rows of "));
    if let Some(d) = diff(&got, &want_rows) {
        panic!("derived change data differs from copy-on-write:\n{d}");
    }
    let columns = "Id, Name, ProductCode, IsActive, SystemModstamp";
    let rows = |table: &str| {
        derived.query(&format!(
            "SELECT {columns} FROM medallion_demo.{table} ORDER BY Id"
        ))
    };
    assert_eq!(rows("product2__gold"), rows("product2__silver"));
    let vectors = commits(&mor.file("lake/medallion_demo/product2__silver/_delta_log"))
        .iter()
        .map(|c| std::fs::read_to_string(c).unwrap())
        .filter(|c| c.contains("\"deletionVector\":{"))
        .count();
    assert!(
        vectors > 0,
        "no commit of the merge-on-read silver added a deletion vector"
    );
}

#[test]
fn crashes_inside_optimize_and_vacuum_rerun_to_the_same_lake() {
    drill(&maintenance());
}

#[test]
fn crashes_around_the_rejects_commit_rerun_to_the_same_lake() {
    drill(&quarantine());
}

#[test]
fn crashes_around_the_widening_commit_rerun_to_the_same_lake() {
    drill(&widen());
}

#[test]
fn crashes_of_an_ingest_rerun_to_the_same_lake() {
    drill(&ingest());
}

#[test]
fn crashes_of_an_ingest_into_iceberg_rerun_to_the_same_lake() {
    drill(&ingest_iceberg());
}

#[test]
fn crashes_at_iceberg_silver_tombstones_and_rejects_commits_rerun_to_the_same_tables() {
    drill(&deletes_iceberg());
    drill(&quarantine_iceberg());
}

#[test]
fn crashes_of_an_append_rerun_to_the_same_lake() {
    drill(&append());
}

#[test]
fn crashes_inside_smelt_sql_dml_rerun_to_the_same_lake() {
    drill(&sql_dml());
}

#[test]
fn crashes_of_an_export_and_a_replace_where_rerun_to_the_same_lake() {
    drill(&export_replace());
}

/// Every failpoint of the sources is drilled by some scenario (and no drill names a point
/// that does not exist). Failpoints are named `before_…`: the literal is found whether it
/// is `failpoint("before_…")` or the name handed to `commit_with_report`.
#[test]
fn every_failpoint_is_drilled() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let needle = "\"before_";
    let mut points = BTreeSet::new();
    for file in files_below(&crates) {
        let in_src = file
            .strip_prefix(&crates)
            .unwrap()
            .components()
            .nth(1)
            .is_some_and(|c| c.as_os_str() == "src");
        if !in_src || file.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&file).unwrap();
        for (i, _) in source.match_indices(needle) {
            let rest = &source[i + 1..];
            let name = &rest[..rest.find('"').unwrap()];
            // (`failpoint` itself checks the prefix.)
            if name != "before_" {
                points.insert(name.to_string());
            }
        }
    }
    assert!(points.len() >= 10, "failpoints found: {points:?}");
    let mut drilled: BTreeSet<String> = scenarios()
        .iter()
        .flat_map(|s| s.drills())
        .map(|(_, p)| p.to_string())
        .collect();
    // The Spark engine's points are drilled on the test cluster, by the files of
    // spark_engine/.
    let spark: String = files_under(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/spark_engine"),
        ".rs",
    )
    .iter()
    .map(|f| std::fs::read_to_string(f).unwrap())
    .collect();
    drilled.extend(
        points
            .iter()
            .filter(|p| p.starts_with("before_spark_") && spark.contains(&format!("\"{p}\"")))
            .cloned(),
    );
    assert_eq!(
        drilled, points,
        "drilled failpoints vs the sources' failpoints"
    );
}

// ------------------------------------------------------------------------ SIGKILL

/// Bronze versions of the SIGKILL workload, and killed runs per version.
const KILL_VERSIONS: u32 = 8;
const KILLS_PER_VERSION: usize = 2;

/// A tiny deterministic RNG (xorshift64).
struct XorShift(u64);

impl XorShift {
    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `examples/product2_deletes` (SCD1 with deletes, SCD2) plus a flow reading the SCD1
/// silver's change feed: the active products, deletes applied.
fn kill_project() -> Project {
    let p = Project::product2_deletes();
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &format!(
            "{}\n  active:\n    apply:\n      from: medallion_demo.product2__silver\n      into: medallion_demo.product2__active\n      schema: active.sql\n      source_deletes: apply\n      where: IsActive\n",
            yaml.trim_end()
        ),
    );
    p.write(
        "active.sql",
        "CREATE TABLE medallion_demo.product2__active (Id STRING NOT NULL, Name STRING, IsActive BOOL, PRIMARY KEY (Id))",
    );
    p
}

/// The bronze commits of the SIGKILL workload, one INSERT each, over 24 products: each
/// touches about half of them with an upsert or a soft delete newer than anything before,
/// or a late upsert or delete (older than the key's newer changes). Sequences never repeat
/// for a key, so no two changes conflict.
fn kill_workload() -> Vec<String> {
    let mut rng = XorShift(0x5EED_0F5E_ED0F_5EED);
    let families = ["Hardware", "Service", "Software"];
    (1..=KILL_VERSIONS)
        .map(|v| {
            let newer = |key: u32| {
                format!(
                    "2026-08-{:02}T{:02}:00:00.000+0000",
                    v + 1,
                    key % 24
                )
            };
            let late = |key: u32| format!("2026-07-{:02}T12:{:02}:30.000+0000", 10 + v, key);
            let mut rows = Vec::new();
            for key in 1..=24u32 {
                if key != v && rng.below(100) >= 50 {
                    continue;
                }
                let (deleted, stamp) = match rng.below(10) {
                    0..=5 => ("false", newer(key)),
                    6 | 7 => ("true", newer(key)),
                    8 => ("false", late(key)),
                    _ => ("true", late(key)),
                };
                let active = if rng.below(3) == 0 { "false" } else { "true" };
                rows.push(format!(
                    "('01t{key:012}AAA', 'product {key} v{v}', '{active}', '{deleted}', 'false', \
                     '2026-07-01T09:00:00.000+0000', '{stamp}', '2026-09-{v:02}T00:00:00.000+0000', '{}')",
                    families[(key % 3) as usize]
                ));
            }
            format!(
                "INSERT INTO medallion_demo.product2__bronze \
                 (Id, Name, IsActive, IsDeleted, IsArchived, CreatedDate, SystemModstamp, LastViewedDate, Family) \
                 VALUES {}",
                rows.join(", ")
            )
        })
        .collect()
}

/// Per bronze version: the uninterrupted project runs once (timed); the other starts
/// `smelt run` and SIGKILLs it after a pseudo-random delay of up to 1.1 times that run's
/// time, twice, then runs to completion. At the end both lakes must be the same.
#[test]
fn sigkilled_runs_rerun_to_the_uninterrupted_lake() {
    let workload = kill_workload();
    let reference = kill_project();
    let killed = kill_project();
    for p in [&reference, &killed] {
        p.ok(&["sql", "-f", "../product2/bronze.sql"]);
    }
    let mut rng = XorShift(0x00C0_FFEE_D00D_F00D);
    let mut kills = Vec::new();
    for (v, sql) in workload.iter().enumerate() {
        for p in [&reference, &killed] {
            p.ok(&["sql", sql.as_str()]);
        }
        let started = Instant::now();
        reference.ok(&["run"]);
        let typical = started.elapsed();
        for _ in 0..KILLS_PER_VERSION {
            let delay = typical.mul_f64(rng.unit() * 1.1);
            let mut child = killed.spawn_run();
            std::thread::sleep(delay);
            // SIGKILL; a run that has already exited (not reaped yet) is left as it is.
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            let signal = signal_of(&out.status);
            assert!(
                signal == Some(SIGKILL) || out.status.success(),
                "version {}: a run killed after {delay:?} ended with {:?}\nstderr:\n{}",
                v + 1,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            kills.push((v + 1, delay, signal == Some(SIGKILL)));
        }
        killed.ok(&["run"]);
    }
    assert!(
        kills.iter().any(|(_, _, k)| *k),
        "no run was killed before it finished: {kills:?}"
    );
    if let Some(diff) = diff(&snapshot(&killed), &snapshot(&reference)) {
        panic!(
            "after SIGKILLs (version, delay, killed mid-run: {kills:?}) and reruns, the lake \
             differs from the uninterrupted one:\n{diff}"
        );
    }
}

// ------------------------------------------------------------------------ comparing lakes

/// What a project's lake holds, as comparable text, by topic: each table's rows (sorted,
/// so order-insensitive) and Delta metadata, the event log per flow, `smelt status`, and
/// the export folders.
type Snapshot = BTreeMap<String, Vec<String>>;

/// Columns whose values say when (or in which lake, or in which run) something was
/// written, not what: they legitimately differ between two lakes playing the same
/// workload, crash or not.
/// * `_update_timestamp`: the time of the run that changed the row (silver audit).
/// * `_deleted_at`: the time of the run that wrote a tombstone.
/// * `run_id`, `rejected_at`: the run that wrote a reject, and its time.
/// * `source_commit_timestamp`: a reject's bronze commit time (each lake commits its
///   bronze at its own time).
/// * `export_timestamp`: the export's run time (in exported files and the tables loaded
///   from them; the initial rows of `demo.sales` carry a constant, also left out).
///
/// `_ingest_timestamp` is left out too, except in tables with a `_datasource` column:
/// elsewhere it is a commit time of the source (bronze commit time in silver, silver
/// commit time downstream, or the sequence a tombstone stores for
/// `sequence_by: [_commit_timestamp]`); in ingest bronze (and silver copying it) it is the
/// landed file's modification time, which the drills fix, so it is compared.
const RUN_DEPENDENT: &[&str] = &[
    "_update_timestamp",
    "_deleted_at",
    "run_id",
    "rejected_at",
    "source_commit_timestamp",
    "export_timestamp",
];

/// Event-log columns compared. Left out: `run_id`, `started_at`, `finished_at` (which run,
/// when); `silver_version`, `files_written`, `bytes_written` (filled after the commit: a
/// row recovered from the commit lacks them, and the version numbers of the written table
/// are checked through the downstream watermarks in `smelt status`); `bytes_read` (sizes of
/// files holding run times); `error` (no drill logs a failure: an aborted run logs
/// nothing); `report` (the whole report as JSON: phase times, run id).
const EVENT_COLUMNS: &[&str] = &[
    "flow",
    "status",
    "source",
    "target",
    "from_version",
    "to_version",
    "changes_read",
    "ignored",
    "duplicates_collapsed",
    "stale",
    "inserted",
    "updated",
    "unchanged",
    "deleted",
    "rejected",
    "cast_failures",
    "files_read",
];

/// `smelt status` fields left out: `silver_version` (see above: watermarks pin the
/// versions flows consumed), `last_run_at` and `last_run_id` (when, which run).
const STATUS_RUN_DEPENDENT: &[&str] = &[
    "silver_version",
    "last_run_at",
    "last_run_id",
    // An Iceberg snapshot's id is random.
    "watermark_snapshot_id",
];

/// Replaces the project's temp folder in text (ingest `_datasource`, reject `file`, …)
/// with `<project>`: the two lakes live in different folders.
struct Paths(Vec<String>);

impl Paths {
    fn of(p: &Project) -> Self {
        let raw = p.dir.path().to_string_lossy().into_owned();
        let canonical = p
            .dir
            .path()
            .canonicalize()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut all = vec![canonical, raw];
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
        all.dedup();
        Self(all)
    }

    fn value(&self, v: Value) -> Value {
        match v {
            Value::String(s) => {
                let mut s = s;
                for path in &self.0 {
                    s = s.replace(path.as_str(), "<project>");
                }
                Value::String(s)
            }
            Value::Array(a) => Value::Array(a.into_iter().map(|v| self.value(v)).collect()),
            Value::Object(o) => {
                Value::Object(o.into_iter().map(|(k, v)| (k, self.value(v))).collect())
            }
            other => other,
        }
    }
}

/// A table row without its run-dependent columns; `raw_row` (a reject's change as JSON)
/// likewise, parsed.
fn stable_row(row: Value, keep_ingest_time: bool, paths: &Paths) -> Value {
    let mut o = match row {
        Value::Object(o) => o,
        other => panic!("not a row: {other}"),
    };
    for c in RUN_DEPENDENT {
        o.remove(*c);
    }
    if !keep_ingest_time {
        o.remove("_ingest_timestamp");
    }
    let raw = o.get("raw_row").and_then(Value::as_str).map(str::to_string);
    if let Some(raw) = raw
        && let Ok(Value::Object(mut change)) = serde_json::from_str::<Value>(&raw)
    {
        for c in RUN_DEPENDENT {
            change.remove(*c);
        }
        change.remove("_ingest_timestamp");
        o.insert("raw_row".into(), Value::Object(change));
    }
    paths.value(Value::Object(o))
}

fn snapshot(p: &Project) -> Snapshot {
    let paths = Paths::of(p);
    let mut s = Snapshot::new();
    for (name, dir) in tables(p) {
        s.insert(format!("metadata of {name}"), delta_metadata(&dir));
        if name == "_smelt.event_log" {
            continue;
        }
        let rows = p.query(&format!("SELECT * FROM {name}"));
        let keep_ingest_time = rows.iter().any(|r| r.get("_datasource").is_some());
        let mut rows: Vec<String> = rows
            .into_iter()
            .map(|r| stable_row(r, keep_ingest_time, &paths).to_string())
            .collect();
        rows.sort();
        s.insert(format!("rows of {name}"), rows);
    }
    for name in iceberg_tables(p) {
        let rows = p.query(&format!("SELECT * FROM {name}"));
        // An ingest's `_ingest_timestamp` is the landed file's time; an apply flow's the
        // bronze commit's, which differs from project to project.
        let keep_ingest_time = rows.iter().any(|r| r.get("_datasource").is_some());
        let mut rows: Vec<String> = rows
            .into_iter()
            .map(|r| stable_row(r, keep_ingest_time, &paths).to_string())
            .collect();
        rows.sort();
        s.insert(format!("rows of {name}"), rows);
    }
    if p.file("lake/_smelt/event_log/_delta_log").is_dir() {
        for row in p.query("SELECT * FROM _smelt.event_log ORDER BY finished_at") {
            if row["status"] == "up_to_date" {
                continue;
            }
            let picked: Map<String, Value> = EVENT_COLUMNS
                .iter()
                .map(|c| (c.to_string(), row.get(*c).cloned().unwrap_or(Value::Null)))
                .collect();
            s.entry(format!("event log of flow {}", text(&row["flow"])))
                .or_default()
                .push(paths.value(Value::Object(picked)).to_string());
        }
    }
    let status = Value::from(crate::common::status_rows(&p.ok(&["--json", "status"])));
    let status: Vec<String> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let mut f = f.clone();
            for c in STATUS_RUN_DEPENDENT {
                f.as_object_mut().unwrap().remove(*c);
            }
            paths.value(f).to_string()
        })
        .collect();
    s.insert("smelt status".into(), status);
    exports(p, &paths, &mut s);
    s
}

/// The lake's tables (name, folder): folders `lake/<schema>/<table>` with a commit.
fn tables(p: &Project) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let Ok(schemas) = std::fs::read_dir(p.file("lake")) else {
        return out;
    };
    for schema in schemas.flatten() {
        let Ok(tables) = std::fs::read_dir(schema.path()) else {
            continue;
        };
        for table in tables.flatten() {
            if !commits(&table.path().join("_delta_log")).is_empty() {
                out.push((
                    format!(
                        "{}.{}",
                        schema.file_name().to_string_lossy(),
                        table.file_name().to_string_lossy()
                    ),
                    table.path(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// The tables of catalog `ice` (a SQL catalog whose warehouse is `./warehouse`):
/// `ice.<namespace>.<table>` for each `warehouse/<namespace>/<table>/metadata`.
fn iceberg_tables(p: &Project) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(namespaces) = std::fs::read_dir(p.file("warehouse")) else {
        return out;
    };
    for ns in namespaces.flatten() {
        for table in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
            if table.path().join("metadata").is_dir() {
                out.push(format!(
                    "ice.{}.{}",
                    ns.file_name().to_string_lossy(),
                    table.file_name().to_string_lossy()
                ));
            }
        }
    }
    out.sort();
    out
}

/// The commit files (`<20 digits>.json`) of a Delta log, in version order.
fn commits(log: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(log)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|path| {
                    let name = path.file_name().unwrap().to_string_lossy();
                    name.len() == 25
                        && name.ends_with(".json")
                        && name[..20].bytes().all(|b| b.is_ascii_digit())
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A table's schema, partition columns and properties (its last `metaData` action, without
/// its id and creation time) and protocol, from its Delta log. Every commit is still in the
/// log: nothing in these tests is old enough for log cleanup.
fn delta_metadata(dir: &Path) -> Vec<String> {
    let (mut metadata, mut protocol) = (Value::Null, Value::Null);
    for commit in commits(&dir.join("_delta_log")) {
        for line in std::fs::read_to_string(&commit).unwrap().lines() {
            let Ok(action) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if let Some(m) = action.get("metaData") {
                metadata = serde_json::json!({
                    "schemaString": m["schemaString"],
                    "partitionColumns": m["partitionColumns"],
                    "configuration": m["configuration"],
                });
            }
            if let Some(p) = action.get("protocol") {
                protocol = p.clone();
                // Feature lists are sets (delta-rs writes them in hash order).
                for list in ["readerFeatures", "writerFeatures"] {
                    if let Some(Value::Array(features)) = protocol.get_mut(list) {
                        features.sort_by_key(|f| f.to_string());
                    }
                }
            }
        }
    }
    vec![metadata.to_string(), protocol.to_string()]
}

/// The export folders below `exports/`: per export, the rows of its visible Parquet files
/// (sorted, without `export_timestamp`) and how many files hold them, the hidden files
/// left (none, after a rerun), and its state file. Folder and file names hold the run's
/// time and id, so they are not compared.
fn exports(p: &Project, paths: &Paths, s: &mut Snapshot) {
    let root = p.file("exports");
    for file in files_below(&root) {
        let relative = file.strip_prefix(&root).unwrap();
        let export = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if relative.components().any(|c| c.as_os_str() == "_smelt") {
            // The last save of each flow's state (`_smelt/<flow>/<n>.json`): how many saves
            // a crash and its rerun took is not part of the result.
            let flow_dir = relative.parent().unwrap();
            let is_last = files_below(file.parent().unwrap())
                .into_iter()
                .max()
                .is_some_and(|last| last == file);
            if !is_last {
                continue;
            }
            let mut state: Value =
                serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            // Which run saved the state, when, and its report (with that run's id and
            // time) differ by run; what was exported must not.
            for key in ["run_id", "at_ms", "report"] {
                state.as_object_mut().unwrap().remove(key);
            }
            s.insert(
                format!("export state {}", flow_dir.display()),
                vec![paths.value(state).to_string()],
            );
        } else if name.starts_with('.') {
            s.entry(format!("hidden files of export {export}"))
                .or_default()
                .push(relative.display().to_string());
        } else {
            s.entry(format!("files of export {export}"))
                .or_default()
                .push("a file".into());
            let rows = s.entry(format!("rows of export {export}")).or_default();
            for row in parquet_rows(&file) {
                rows.push(stable_row(row, true, paths).to_string());
            }
            rows.sort();
        }
    }
}

/// The rows of a Parquet file as JSON objects (nulls explicit).
fn parquet_rows(file: &Path) -> Vec<Value> {
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(file).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let mut buf = Vec::new();
        {
            let mut writer = arrow::json::writer::WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, arrow::json::writer::LineDelimited>(&mut buf);
            writer.write(&batch).unwrap();
            writer.finish().unwrap();
        }
        for line in String::from_utf8(buf).unwrap().lines() {
            out.push(serde_json::from_str(line).unwrap());
        }
    }
    out
}

/// Every file below `dir` (none if it does not exist).
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            out.extend(files_below(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// What differs between two snapshots, topic by topic (`None`: the same): the entries
/// only one side has, or both sides in full when only the order differs.
fn diff(got: &Snapshot, want: &Snapshot) -> Option<String> {
    let topics: BTreeSet<&String> = got.keys().chain(want.keys()).collect();
    let mut out = String::new();
    let empty = Vec::new();
    for topic in topics {
        let (g, w) = (
            got.get(topic).unwrap_or(&empty),
            want.get(topic).unwrap_or(&empty),
        );
        if g == w {
            continue;
        }
        out.push_str(&format!("  {topic}:\n"));
        let only = |a: &[String], b: &[String]| -> Vec<String> {
            let mut rest: Vec<&String> = b.iter().collect();
            a.iter()
                .filter(|x| match rest.iter().position(|y| y == x) {
                    Some(i) => {
                        rest.remove(i);
                        false
                    }
                    None => true,
                })
                .cloned()
                .collect()
        };
        let (extra, missing) = (only(g, w), only(w, g));
        if extra.is_empty() && missing.is_empty() {
            out.push_str(&format!(
                "    same entries, another order:\n    after the crash: {g:#?}\n    uninterrupted:   {w:#?}\n"
            ));
        }
        for x in extra {
            out.push_str(&format!("    only after the crash: {x}\n"));
        }
        for x in missing {
            out.push_str(&format!("    only uninterrupted:   {x}\n"));
        }
    }
    (!out.is_empty()).then_some(out)
}
