//! Append flows on both engines (seed 004's append and the `append_active` example).

use super::*;

/// An append flow's report fields the engines cannot agree on (beyond [`NOT_COMPARED`]).
pub(super) const APPEND_NOT_COMPARED: &[&str] = &[
    // Not counted on Spark: an `INSERT OVERWRITE` does not say (docs/spark.md).
    "rows_replaced",
];

pub(super) fn same_append_reports(step: &str, pair: &(Vec<Value>, Vec<Value>)) {
    same_reports_but(step, APPEND_NOT_COMPARED, pair);
}

/// Seed 004's append example (`examples/append_active`, its own pipeline file) on both
/// engines over one input table: its three builds — the active rows of the input (1 and 3),
/// then only those added since (4), then nothing — equal outputs and reports.
pub(super) fn append_active(url: &str) {
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
pub(super) const APPEND: &str = "  active:
    append:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__active
      schema: active.sql
      cast_dialect: spark
      where: IsActive = 'true'
";

/// Rows added to bronze: an active row whose time does not cast, an inactive one, an
/// active one with a blank time (NULL, not a failure).
pub(super) const MORE_ROWS: &str = "INSERT INTO medallion_demo.product2__bronze (Id, Name, IsActive, SystemModstamp, IsDeleted) VALUES \
    ('01t000000000009AAA', 'new', 'true', 'not a time', 'false'), \
    ('01t00000000000AAAA', 'inactive', 'false', '2026-08-01T00:00:00.000+0000', 'false'), \
    ('01t00000000000BAAA', 'blank', 'true', '  ', 'yes')";

/// An append flow (seed 004) on both engines: the snapshot, then new rows (the Spark run
/// killed before its write and run again), a commit that rewrites rows (`on_rewrite: fail`
/// stops both with one message, `skip` leaves it out), a plan, a rebuild, and
/// `on_cast_error: fail`.
pub(super) fn append(url: &str) {
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
    abort_spark_run(&pair.p, "before_spark_append");
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
    let part = "cannot cast column `SystemModstamp` to TIMESTAMP: value \"not a time\" (";
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
