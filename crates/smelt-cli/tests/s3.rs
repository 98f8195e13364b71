//! Ingest from and export to a real S3-compatible server (moto, from `testenv/`, started on
//! a loopback port for each test): the same flows as on local folders, through the S3
//! protocol. Expected rows come from the files the test writes.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use arrow::array::AsArray;
use common::{Project, rows};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// moto's S3 server, killed on drop.
struct S3Server {
    child: Child,
    port: u16,
}

impl S3Server {
    /// Starts the server of `testenv/` (installed by `testenv/setup.sh`, which the
    /// README's test command runs) and creates bucket `bucket`.
    fn start(bucket: &str) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testenv");
        let python = root.join(".venv/bin/python");
        assert!(
            python.exists(),
            "the S3 test server is not installed: run `testenv/setup.sh` (the README's test command does)"
        );
        let mut child = Command::new(python)
            .arg(root.join("s3_server.py"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the S3 server said {line:?}"));
        let server = Self { child, port };
        // Buckets are created by a plain (unsigned) PUT.
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            tcp,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut status = String::new();
        BufReader::new(tcp).read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "creating the bucket: {status}");
        server
    }

    /// The environment `smelt` (and the test's client) reach the server with.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    fn store(&self, bucket: &str) -> Arc<AmazonS3> {
        let mut builder = AmazonS3Builder::new().with_bucket_name(bucket);
        for (k, v) in self.env() {
            builder = builder.with_config(k.to_lowercase().parse().unwrap(), v);
        }
        Arc::new(builder.build().unwrap())
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `smelt --json run` against the server; returns the flow reports.
fn run(p: &Project, s3: &S3Server) -> Vec<serde_json::Value> {
    let out = p
        .smelt()
        .args(["--json", "run"])
        .envs(s3.env())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "smelt run failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["flows"].as_array().unwrap().clone()
}

/// The `id`s of every visible exported Parquet file below `prefix`, sorted, and the names
/// of hidden files left there.
fn exported(store: &AmazonS3, prefix: &str) -> (Vec<String>, Vec<String>) {
    runtime().block_on(async {
        use futures::TryStreamExt;
        let listed: Vec<_> = store
            .list(Some(&ObjectPath::from(prefix)))
            .try_collect()
            .await
            .unwrap();
        let (mut ids, mut hidden) = (Vec::new(), Vec::new());
        for meta in listed {
            let name = meta.location.filename().unwrap().to_string();
            if name.starts_with('.') {
                hidden.push(name);
                continue;
            }
            if !name.ends_with(".parquet") {
                continue;
            }
            let bytes = store
                .get(&meta.location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)
                .unwrap()
                .build()
                .unwrap()
            {
                let batch = batch.unwrap();
                let id = batch.column_by_name("id").unwrap().as_string::<i32>();
                ids.extend(id.iter().map(|v| v.unwrap().to_string()));
            }
        }
        ids.sort();
        (ids, hidden)
    })
}

#[test]
fn ingest_from_s3_and_export_to_s3_exactly_once() {
    let s3 = S3Server::start("lake");
    let store = s3.store("lake");
    let put = |key: &str, text: &str| {
        runtime().block_on(async {
            store
                .put(&ObjectPath::from(key), PutPayload::from(text.to_string()))
                .await
                .unwrap();
        })
    };
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  items_raw:\n    ingest:\n      from: s3://lake/landing/*.csv\n      into: raw.items\n      format: csv\n  items_out:\n    export:\n      from: raw.items\n      to: s3://lake/exports/items\n",
    );
    put("landing/a.csv", "id,name\n1,apple\n2,pear\n");
    put("landing/_b.csv", "id,name\n9,hidden\n");
    let flows = run(&p, &s3);
    assert_eq!(flows[0]["files_read"], 1, "{flows:?}");
    assert_eq!(
        rows(
            &p,
            "SELECT id, name FROM raw.items ORDER BY id",
            &["id", "name"]
        ),
        [["1", "apple"], ["2", "pear"]]
    );
    let datasource = p.query("SELECT _datasource FROM raw.items WHERE id = '1'");
    assert_eq!(datasource[0]["_datasource"], "s3://lake/landing/a.csv");
    assert_eq!(
        exported(&store, "exports/items"),
        (vec!["1".into(), "2".into()], vec![])
    );

    // A new file: loaded once, exported once; a rerun does nothing.
    put("landing/c.csv", "id,name\n3,plum\n");
    let flows = run(&p, &s3);
    assert_eq!(
        (
            flows[0]["files_read"].as_i64(),
            flows[1]["rows_written"].as_i64()
        ),
        (Some(1), Some(1)),
        "{flows:?}"
    );
    let flows = run(&p, &s3);
    assert_eq!(
        (flows[0]["status"].as_str(), flows[1]["status"].as_str()),
        (Some("up_to_date"), Some("up_to_date"))
    );
    assert_eq!(
        exported(&store, "exports/items"),
        (vec!["1".into(), "2".into(), "3".into()], vec![])
    );
    // The export state is kept beside the exports, in the bucket: through bronze version
    // 1 (the two loads are versions 0 and 1).
    let state = runtime().block_on(async {
        use futures::TryStreamExt;
        let saves: Vec<_> = store
            .list(Some(&ObjectPath::from("exports/items/_smelt/items_out")))
            .try_collect()
            .await
            .unwrap();
        let last = saves.iter().map(|m| m.location.clone()).max().unwrap();
        store.get(&last).await.unwrap().bytes().await.unwrap()
    });
    let state: serde_json::Value = serde_json::from_slice(&state).unwrap();
    assert_eq!(state["version"], 1, "{state}");
}

/// Two runs of one export to S3 at once: the state is created only if absent (S3
/// `If-None-Match`), so one publishes and the other fails; each row is exported once.
#[test]
fn concurrent_exports_to_s3_publish_each_row_once() {
    let s3 = S3Server::start("out");
    let store = s3.store("out");
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  items_out:\n    export:\n      from: raw.items\n      to: s3://out/items\n",
    );
    p.ok(&[
        "sql",
        "CREATE TABLE raw.items (id STRING, name STRING) TBLPROPERTIES (delta.enableChangeDataFeed = true)",
    ]);
    p.ok(&[
        "sql",
        "INSERT INTO raw.items VALUES ('1', 'apple'), ('2', 'pear'), ('3', 'plum')",
    ]);
    let spawn = || p.piped(&["run"]).envs(s3.env()).spawn().unwrap();
    let (a, b) = (spawn(), spawn());
    let mut refused = 0;
    for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("another run of this export saved its state first"),
                "{stderr}"
            );
            refused += 1;
        }
    }
    run(&p, &s3);
    let (ids, _) = exported(&store, "items");
    assert_eq!(ids, ["1", "2", "3"], "{refused} run(s) refused");
}
