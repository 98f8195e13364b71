//! Pipelines of several flows through the real binary: dependency order, a silver feeding
//! another flow through its change feed, selection by name.

use crate::common::{self, Project, pinned};
use serde_json::Value;

/// product2 plus a downstream flow, listed first, that keeps the active products of silver.
fn project() -> Project {
    let p = Project::product2();
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let downstream = "  active:\n    apply:\n      from: medallion_demo.product2__silver\n      into: medallion_demo.product2__active\n      schema: active.sql\n      where: IsActive\n";
    let yaml = yaml.replace("flows:\n", &format!("flows:\n{downstream}"));
    p.write("smelt.yaml", &yaml);
    p.write(
        "active.sql",
        "CREATE TABLE medallion_demo.product2__active (Id STRING NOT NULL, Name STRING, IsActive BOOL, PRIMARY KEY (Id))",
    );
    p.bronze_step1();
    p
}

fn active(p: &Project) -> Vec<String> {
    p.query("SELECT Id FROM medallion_demo.product2__active ORDER BY Id")
        .iter()
        .map(|r| r["Id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_downstream_flow_runs_after_its_upstream_and_reads_its_changes() {
    let p = project();
    let flows = p.flows(&["run"]);
    let order: Vec<&str> = flows.iter().map(|f| f["flow"].as_str().unwrap()).collect();
    assert_eq!(order, ["product2", "active"], "upstream first");
    let silver_active: Vec<String> = p
        .silver()
        .iter()
        .filter(|r| r["IsActive"] == true)
        .map(|r| r["Id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(active(&p), silver_active);
    assert_eq!(flows[1]["filtered"].as_i64(), Some(1), "{}", flows[1]);

    // Step 2 updates silver (an update and an insert): the downstream flow reads them
    // from silver's change feed.
    p.ok(&["sql", "-f", "insert_2.sql"]);
    let f = &p.flows(&["run"])[1];
    assert_eq!(f["mode"], "incremental", "{f}");
    assert!(
        f["ignored"].as_i64().unwrap() >= 1,
        "pre-images ignored: {f}"
    );
    assert_eq!(active(&p).len(), silver_active.len() + 1);

    // `smelt run active` runs only that flow: nothing new upstream of it.
    let out = p.ok(&["run", "active"]);
    assert!(
        out.contains("flow active") && !out.contains("flow product2"),
        "{out}"
    );
    assert!(out.contains("up to date"), "{out}");
}

#[test]
fn replay_windows_select_bronze_versions_by_commit_time() {
    let p = Project::product2();
    p.bronze_step1();
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "insert_2.sql"]);
    p.ok(&["run"]);
    let before = p.status();

    // Silver loses its rows; replaying every version since long ago brings them back.
    p.ok(&["sql", "TRUNCATE TABLE medallion_demo.product2__silver"]);
    assert!(p.silver().is_empty());
    let f = &p.flows(&["run", "--since", "2000-01-01", "--tz", "Asia/Tokyo"])[0];
    assert_eq!(f["mode"], "replay", "{f}");
    assert_eq!(f["from_version"].as_i64(), Some(-1), "{f}");
    assert_eq!(f["inserted"].as_i64(), Some(4), "{f}");
    assert_eq!(p.silver().len(), 4);
    assert_eq!(p.status()["watermark"], before["watermark"]);

    // Replaying again is a no-op (the guard); so is a window with no commits.
    let f = &p.flows(&["run", "--since", "1d"])[0];
    assert_eq!(
        (f["inserted"].as_i64(), f["updated"].as_i64()),
        (Some(0), Some(0)),
        "{f}"
    );
    let out = p.ok(&["run", "--since", "2000-01-01", "--until", "2000-01-02"]);
    assert!(out.contains("nothing to replay"), "{out}");

    let (_, err) = p.fails(
        &["run", "--since", "2001-01-01", "--until", "2000-01-01"],
        1,
    );
    insta::assert_snapshot!("until_before_since", err);
    let (_, err) = p.fails(&["run", "--since", "soon"], 2);
    insta::assert_snapshot!("since_does_not_parse", err);
}

/// A window asked of flows that cannot replay one (all but apply flows) is refused by name
/// before anything runs, never ignored.
#[test]
fn a_replay_window_is_refused_for_flows_that_cannot_replay() {
    let p = Project::example("append_active");
    p.ok(&["sql", "-f", "input.sql"]);
    let (_, err) = p.fails(&["run", "--since", "2000-01-01"], 2);
    insta::assert_snapshot!("replay_window_refused", err);
    assert!(!p.file("lake/foundry/output").exists(), "nothing ran");
}

#[test]
fn new_bronze_columns_are_reported_then_added_on_request() {
    let p = Project::product2();
    let ddl = std::fs::read_to_string(p.file("silver.sql")).unwrap();
    p.write(
        "silver.sql",
        &ddl.replace("`StockKeepingUnit` STRING,\n", ""),
    );
    p.bronze_step1();
    let f = &p.flows(&["run"])[0];
    assert_eq!(
        f["new_columns"],
        serde_json::json!(["StockKeepingUnit"]),
        "{f}"
    );
    assert!(p.silver()[0].get("StockKeepingUnit").is_none());

    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &format!("{yaml}      schema_evolution: add_new_columns\n"),
    );
    p.ok(&["sql", "-f", "insert_2.sql"]);
    // A plan sees the column to add and writes nothing.
    let f = &p.flows(&["plan"])[0];
    assert_eq!(
        f["columns_added"],
        serde_json::json!(["StockKeepingUnit"]),
        "{f}"
    );
    assert!(p.silver()[0].get("StockKeepingUnit").is_none());
    let f = &p.flows(&["run"])[0];
    assert_eq!(
        f["columns_added"],
        serde_json::json!(["StockKeepingUnit"]),
        "{f}"
    );
    let rows = p.silver();
    let sku = |id: &str| {
        rows.iter()
            .find(|r| r["Id"] == id)
            .unwrap()
            .get("StockKeepingUnit")
            .cloned()
            .unwrap_or(Value::Null)
    };
    // Rows written by this run carry the new column; older rows read it as NULL.
    assert_eq!(sku("01t000000000001AAA"), "SKU-PC-STD-001");
    assert_eq!(sku("01t000000000004AAA"), "SKU-SVC-PRM-001");
    assert_eq!(sku("01t000000000002AAA"), Value::Null);
    assert_eq!(rows.len(), 4);
    // The next run knows the column.
    let f = &p.flows(&["run", "--full-refresh"])[0];
    assert_eq!(f["new_columns"], serde_json::json!([]), "{f}");
    assert_eq!(p.silver().len(), 4);
}

#[test]
fn an_event_log_row_lost_to_a_crash_is_written_by_the_next_run() {
    let p = Project::product2();
    p.bronze_step1();
    let out = p.run_with_failpoint("before_event_log");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(p.silver().len(), 3, "silver is committed");
    assert!(!p.file("lake/_smelt/event_log").exists());

    let rows = |p: &Project| {
        p.query("SELECT flow, status, inserted FROM _smelt.event_log ORDER BY finished_at")
    };
    p.ok(&["run"]);
    let log = rows(&p);
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(
        (&log[0]["status"], &log[0]["inserted"]),
        (&Value::from("applied"), &Value::from(3)),
        "the crashed run's row, from its silver commit: {log:?}"
    );
    assert_eq!(log[1]["status"], "up_to_date");
    p.ok(&["run"]);
    assert_eq!(rows(&p).len(), 3, "written once");
}

#[test]
fn a_wider_ddl_type_rewrites_silver_on_request() {
    let p = Project::product2();
    p.write(
        "smelt.yaml",
        "lake: ./lake\nflows:\n  orders:\n    apply:\n      from: shop.orders__bronze\n      into: shop.orders\n      schema: orders.sql\n",
    );
    p.write(
        "orders.sql",
        "CREATE TABLE shop.orders (id STRING NOT NULL, qty INT, PRIMARY KEY (id))",
    );
    p.ok(&[
        "sql",
        "CREATE TABLE shop.orders__bronze (id STRING, qty STRING)",
    ]);
    p.ok(&[
        "sql",
        "INSERT INTO shop.orders__bronze VALUES ('a', '1'), ('b', '2147483647')",
    ]);
    p.ok(&["run"]);

    // The DDL now says BIGINT: refused with the option to use, until it is set.
    p.write(
        "orders.sql",
        "CREATE TABLE shop.orders (id STRING NOT NULL, qty BIGINT, PRIMARY KEY (id))",
    );
    p.ok(&[
        "sql",
        "INSERT INTO shop.orders__bronze VALUES ('c', '9999999999')",
    ]);
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("narrower_column_refused", common::pinned(&p, &err));
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write("smelt.yaml", &format!("{yaml}      widen_types: true\n"));
    let f = &p.flows(&["run"])[0];
    assert_eq!(
        (f["types_widened"].as_bool(), f["inserted"].as_i64()),
        (Some(true), Some(1)),
        "{f}"
    );
    let rows = p.query("SELECT id, qty, arrow_typeof(qty) AS t FROM shop.orders ORDER BY id");
    let got: Vec<(String, i64, String)> = rows
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["qty"].as_i64().unwrap(),
                r["t"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("a".into(), 1, "Int64".into()),
            ("b".into(), 2147483647, "Int64".into()),
            ("c".into(), 9999999999, "Int64".into())
        ]
    );
    // A type that is not wider stays an error.
    p.write(
        "orders.sql",
        "CREATE TABLE shop.orders (id STRING NOT NULL, qty INT, PRIMARY KEY (id))",
    );
    p.ok(&["sql", "INSERT INTO shop.orders__bronze VALUES ('d', '4')"]);
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("narrower_key_type_rebuild", pinned(&p, &err));
}

#[test]
fn a_truncate_in_bronze_empties_silver_for_good() {
    let p = Project::product2();
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &format!("{yaml}      apply_as_truncates: Name = 'TRUNCATE'\n"),
    );
    p.bronze_step1();
    p.ok(&["run"]);
    assert_eq!(p.silver().len(), 3);
    p.ok(&[
        "sql",
        "INSERT INTO medallion_demo.product2__bronze (Id, Name) VALUES ('-', 'TRUNCATE')",
    ]);
    let f = &p.flows(&["run"])[0];
    assert_eq!(
        (f["truncates"].as_i64(), f["truncated"].as_bool()),
        (Some(1), Some(true)),
        "{f}"
    );
    assert!(p.silver().is_empty());

    p.ok(&["sql", "-f", "insert_2.sql"]);
    p.ok(&["run"]);
    assert_eq!(p.silver().len(), 2, "only the changes after the truncate");
    // Replaying everything keeps the changes before the truncate out, across runs.
    let f = &p.flows(&["run", "--since", "2000-01-01"])[0];
    assert_eq!(
        (f["truncated"].as_bool(), f["inserted"].as_i64()),
        (Some(false), Some(0)),
        "{f}"
    );
    assert_eq!(p.silver().len(), 2);
}
