//! Bad input: every failure is a clear message (what, where, how to fix), the right exit
//! code, no panic, and nothing written.

use crate::common::{Project, pinned};

fn yaml_with(p: &Project, from: &str, to: &str) {
    let text = std::fs::read_to_string(p.file("smelt.yaml"))
        .unwrap()
        .replace(from, to);
    assert!(text.contains(to));
    p.write("smelt.yaml", &text);
}

#[test]
fn malformed_yaml_names_file_and_line() {
    let p = Project::product2();
    p.write(
        "smelt.yaml",
        "lake: ./lake\nflows:\n  product2:\n    apply:\n      from: a.b\n      into: c.d: e\n",
    );
    let (_, err) = p.fails(&["run"], 2);
    insta::assert_snapshot!("malformed_yaml", pinned(&p, &err));
}

#[test]
fn unknown_field_suggests_the_near_miss() {
    let p = Project::product2();
    yaml_with(&p, "sequence_by:", "sequense_by:");
    let (_, err) = p.fails(&["run"], 2);
    insta::assert_snapshot!("unknown_field", pinned(&p, &err));
}

#[test]
fn unknown_key_column() {
    let p = Project::product2();
    yaml_with(
        &p,
        "      sequence_by:",
        "      keys: [Idd]\n      sequence_by:",
    );
    let (_, err) = p.fails(&["run"], 2);
    insta::assert_snapshot!("unknown_key_column", pinned(&p, &err));
}

#[test]
fn unknown_type_in_the_ddl() {
    let p = Project::product2();
    let ddl = std::fs::read_to_string(p.file("silver.sql"))
        .unwrap()
        .replace("`IsActive` BOOL", "`IsActive` BOOLEEN");
    p.write("silver.sql", &ddl);
    let (_, err) = p.fails(&["run"], 2);
    insta::assert_snapshot!("unknown_type", pinned(&p, &err));
}

#[test]
fn missing_bronze_table() {
    let p = Project::product2();
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("missing_bronze_table", pinned(&p, &err));
    assert!(!p.file("lake/medallion_demo/product2__silver").exists());
}

#[test]
fn unknown_flow_on_the_command_line() {
    let p = Project::product2();
    let (_, err) = p.fails(&["run", "product3"], 2);
    insta::assert_snapshot!("unknown_flow", pinned(&p, &err));
}

#[test]
fn cast_failure_under_fail_policy_names_column_value_and_row() {
    let p = Project::product2();
    yaml_with(&p, "on_cast_error: null", "on_cast_error: fail");
    p.ok(&["sql", "-f", "bronze.sql"]);
    let bad = std::fs::read_to_string(p.file("insert_1.sql"))
        .unwrap()
        .replacen("'2026-07-02T09:00:00.000+0000'", "'not a time'", 1);
    p.write("bad.sql", &bad);
    p.ok(&["sql", "-f", "bad.sql"]);
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("cast_failure", pinned(&p, &err));
    // The flow is named once, where it ran (`EngineError::InFlow`), not by every layer.
    assert_eq!(err.matches("product2`").count(), 1, "{err}");
    assert!(
        !p.file("lake/medallion_demo/product2__silver").exists(),
        "nothing written"
    );

    // Under the default policy the same data loads, with the failure counted.
    yaml_with(&p, "on_cast_error: fail", "on_cast_error: null");
    let report = p.ok(&["run"]);
    assert!(report.contains("CreatedDate"), "{report}");
    let rows = p.query("SELECT Id, CreatedDate FROM medallion_demo.product2__silver WHERE Id = '01t000000000002AAA'");
    assert!(
        rows[0].get("CreatedDate").is_none() || rows[0]["CreatedDate"].is_null(),
        "{rows:?}"
    );
}

#[test]
fn sql_errors_name_the_statement() {
    let p = Project::product2();
    p.ok(&["sql", "-f", "bronze.sql"]);
    let (_, err) = p.fails(
        &[
            "sql",
            "INSERT INTO medallion_demo.product2__bronze (Idd) VALUES ('x')",
        ],
        1,
    );
    insta::assert_snapshot!("sql_unknown_column", pinned(&p, &err));
    let (_, err) = p.fails(&["sql", "SELEC 1"], 2);
    insta::assert_snapshot!("sql_does_not_parse", pinned(&p, &err));
}

/// With `--json`, a failing command prints one JSON error object on stdout — `error`,
/// `causes`, `hint`, `exit_code`, and what the command adds (a run's reports, a check's
/// problems) — and the text form on stderr as without it.
#[test]
fn every_failure_is_one_json_object_on_stdout() {
    let p = Project::product2();
    let object = |args: &[&str], code: i32| -> (serde_json::Value, String) {
        let (out, err) = p.fails(args, code);
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(v["exit_code"], code, "{v}");
        assert!(v["causes"].is_array(), "{v}");
        (v, err)
    };
    let (usage, err) = object(&["--json", "run", "nope"], 2);
    assert!(
        usage["error"].as_str().unwrap().contains("no flow `nope`"),
        "{usage}"
    );
    assert!(
        usage["hint"].as_str().unwrap().contains("product2"),
        "{usage}"
    );
    assert!(err.contains("error: no flow `nope`"), "{err}");

    // No bronze yet: the check lists the problem, the run fails on it.
    let (check, _) = object(&["--json", "validate"], 1);
    assert_eq!(check["problems"][0]["flow"], "product2", "{check}");
    let (run, err) = object(&["--json", "run"], 1);
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .starts_with("flow `product2` failed: "),
        "{run}"
    );
    assert!(
        run["run_id"].is_string() && run["flows"].is_array(),
        "{run}"
    );
    assert!(err.contains("error: flow `product2` failed"), "{err}");

    let (sql, _) = object(&["--json", "sql", "SELECT * FROM nope.t"], 1);
    assert!(
        sql["error"].as_str().unwrap().starts_with("statement 1: "),
        "{sql}"
    );
}
