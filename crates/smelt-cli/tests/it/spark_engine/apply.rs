//! Apply flows on both engines: seed 000's product2 and product2_deletes, SCD2 history, runs
//! killed between statements and at random moments, quarantine, sequence conflicts, bronze
//! deletes, schema drift, merge-on-read silver, and predicates that mean the same on both.

use super::*;

pub(super) const PRODUCT2: &str = "  product2:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__silver
      schema: silver.sql
      sequence_by: [_commit_timestamp]
      cast_dialect: spark
";

pub(super) const DELETES: &str = "  product2:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__silver
      schema: ../product2/silver.sql
      sequence_by: [SystemModstamp]
      apply_as_deletes: IsDeleted = 'true'
      cast_dialect: spark
";

/// `where` keeping the products not archived (soft_delete.sql archives one).
pub(super) const NOT_ARCHIVED: &str = "      where: NOT coalesce(IsArchived, false)\n";

/// Seed 000: the first three rows, then the second batch (a TRUNCATE and rows re-sent with
/// equal commit timestamps), then nothing new.
pub(super) fn product2(url: &str) {
    let pair = Pair::new(Project::product2(), PRODUCT2, url);
    pair.bronze("bronze.sql");
    pair.bronze("insert_1.sql");
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["inserted"], 3, "{:?}", first.1);
    same_reports("product2 step 1", &first);
    pair.same_tables("product2 step 1", false);
    // Spark's silver checkpointed and its log cleaned up to the checkpoint, as Delta's log
    // retention does: the watermark is read from the checkpoint, and step 2 reads only the
    // new changes, as embedded.
    checkpoint_and_clean_up(url, &pair.p.file("lake_s/medallion_demo/product2__silver"));

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
pub(super) fn product2_deletes(url: &str) {
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
            abort_spark_run(&pair.p, point);
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

pub(super) const HISTORY: &str = "  product2_history:
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
pub(super) fn same_history(pair: &Pair, step: &str) {
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
pub(super) fn history(url: &str) {
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
            abort_spark_run(&pair.p, point);
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
pub(super) fn random_kills(url: &str) {
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
pub(super) fn quarantine(url: &str) {
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
        abort_spark_run(&pair.p, point);
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

    // `on_cast_error: fail`: both stop at the same value, naming its bronze version and key
    // (not its place in a batch, which differs between the engines).
    let pair = Pair::new(
        pair.p,
        &format!("{PRODUCT2}      on_cast_error: fail\n"),
        url,
    );
    pair.p.write(
        "undated.sql",
        "INSERT INTO medallion_demo.product2__bronze (Id, Name, CreatedDate) VALUES \
         ('01t000000000013AAA', 'undated', 'not a date')",
    );
    pair.bronze("undated.sql");
    let (_, embedded) = pair.p.fails(&["-p", "embedded.yaml", "run"], 1);
    let (_, spark) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    pin_failures("apply_cast_failure", &pair.p, &embedded, &spark);
}

/// `on_sequence_conflict: fail`: two changes of one key in one commit (equal
/// `_commit_timestamp`) that differ stop both engines before anything is written, naming the
/// key.
pub(super) fn conflicts_fail(url: &str) {
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
pub(super) fn source_deletes(url: &str) {
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
pub(super) fn schema_drift(url: &str) {
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
    abort_spark_run(&pair.p, "before_spark_add_columns");
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
pub(super) fn merge_on_read(url: &str, writer: &Writer) {
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

/// A predicate means the same on both engines (issue 60): `"Name"` is a column (pasted
/// into Spark SQL it would be a string, and every key deleted), a quote in a string is
/// doubled and a backslash is itself, backquotes name a column too; a name in another case
/// is refused by both engines alike, and a function Spark computes otherwise or `/` by
/// the Spark engine, naming the option and the fix.
pub(super) fn predicates(url: &str) {
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

/// A checkpoint of the Delta table at `dir` written by the cluster (a commit setting
/// `delta.checkpointInterval` to 1 is checkpointed), then every log entry before it removed.
pub(super) fn checkpoint_and_clean_up(url: &str, dir: &std::path::Path) {
    Writer::new(url).sql(&format!(
        "ALTER TABLE delta.`{}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')",
        dir.display()
    ));
    let log = dir.join("_delta_log");
    let version = |name: &str| name.split('.').next()?.parse::<u64>().ok();
    let names: Vec<String> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let checkpoint = names
        .iter()
        .filter(|n| n.ends_with(".checkpoint.parquet"))
        .filter_map(|n| version(n))
        .max()
        .expect("a checkpoint after the commit");
    let mut removed = 0;
    for name in &names {
        if (name.ends_with(".json") || name.ends_with(".crc"))
            && version(name).is_some_and(|v| v < checkpoint)
        {
            std::fs::remove_file(log.join(name)).unwrap();
            removed += 1;
        }
    }
    assert!(removed > 0, "no log entry before the checkpoint: {names:?}");
}
