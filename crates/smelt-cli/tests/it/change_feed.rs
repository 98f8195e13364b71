//! A change feed only where one is wanted: a Delta table smelt creates keeps one when its
//! DDL asks for it or a flow of the pipeline reads it, and no other (its commits then
//! write no change data); a table a flow starts reading gets one in its next commit. The
//! expectations come from the Delta log itself, read here as JSON.

use serde_json::Value;

use crate::common::{Project, text};
use crate::derived_change_data::log as commits;
use crate::merge_on_read::{of_kind, sql_rows};

/// Whether a table's latest metadata turns its change feed on.
fn feed_on(p: &Project, table: &str) -> bool {
    let commits = commits(p, table);
    let metadata = commits
        .iter()
        .rev()
        .find_map(|c| of_kind(c, "metaData").first().copied().cloned())
        .unwrap();
    metadata["configuration"]["delta.enableChangeDataFeed"] == "true"
}

/// The protocol a table's log holds last.
fn protocol(p: &Project, table: &str) -> Value {
    commits(p, table)
        .iter()
        .rev()
        .find_map(|c| of_kind(c, "protocol").first().copied().cloned())
        .unwrap()
}

const SILVER: &str = "(id STRING NOT NULL, status STRING)";

#[test]
fn a_table_keeps_a_change_feed_when_its_ddl_asks_or_a_flow_reads_it() {
    let p = Project::with_pipeline(
        "lake: ./lake
flows:
  plain:
    apply:
      from: raw.orders
      into: silver.plain
      schema: plain.sql
      keys: [id]
  asked:
    apply:
      from: raw.orders
      into: silver.asked
      schema: asked.sql
      keys: [id]
  read:
    apply:
      from: raw.orders
      into: silver.read
      schema: read.sql
      keys: [id]
  refused:
    apply:
      from: raw.orders
      into: silver.refused
      schema: refused.sql
      keys: [id]
  gold:
    apply:
      from: silver.read
      into: gold.orders
      schema: gold.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
",
    );
    p.write("plain.sql", &format!("CREATE TABLE silver.plain {SILVER}"));
    p.write(
        "asked.sql",
        &format!("CREATE TABLE silver.asked {SILVER} OPTIONS (enable_change_history = TRUE)"),
    );
    p.write("read.sql", &format!("CREATE TABLE silver.read {SILVER}"));
    p.write(
        "refused.sql",
        &format!(
            "CREATE TABLE silver.refused {SILVER} TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')"
        ),
    );
    p.write("gold.sql", &format!("CREATE TABLE gold.orders {SILVER}"));
    p.ok(&["sql", "CREATE TABLE raw.orders (id STRING, status STRING)"]);
    p.ok(&[
        "sql",
        "INSERT INTO raw.orders VALUES ('1', 'new'), ('2', 'new')",
    ]);

    // `smelt validate` says which feed each table gets, and why.
    insta::assert_snapshot!("validate_change_feeds", p.ok(&["validate"]));
    let json: Value = serde_json::from_str(&p.ok(&["--json", "validate"])).unwrap();
    let feeds = json["change_feeds"].as_array().unwrap();
    let on: Vec<(String, bool)> = feeds
        .iter()
        .map(|f| (text(&f["table"]), f["on"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        on,
        [
            ("silver.plain".to_string(), false),
            ("silver.asked".to_string(), true),
            ("silver.read".to_string(), true),
            ("silver.refused".to_string(), false),
            ("gold.orders".to_string(), false),
        ]
    );

    p.ok(&["run"]);
    for (table, on) in &on {
        assert_eq!(feed_on(&p, table), *on, "{table}");
    }
    p.ok(&[
        "sql",
        "INSERT INTO raw.orders VALUES ('1', 'paid'), ('3', 'new')",
    ]);
    p.ok(&["run"]);
    // An update: change data where there is a feed, none elsewhere.
    for (table, on) in &on {
        let commits = commits(&p, table);
        let last = commits.last().unwrap();
        assert!(
            !of_kind(last, "remove").is_empty(),
            "{table} rewrote a file"
        );
        assert_eq!(!of_kind(last, "cdc").is_empty(), *on, "{table}: {last:?}");
    }
    assert_eq!(
        sql_rows(&p, "gold.orders"),
        [["1", "paid"], ["2", "new"], ["3", "new"]]
    );
}

#[test]
fn a_table_a_new_flow_reads_gets_its_change_feed_in_the_next_commit() {
    for write_mode in ["copy_on_write", "merge_on_read"] {
        feed_turned_on_by_the_run(write_mode);
    }
}

fn feed_turned_on_by_the_run(write_mode: &str) {
    let silver = format!(
        "lake: ./lake
flows:
  orders:
    apply:
      from: raw.orders
      into: silver.orders
      schema: orders.sql
      keys: [id]
      write_mode: {write_mode}
"
    );
    let p = Project::with_pipeline(&silver);
    p.write(
        "orders.sql",
        &format!("CREATE TABLE silver.orders {SILVER}"),
    );
    p.write("gold.sql", &format!("CREATE TABLE gold.orders {SILVER}"));
    p.ok(&["sql", "CREATE TABLE raw.orders (id STRING, status STRING)"]);
    p.ok(&[
        "sql",
        "INSERT INTO raw.orders VALUES ('1', 'new'), ('2', 'new')",
    ]);
    p.ok(&["run"]);
    assert!(!feed_on(&p, "silver.orders"), "{write_mode}");
    p.ok(&["sql", "INSERT INTO raw.orders VALUES ('2', 'paid')"]);
    p.ok(&["run"]);
    let before = protocol(&p, "silver.orders");

    // A flow that reads silver joins the pipeline: its first run reads silver whole; the
    // silver commit after it turns the feed on and writes change data already.
    p.write(
        "smelt.yaml",
        &format!(
            "{silver}  gold:
    apply:
      from: silver.orders
      into: gold.orders
      schema: gold.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
      source_deletes: apply
"
        ),
    );
    p.ok(&["run", "gold"]);
    p.ok(&[
        "sql",
        "INSERT INTO raw.orders VALUES ('1', 'paid'), ('3', 'new')",
    ]);
    p.ok(&["run"]);
    assert!(feed_on(&p, "silver.orders"), "{write_mode}");
    let commits = commits(&p, "silver.orders");
    let turned_on = commits.last().unwrap();
    assert!(!of_kind(turned_on, "cdc").is_empty(), "{turned_on:?}");
    let after = protocol(&p, "silver.orders");
    assert_ne!(after, before, "{write_mode}");
    let writer = after["minWriterVersion"].as_i64().unwrap();
    let has_feature = after["writerFeatures"]
        .as_array()
        .is_some_and(|f| f.contains(&"changeDataFeed".into()));
    assert!((4..7).contains(&writer) || has_feature, "{after}");
    if write_mode == "merge_on_read" {
        assert!(
            after["readerFeatures"]
                .as_array()
                .unwrap()
                .contains(&"deletionVectors".into()),
            "{after}"
        );
    }
    // The next run reads the commit that turned it on; a delete after it too.
    p.ok(&["sql", "INSERT INTO raw.orders VALUES ('4', 'new')"]);
    p.ok(&["run"]);
    let gold = sql_rows(&p, "gold.orders");
    assert_eq!(gold, sql_rows(&p, "silver.orders"), "{write_mode}");
    assert_eq!(gold.len(), 4);
    assert_eq!(gold[0], ["1", "paid"]);
}
