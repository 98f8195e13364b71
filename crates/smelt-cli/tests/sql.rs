//! `smelt sql`: the seed scripts' DDL and DML, and queries over the lake.

mod common;

use common::Project;

#[test]
fn spark_ddl_insert_select_truncate_and_queries() {
    let p = Project::product2();
    let out = p.ok(&[
        "sql",
        "CREATE TABLE raw.events (id BIGINT NOT NULL, name STRING, amount DECIMAL(12,2), at TIMESTAMP) TBLPROPERTIES (delta.enableChangeDataFeed = true);
         INSERT INTO raw.events VALUES (1, 'a', 1.5, TIMESTAMP '2026-07-01 09:00:00'), (2, 'b', NULL, NULL);
         CREATE TABLE raw.copy (id BIGINT, name STRING);
         INSERT INTO raw.copy (id, name) SELECT id, upper(name) FROM raw.events WHERE id > 1;",
    ]);
    assert!(
        out.contains("created table raw.events (4 columns, change feed on)"),
        "{out}"
    );
    assert!(out.contains("inserted 2 rows into raw.events"), "{out}");
    assert!(out.contains("inserted 1 rows into raw.copy"), "{out}");
    let rows = p.query("SELECT id, name FROM raw.copy");
    assert_eq!(rows, vec![serde_json::json!({"id": 2, "name": "B"})]);
    let text = p.ok(&["sql", "SELECT id, amount FROM raw.events ORDER BY id"]);
    assert!(text.contains("| 1  | 1.50   |"), "{text}");
    assert!(text.contains("(2 rows)"), "{text}");

    p.ok(&["sql", "TRUNCATE TABLE raw.events"]);
    assert!(p.query("SELECT * FROM raw.events").is_empty());

    let (_, err) = p.fails(&["sql", "CREATE TABLE raw.copy (id BIGINT)"], 1);
    assert!(err.contains("table `raw.copy` already exists"), "{err}");
    assert!(err.contains("hint: use CREATE OR REPLACE TABLE"), "{err}");
    p.ok(&[
        "sql",
        "CREATE OR REPLACE TABLE raw.copy (id BIGINT, extra STRING)",
    ]);
    assert!(p.query("SELECT * FROM raw.copy").is_empty());
}

#[test]
fn a_failing_statement_names_its_number_and_keeps_earlier_ones() {
    let p = Project::product2();
    let (out, err) = p.fails(
        &[
            "sql",
            "CREATE TABLE a.t (x STRING); INSERT INTO a.missing VALUES ('x')",
        ],
        1,
    );
    assert!(out.contains("created table a.t"), "{out}");
    assert!(
        err.contains("statement 2: table `a.missing` does not exist"),
        "{err}"
    );
    assert!(
        err.contains("statements 1..1 ran and stay committed"),
        "{err}"
    );
}

#[test]
fn a_catalog_table_is_refused_by_name() {
    let p = Project::product2();
    let (_, err) = p.fails(&["sql", "SELECT * FROM ice.raw.orders"], 1);
    assert!(
        err.contains("statement 1: `ice.raw.orders` names a table of a catalog"),
        "{err}"
    );
    assert!(err.contains("pyiceberg, Spark or Trino"), "{err}");
}
