//! A real S3-compatible server (moto, from `testenv/`, started on a loopback port for each
//! test): the lake itself on S3, ingest from and export to S3, through the S3 protocol.
//! Expected rows come from the files the test writes, or from the same run on a local
//! lake.

use std::process::Child;
use std::sync::Arc;

use crate::common::{self, Project, rows, without_audit};
use arrow::array::AsArray;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use smelt_test::services::S3Server;

/// A client of bucket `bucket` of `s3`.
fn store(s3: &S3Server, bucket: &str) -> Arc<AmazonS3> {
    let mut builder = AmazonS3Builder::new().with_bucket_name(bucket);
    for (k, v) in s3.env() {
        builder = builder.with_config(k.to_lowercase().parse().unwrap(), v);
    }
    Arc::new(builder.build().unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `smelt --json run` against the server; returns the flow reports.
fn run(p: &Project, s3: &S3Server) -> Vec<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_str(&p.ok_with(&s3.env(), &["--json", "run"])).unwrap();
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
    let store = store(&s3, "lake");
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
    let store = store(&s3, "out");
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

impl Project {
    /// `smelt <args>` with the lake at `lake` on the server; requires success, returns
    /// stdout.
    fn on(&self, s3: &S3Server, lake: &str, args: &[&str]) -> String {
        self.ok_with(&s3.env(), &[&["--lake", lake], args].concat())
    }
}

/// The object names below `prefix` in `bucket`.
fn objects(store: &AmazonS3, prefix: &str) -> Vec<String> {
    runtime().block_on(async {
        use futures::TryStreamExt;
        let list: Vec<_> = store
            .list(Some(&ObjectPath::from(prefix)))
            .try_collect()
            .await
            .unwrap();
        list.into_iter().map(|m| m.location.to_string()).collect()
    })
}

#[test]
fn product2_with_the_lake_on_s3_gives_the_silver_of_a_local_lake() {
    let s3 = S3Server::start("lake");
    let lake = "s3://lake/warehouse";
    let remote = Project::product2();
    let local = Project::product2();
    let silver = "SELECT * FROM medallion_demo.product2__silver ORDER BY Id";
    for step in ["insert_1.sql", "insert_2.sql"] {
        if step == "insert_1.sql" {
            remote.on(&s3, lake, &["sql", "-f", "bronze.sql"]);
            local.ok(&["sql", "-f", "bronze.sql"]);
        }
        remote.on(&s3, lake, &["sql", "-f", step]);
        local.ok(&["sql", "-f", step]);
        let flows: serde_json::Value =
            serde_json::from_str(&remote.on(&s3, lake, &["--json", "run"])).unwrap();
        assert_eq!(flows["flows"][0]["status"], "applied", "{flows}");
        local.ok(&["run"]);
        let on_s3: Vec<serde_json::Value> =
            serde_json::from_str(&remote.on(&s3, lake, &["--json", "sql", silver])).unwrap();
        assert_eq!(
            without_audit(&on_s3),
            without_audit(&local.query(silver)),
            "after {step}"
        );
        assert!(!on_s3.is_empty());
    }
    // Nothing new: up to date, and status reads the watermark from S3.
    let again: serde_json::Value =
        serde_json::from_str(&remote.on(&s3, lake, &["--json", "run"])).unwrap();
    assert_eq!(again["flows"][0]["status"], "up_to_date", "{again}");
    let status = serde_json::Value::from(common::status_rows(&remote.on(
        &s3,
        lake,
        &["--json", "status"],
    )));
    assert_eq!(
        status[0]["watermark"], status[0]["bronze_version"],
        "{status}"
    );
    assert_eq!(status[0]["versions_behind"], 0, "{status}");

    // The pipeline's page reads the lake on S3: the runs and rows the local lake's shows.
    let docs: serde_json::Value =
        serde_json::from_str(&remote.on(&s3, lake, &["--json", "docs"])).unwrap();
    let local_docs: serde_json::Value =
        serde_json::from_str(&local.ok(&["--json", "docs"])).unwrap();
    assert_eq!(
        docs["flows"][0]["runs"].as_array().unwrap().len(),
        3,
        "{docs}"
    );
    assert_eq!(
        docs["tables"][1]["rows"], local_docs["tables"][1]["rows"],
        "{docs}"
    );
    assert_eq!(docs["tables"][1]["rows"], 4, "{docs}");
    let location = docs["tables"][1]["location"].as_str().unwrap();
    assert!(location.starts_with("s3://lake/warehouse/"), "{location}");

    // Everything is in the bucket, the event log included; nothing on local disk.
    let names = objects(&store(&s3, "lake"), "warehouse");
    for table in [
        "medallion_demo/product2__bronze/_delta_log/",
        "medallion_demo/product2__silver/_delta_log/",
        "_smelt/event_log/_delta_log/",
    ] {
        assert!(
            names.iter().any(|n| n.contains(table)),
            "no {table} in {names:?}"
        );
    }
    assert!(!remote.path().join("lake").exists());
    // The conditional-write probes leave nothing behind.
    assert!(
        !names.iter().any(|n| n.contains("_smelt/probe/")),
        "{names:?}"
    );
}

#[test]
fn a_store_that_ignores_conditional_writes_is_refused_before_anything_is_written() {
    let s3 = S3Server::start_with("lake", &["--ignore-conditions"]);
    let p = Project::product2();
    let out = p
        .smelt()
        .args(["--lake", "s3://lake/warehouse", "sql", "-f", "bronze.sql"])
        .envs(s3.env())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ignores conditional writes"), "{err}");
    assert!(err.contains("AWS_S3_LOCKING_PROVIDER=dynamodb"), "{err}");
    let left: Vec<String> = objects(&store(&s3, "lake"), "warehouse");
    assert!(left.is_empty(), "{left:?}");
}

/// `smelt --lake <lake> <args>` on the server, started and left running, output piped.
fn spawn_on(p: &Project, s3: &S3Server, lake: &str, args: &[&str]) -> Child {
    let mut all = vec!["--lake", lake];
    all.extend_from_slice(args);
    p.piped(&all).envs(s3.env()).spawn().unwrap()
}

#[test]
fn concurrent_runs_on_s3_never_apply_twice() {
    let s3 = S3Server::start("lake");
    let lake = "s3://lake/warehouse";
    let p = Project::product2();
    let reference = Project::product2();
    let silver = "SELECT * FROM medallion_demo.product2__silver ORDER BY Id";
    let mut refused = 0;
    for (i, step) in ["insert_1.sql", "insert_2.sql"].iter().enumerate() {
        if i == 0 {
            p.on(&s3, lake, &["sql", "-f", "bronze.sql"]);
            reference.ok(&["sql", "-f", "bronze.sql"]);
        }
        p.on(&s3, lake, &["sql", "-f", step]);
        reference.ok(&["sql", "-f", step]);
        reference.ok(&["run"]);
        let (a, b) = (
            spawn_on(&p, &s3, lake, &["run"]),
            spawn_on(&p, &s3, lake, &["run"]),
        );
        for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
            if common::refused_by_a_race(&out) {
                refused += 1;
            }
        }
        p.on(&s3, lake, &["run"]);
        let on_s3: Vec<serde_json::Value> =
            serde_json::from_str(&p.on(&s3, lake, &["--json", "sql", silver])).unwrap();
        assert_eq!(
            without_audit(&on_s3),
            without_audit(&reference.query(silver)),
            "after {step}"
        );
    }
    // And a race by construction: a run held at its commit while another commits; the
    // store's conditional put refuses the held one.
    let change = "INSERT INTO medallion_demo.product2__bronze (Id, Name) VALUES \
                  ('01t000000000099AAA', 'raced')";
    p.write("raced.sql", change);
    reference.write("raced.sql", change);
    p.on(&s3, lake, &["sql", "-f", "raced.sql"]);
    reference.ok(&["sql", "-f", "raced.sql"]);
    reference.ok(&["run"]);
    let held = p.held_at_with(&s3.env(), "before_silver_commit", &["--lake", lake, "run"]);
    p.on(&s3, lake, &["run"]);
    assert!(common::refused_by_a_race(&held.release()));
    refused += 1;
    let on_s3: Vec<serde_json::Value> =
        serde_json::from_str(&p.on(&s3, lake, &["--json", "sql", silver])).unwrap();
    assert_eq!(
        without_audit(&on_s3),
        without_audit(&reference.query(silver))
    );
    eprintln!("{refused} run(s) refused");
}

#[test]
fn runs_on_s3_killed_with_sigkill_rerun_to_the_uninterrupted_silver() {
    let s3 = S3Server::start("lake");
    let lake = "s3://lake/warehouse";
    let killed = Project::product2();
    let reference = Project::product2();
    let silver = "SELECT * FROM medallion_demo.product2__silver ORDER BY Id";
    let mut kills = Vec::new();
    // A fixed spread of delays, as fractions of an uninterrupted run.
    let fractions = [0.1, 0.3, 0.5, 0.7, 0.9, 1.05];
    for (i, step) in ["insert_1.sql", "insert_2.sql"].iter().enumerate() {
        if i == 0 {
            killed.on(&s3, lake, &["sql", "-f", "bronze.sql"]);
            reference.ok(&["sql", "-f", "bronze.sql"]);
        }
        killed.on(&s3, lake, &["sql", "-f", step]);
        reference.ok(&["sql", "-f", step]);
        reference.ok(&["run"]);
        // About how long a run on S3 takes here: a plan reads what a run reads; twice that
        // for the writes.
        let started = std::time::Instant::now();
        killed.on(&s3, lake, &["plan"]);
        let typical = started.elapsed() * 2;
        for f in fractions {
            let delay = typical.mul_f64(f);
            let mut child = spawn_on(&killed, &s3, lake, &["run"]);
            std::thread::sleep(delay);
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            let signal = common::signal_of(&out.status);
            assert!(
                signal == Some(9) || out.status.success(),
                "a run killed after {delay:?} ended with {:?}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            kills.push((i + 1, delay, signal == Some(9)));
        }
        killed.on(&s3, lake, &["run"]);
        let on_s3: Vec<serde_json::Value> =
            serde_json::from_str(&killed.on(&s3, lake, &["--json", "sql", silver])).unwrap();
        assert_eq!(
            without_audit(&on_s3),
            without_audit(&reference.query(silver)),
            "after {step} and SIGKILLs {kills:?}"
        );
    }
    assert!(
        kills.iter().any(|(_, _, k)| *k),
        "no run was killed before it finished: {kills:?}"
    );
    // The event log holds each applied run once: no row of a killed run that did not commit.
    let log: Vec<serde_json::Value> = serde_json::from_str(&killed.on(
        &s3,
        lake,
        &[
            "--json",
            "sql",
            "SELECT to_version, count(*) AS n FROM _smelt.event_log WHERE status = 'applied' GROUP BY to_version",
        ],
    ))
    .unwrap();
    for row in &log {
        assert_eq!(row["n"], 1, "{log:?}");
    }
}

#[test]
fn a_table_placed_on_s3_by_the_tables_map_is_read_and_written_there() {
    let s3 = S3Server::start("other");
    let placed = Project::product2();
    let plain = Project::product2();
    let yaml = std::fs::read_to_string(placed.file("smelt.yaml")).unwrap();
    placed.write(
        "smelt.yaml",
        &format!(
            "{yaml}\ntables:\n  medallion_demo.product2__bronze: s3://other/bronze/product2\n"
        ),
    );
    let silver = "SELECT * FROM medallion_demo.product2__silver ORDER BY Id";
    for step in ["bronze.sql", "insert_1.sql", "insert_2.sql"] {
        for p in [&placed, &plain] {
            let out = p
                .smelt()
                .args(["sql", "-f", step])
                .envs(s3.env())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            if step != "bronze.sql" {
                let out = p.smelt().args(["run"]).envs(s3.env()).output().unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        let query = |p: &Project| -> Vec<serde_json::Value> {
            let out = p
                .smelt()
                .args(["--json", "sql", silver])
                .envs(s3.env())
                .output()
                .unwrap();
            if step == "bronze.sql" {
                return Vec::new();
            }
            serde_json::from_slice(&out.stdout).unwrap()
        };
        assert_eq!(
            without_audit(&query(&placed)),
            without_audit(&query(&plain)),
            "after {step}"
        );
    }
    // Bronze is in the bucket, silver in the local lake, and no bronze in the lake.
    let names = objects(&store(&s3, "other"), "bronze/product2/_delta_log");
    assert!(!names.is_empty());
    let lake = placed.path().join("lake/medallion_demo");
    assert!(lake.join("product2__silver/_delta_log").is_dir());
    assert!(!lake.join("product2__bronze").exists());
}

/// Catalog properties pyiceberg reaches the server with.
fn pyiceberg_s3(s3: &S3Server) -> Vec<(&'static str, String)> {
    vec![
        ("s3.endpoint", format!("http://127.0.0.1:{}", s3.port)),
        ("s3.access-key-id", "test".into()),
        ("s3.secret-access-key", "test".into()),
        ("s3.region", "us-east-1".into()),
    ]
}

#[test]
fn iceberg_tables_with_their_warehouse_on_s3() {
    let s3 = S3Server::start("ice");
    let p = Project::with_pipeline(
        "lake: ./lake
catalogs:
  ice:
    type: sql
    uri: sqlite:catalog.db
    warehouse: s3://ice/warehouse
flows:
  active:
    append:
      from: ice.foundry.input
      into: ice.foundry.output
      where: status = 'active'
",
    );
    let props = pyiceberg_s3(&s3);
    let ice =
        |steps: &[serde_json::Value]| common::pyiceberg(&p, "s3://ice/warehouse", &props, steps);
    let row = |id: &str, status: &str| serde_json::json!({"id": id, "status": status});
    ice(&[
        serde_json::json!({"create": "foundry.input", "columns": ["id", "status"]}),
        serde_json::json!({"append": "foundry.input", "rows": [row("1", "active"), row("2", "inactive")]}),
    ]);
    p.ok_with(&s3.env(), &["run"]);
    ice(&[serde_json::json!({"append": "foundry.input", "rows": [row("3", "active")]})]);
    p.ok_with(&s3.env(), &["run"]);
    let scanned = &ice(&[serde_json::json!({"scan": "foundry.output"})])[0]["rows"];
    let ids: Vec<String> = scanned
        .as_array()
        .unwrap()
        .iter()
        .map(|r| common::text(&r["id"]))
        .collect();
    assert_eq!(ids, ["1", "3"]);
    // The output's files are in the bucket, nothing of it on local disk.
    let store = store(&s3, "ice");
    let listed: Vec<_> = runtime().block_on(async {
        use futures::TryStreamExt;
        store
            .list(Some(&ObjectPath::from("warehouse/foundry/output/data")))
            .try_collect()
            .await
            .unwrap()
    });
    assert!(!listed.is_empty(), "data files in the bucket");
    assert!(!p.file("warehouse").exists());
}
