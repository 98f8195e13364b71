//! Merge-on-read Delta silver (`write_mode: merge_on_read`): replaced and deleted rows
//! marked in deletion vectors. The expected rows are a model the test keeps; the
//! merge-on-read silver is read by an independent deletion-vector-aware reader (delta-rs'
//! kernel's own scan, used only here), by `smelt sql`, and by a downstream flow, and the
//! log is checked against the Delta protocol's rules for deletion vectors.

use std::collections::BTreeMap;

use crate::common::{self, Project, pinned, text};
use arrow::array::Array;
use arrow::util::display::array_value_to_string;
use serde_json::Value;

/// Two silvers of the same changes, copy-on-write and merge-on-read, ordered by
/// `sequence_by`, and a gold table from the merge-on-read one's change feed.
fn pipeline(sequence_by: &str) -> String {
    PIPELINE.replace("[seq]", &format!("[{sequence_by}]"))
}

const PIPELINE: &str = "lake: ./lake
flows:
  cow:
    apply:
      from: raw.orders
      into: silver.cow
      schema: cow.sql
      keys: [id]
      sequence_by: [seq]
      apply_as_deletes: status = 'deleted'
  mor:
    apply:
      from: raw.orders
      into: silver.mor
      schema: mor.sql
      keys: [id]
      sequence_by: [seq]
      apply_as_deletes: status = 'deleted'
      write_mode: merge_on_read
  gold:
    apply:
      from: silver.mor
      into: gold.orders
      schema: orders.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
      source_deletes: apply
";

/// `columns` of every row of a Delta table as delta-rs' kernel scans it (deletion vectors
/// applied by the kernel, not smelt), as text, sorted.
pub(crate) fn kernel_rows(p: &Project, table: &str, columns: &[&str]) -> Vec<Vec<String>> {
    let dir = p.file(&format!("lake/{}", table.replace('.', "/")));
    let mut rows = Vec::new();
    for batch in smelt_bench::kernel::scan(&dir).unwrap() {
        let cols: Vec<_> = columns
            .iter()
            .map(|c| batch.column_by_name(c).unwrap().clone())
            .collect();
        for i in 0..batch.num_rows() {
            rows.push(
                cols.iter()
                    .map(|c| {
                        if c.is_null(i) {
                            "NULL".to_string()
                        } else {
                            array_value_to_string(c, i).unwrap()
                        }
                    })
                    .collect(),
            );
        }
    }
    rows.sort();
    rows
}

/// Writes `<name>.sql` creating each table (`schema.name`): `id` and `columns`.
pub(crate) fn schemas(p: &Project, tables: &[&str], columns: &str) {
    for table in tables {
        let file = table.split('.').nth(1).unwrap();
        p.write(
            &format!("{file}.sql"),
            &format!("CREATE TABLE {table} (id STRING NOT NULL, {columns})"),
        );
    }
}

/// A table's `(id, status)` rows through `smelt sql`.
pub(crate) fn sql_rows(p: &Project, table: &str) -> Vec<Vec<String>> {
    p.query(&format!("SELECT id, status FROM {table} ORDER BY id"))
        .iter()
        .map(|r| vec![text(&r["id"]), text(&r["status"])])
        .collect()
}

/// Every change data row a table's commits wrote (the files its log names: a killed run
/// leaves others behind), as JSON text, sorted.
pub(crate) fn change_data(p: &Project, table: &str) -> Vec<String> {
    let dir = p.file(&format!("lake/{}", table.replace('.', "/")));
    let mut files = Vec::new();
    for commit in std::fs::read_dir(dir.join("_delta_log")).unwrap().flatten() {
        if commit.path().extension().is_some_and(|e| e == "json") {
            for line in std::fs::read_to_string(commit.path()).unwrap().lines() {
                let action: Value = serde_json::from_str(line).unwrap();
                if let Some(cdc) = action.get("cdc") {
                    files.push(dir.join(text(&cdc["path"])));
                }
            }
        }
    }
    let mut out = Vec::new();
    for file in files {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&file).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        for batch in reader {
            let mut buf = Vec::new();
            let mut writer = arrow::json::writer::WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, arrow::json::writer::LineDelimited>(&mut buf);
            writer.write(&batch.unwrap()).unwrap();
            writer.finish().unwrap();
            for line in String::from_utf8(buf).unwrap().lines() {
                out.push(serde_json::from_str::<Value>(line).unwrap().to_string());
            }
        }
    }
    out.sort();
    out
}

/// The actions of a table's latest commit.
pub(crate) fn last_commit(p: &Project, table: &str) -> Vec<Value> {
    let log = p.file(&format!("lake/{}/_delta_log", table.replace('.', "/")));
    let mut commits: Vec<_> = std::fs::read_dir(&log)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    std::fs::read_to_string(commits.last().unwrap())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The actions of one kind (`add`, `remove`, `cdc`, `protocol`, …) among `actions`.
pub(crate) fn of_kind<'a>(actions: &'a [Value], kind: &str) -> Vec<&'a Value> {
    actions.iter().filter_map(|a| a.get(kind)).collect()
}

#[test]
fn merge_on_read_silver_marks_rows_in_deletion_vectors_and_reads_as_copy_on_write_does() {
    // The guard asks for no ingest time; the lookup reads it anyway, for the pre-images.
    marks_rows_and_reads_as_copy_on_write_does("seq");
}

#[test]
fn sequenced_by_commit_time_merge_on_read_reads_as_copy_on_write_does() {
    // The guard asks for every column itself (the ingest time is the sequence).
    marks_rows_and_reads_as_copy_on_write_does("_commit_timestamp");
}

fn marks_rows_and_reads_as_copy_on_write_does(sequence_by: &str) {
    let p = Project::with_pipeline(&pipeline(sequence_by));
    schemas(
        &p,
        &["silver.cow", "silver.mor", "gold.orders"],
        "status STRING, seq STRING",
    );
    // Nothing reads the copy-on-write silver: its DDL asks for the feed compared below.
    p.write(
        "cow.sql",
        "CREATE TABLE silver.cow (id STRING NOT NULL, status STRING, seq STRING) OPTIONS (enable_change_history = TRUE)",
    );
    p.ok(&[
        "sql",
        "CREATE TABLE raw.orders (id STRING, status STRING, seq STRING)",
    ]);
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut seq = 0;
    let mut step = |p: &Project, rows: &[(&str, &str)]| {
        let values: Vec<String> = rows
            .iter()
            .map(|(id, status)| {
                seq += 1;
                format!("('{id}', '{status}', '{seq:03}')")
            })
            .collect();
        p.ok(&[
            "sql",
            &format!("INSERT INTO raw.orders VALUES {}", values.join(", ")),
        ]);
        for (id, status) in rows {
            if *status == "deleted" {
                model.remove(*id);
            } else {
                model.insert(id.to_string(), status.to_string());
            }
        }
        model.clone()
    };
    // Every reader agrees with the model: the kernel's scan and `smelt sql` of the
    // merge-on-read silver, the copy-on-write silver, the downstream table.
    let check = |p: &Project, model: &BTreeMap<String, String>| {
        let expected: Vec<Vec<String>> = model
            .iter()
            .map(|(k, v)| vec![k.clone(), v.clone()])
            .collect();
        assert_eq!(
            kernel_rows(p, "silver.mor", &["id", "status"]),
            expected,
            "kernel"
        );
        assert_eq!(sql_rows(p, "silver.mor"), expected, "smelt sql, mor");
        assert_eq!(sql_rows(p, "silver.cow"), expected, "smelt sql, cow");
        assert_eq!(sql_rows(p, "gold.orders"), expected, "gold");
        // The same change feed: pre-images of marked rows are whole, as a rewrite's are.
        assert_eq!(
            change_data(p, "silver.mor"),
            change_data(p, "silver.cow"),
            "change data"
        );
    };
    let run = |p: &Project| {
        let flows = p.flows(&["run"]);
        let counts = |flow: &str| {
            let r = flows.iter().find(|f| f["flow"] == flow).unwrap();
            ["inserted", "updated", "deleted", "stale", "unchanged"].map(|k| r[k].clone())
        };
        assert_eq!(counts("cow"), counts("mor"), "{flows:?}");
        flows
    };

    let m = step(
        &p,
        &[("1", "new"), ("2", "new"), ("3", "new"), ("5", "new")],
    );
    run(&p);
    check(&p, &m);
    let first = last_commit(&p, "silver.mor");
    let protocol = of_kind(&first, "protocol")[0];
    assert_eq!(protocol["minReaderVersion"], 3, "{protocol}");
    assert_eq!(protocol["minWriterVersion"], 7, "{protocol}");
    assert!(
        protocol["readerFeatures"]
            .as_array()
            .unwrap()
            .contains(&"deletionVectors".into()),
        "{protocol}"
    );
    let stored = of_kind(&first, "add")[0]["path"].clone();

    // An update of 1 and a delete of 2: both rows marked in the first file's vector, which
    // is removed and added again with it; no data file rewritten. Killed before the silver
    // commit first: the rerun finishes it once.
    let m = step(&p, &[("1", "paid"), ("2", "deleted"), ("4", "new")]);
    let out = p.abort_at("before_silver_commit", &["run", "mor"]);
    assert_eq!(common::signal_of(&out.status), Some(6), "aborted: {out:?}");
    let flows = run(&p);
    check(&p, &m);
    // The report counts the file marked, not rewritten, and the vector's bytes written.
    let mor = flows.iter().find(|f| f["flow"] == "mor").unwrap();
    let cow = flows.iter().find(|f| f["flow"] == "cow").unwrap();
    assert_eq!(
        [
            &mor["files_marked"],
            &mor["files_removed"],
            &mor["files_written"]
        ],
        [1, 0, 1],
        "{mor}"
    );
    assert_eq!(
        [&cow["files_marked"], &cow["files_removed"]],
        [0, 1],
        "{cow}"
    );
    let mor_bytes = mor["bytes_written"].as_u64().unwrap();
    assert!(
        mor_bytes < cow["bytes_written"].as_u64().unwrap(),
        "{mor} {cow}"
    );
    let commit = last_commit(&p, "silver.mor");
    let removes = of_kind(&commit, "remove");
    assert_eq!(removes.len(), 1, "{commit:?}");
    assert_eq!(removes[0]["path"], stored);
    let again: Vec<_> = of_kind(&commit, "add")
        .into_iter()
        .filter(|a| a["path"] == stored)
        .collect();
    assert_eq!(again.len(), 1, "the file is added again: {commit:?}");
    let dv = &again[0]["deletionVector"];
    assert_eq!(dv["storageType"], "u", "{dv}");
    assert_eq!(dv["cardinality"], 2, "{dv}");
    let stats: Value = serde_json::from_str(again[0]["stats"].as_str().unwrap()).unwrap();
    assert_eq!(stats["numRecords"], 4);
    assert_eq!(stats["tightBounds"], false);
    // The pre-images and the insert as change data, for downstream readers.
    assert!(!of_kind(&commit, "cdc").is_empty(), "{commit:?}");
    // The share marked deleted: 2 of the 6 rows stored (4 in the first file, 2 new).
    let status = common::status_rows(&p.ok(&["--json", "status"]));
    let of = |flow: &str| status.iter().find(|s| s["flow"] == flow).unwrap().clone();
    assert_eq!(of("mor")["write_mode"], "merge_on_read");
    assert_eq!(of("mor")["deleted_fraction"], 2.0 / 6.0);
    let second = of_kind(&commit, "add")
        .into_iter()
        .find(|a| a["path"] != stored && a["deletionVector"].is_null())
        .unwrap()["path"]
        .clone();
    assert_eq!(of("cow")["deleted_fraction"], 0.0);

    // 1 again (its old row is marked already: the second file's row is marked now), 3
    // deleted (the first file's new vector holds its old rows and this one), 2 back.
    let m = step(&p, &[("3", "deleted"), ("2", "new"), ("1", "shipped")]);
    run(&p);
    check(&p, &m);
    let commit = last_commit(&p, "silver.mor");
    let vector = |path: &Value| -> Value {
        let adds = of_kind(&commit, "add");
        let add = adds.iter().find(|a| &a["path"] == path);
        add.map(|a| a["deletionVector"]["cardinality"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(vector(&stored), 3, "{commit:?}");
    assert_eq!(vector(&second), 1, "{commit:?}");

    // 4 deleted: the second file's other row went in the last run, so the file is removed
    // whole (not added again with a vector of every row).
    let m = step(&p, &[("4", "deleted")]);
    run(&p);
    check(&p, &m);
    let commit = last_commit(&p, "silver.mor");
    assert!(
        of_kind(&commit, "remove")
            .iter()
            .any(|r| r["path"] == second),
        "{commit:?}"
    );
    assert!(
        !of_kind(&commit, "add").iter().any(|a| a["path"] == second),
        "{commit:?}"
    );

    // A rebuild replaces every file: no vector is left.
    p.ok(&["run", "--full-refresh"]);
    check(&p, &m);
    let status = common::status_rows(&p.ok(&["--json", "status"]));
    let mor = status.iter().find(|s| s["flow"] == "mor").unwrap();
    assert_eq!(mor["deleted_fraction"], 0.0, "{mor}");
}

#[test]
fn a_copy_on_write_silver_switched_to_merge_on_read_gets_deletion_vectors_in_the_run_commit() {
    let p = Project::with_pipeline(
        "lake: ./lake
flows:
  orders:
    apply:
      from: raw.orders
      into: silver.orders
      schema: orders.sql
      keys: [id]
",
    );
    schemas(&p, &["silver.orders"], "status STRING");
    p.ok(&["sql", "CREATE TABLE raw.orders (id STRING, status STRING)"]);
    p.ok(&[
        "sql",
        "INSERT INTO raw.orders VALUES ('1', 'new'), ('2', 'new')",
    ]);
    p.ok(&["run"]);
    let first = last_commit(&p, "silver.orders");
    assert_ne!(of_kind(&first, "protocol")[0]["minReaderVersion"], 3);

    // The lake default turns it on for the flow.
    let pipeline = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &format!("write_mode: merge_on_read\n{pipeline}"),
    );
    p.ok(&["sql", "INSERT INTO raw.orders VALUES ('1', 'paid')"]);
    p.ok(&["run"]);
    let commit = last_commit(&p, "silver.orders");
    let protocol = of_kind(&commit, "protocol");
    assert_eq!(protocol.len(), 1, "{commit:?}");
    assert_eq!(protocol[0]["minWriterVersion"], 7);
    let writer: Vec<&str> = protocol[0]["writerFeatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    // Nothing reads silver: it has no change feed.
    assert!(
        writer.contains(&"deletionVectors") && !writer.contains(&"changeDataFeed"),
        "{writer:?}"
    );
    let metadata = of_kind(&commit, "metaData");
    assert_eq!(
        metadata[0]["configuration"]["delta.enableDeletionVectors"],
        "true"
    );
    assert!(
        of_kind(&commit, "add")
            .iter()
            .any(|a| a["deletionVector"]["cardinality"] == 1),
        "{commit:?}"
    );
    assert_eq!(
        kernel_rows(&p, "silver.orders", &["id", "status"]),
        [["1", "paid"], ["2", "new"]]
    );
}

/// The data files (not deletion vectors, change data or the log) in a table's folder.
fn data_files(p: &Project, table: &str) -> Vec<String> {
    let dir = p.file(&format!("lake/{}", table.replace('.', "/")));
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    files.sort();
    files
}

/// A merge-on-read pipeline: flow `mor` from `raw.orders` (created, empty) into `silver.mor`
/// keyed by `id`, then the flows in `more`.
fn mor_orders(more: &str) -> Project {
    let p = Project::with_pipeline(&format!(
        "lake: ./lake
write_mode: merge_on_read
flows:
  mor:
    apply:
      from: raw.orders
      into: silver.mor
      schema: mor.sql
      keys: [id]
{more}"
    ));
    schemas(&p, &["silver.mor", "gold.orders"], "status STRING");
    p.ok(&["sql", "CREATE TABLE raw.orders (id STRING, status STRING)"]);
    p
}

#[test]
fn optimize_purges_deleted_rows_and_vacuum_keeps_what_a_flow_still_reads() {
    let p = mor_orders(
        "  gold:
    apply:
      from: silver.mor
      into: gold.orders
      schema: orders.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
",
    );
    let values = (0..10)
        .map(|i| format!("('{i}', 'new')"))
        .collect::<Vec<_>>()
        .join(", ");
    p.ok(&["sql", &format!("INSERT INTO raw.orders VALUES {values}")]);
    p.ok(&["run"]);
    p.ok(&[
        "sql",
        "INSERT INTO raw.orders VALUES ('1', 'paid'), ('2', 'paid'), ('3', 'paid')",
    ]);
    p.ok(&["run"]);
    let mut expected: Vec<Vec<String>> = (0..10)
        .map(|i| {
            let status = if (1..=3).contains(&i) { "paid" } else { "new" };
            vec![i.to_string(), status.to_string()]
        })
        .collect();
    expected.sort();
    assert_eq!(kernel_rows(&p, "silver.mor", &["id", "status"]), expected);

    // The first file has 3 of its 10 rows marked (30%, past the default 20%); the second
    // is small: both go into one new file, without the deleted rows.
    let out: Value = serde_json::from_str(&p.ok(&["--json", "optimize", "silver.mor"])).unwrap();
    let t = &out[0];
    assert_eq!(t["table"], "silver.mor", "{out}");
    assert_eq!(t["files_removed"], 2, "{out}");
    assert_eq!(t["files_added"], 1, "{out}");
    assert_eq!(t["rows_purged"], 3, "{out}");
    assert_eq!(t["rows_rewritten"], 10, "{out}");
    let commit = last_commit(&p, "silver.mor");
    for kind in ["add", "remove"] {
        for a in of_kind(&commit, kind) {
            assert_eq!(a["dataChange"], false, "{a}");
        }
    }
    // The new file holds live rows only; a remove names the vector of what it removes.
    for a in of_kind(&commit, "add") {
        assert!(a.get("deletionVector").is_none_or(Value::is_null), "{a}");
    }
    assert_eq!(kernel_rows(&p, "silver.mor", &["id", "status"]), expected);
    let status = common::status_rows(&p.ok(&["--json", "status"]));
    assert_eq!(status[0]["deleted_fraction"], 0.0, "{status:?}");
    // Nothing left to do.
    let again: Value = serde_json::from_str(&p.ok(&["--json", "optimize", "mor"])).unwrap();
    assert!(
        again
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["version"].is_null()),
        "{again}"
    );

    // The downstream flow skips the optimize commit: no change.
    let flows = p.flows(&["run", "gold"]);
    for k in ["inserted", "updated", "deleted"] {
        assert_eq!(flows[0][k], 0, "{flows:?}");
    }

    // A change the downstream flow has not read yet, then a vacuum with no retention: the
    // files replaced before stay only as far as that flow still needs them.
    p.ok(&["sql", "INSERT INTO raw.orders VALUES ('4', 'paid')"]);
    p.ok(&["run", "mor"]);
    let before = data_files(&p, "silver.mor");
    let dry: Value = serde_json::from_str(&p.ok(&[
        "--json",
        "vacuum",
        "silver.mor",
        "--retain",
        "0s",
        "--dry-run",
    ]))
    .unwrap();
    assert_eq!(
        data_files(&p, "silver.mor"),
        before,
        "a dry run deletes nothing"
    );
    assert!(dry[0]["kept_for_flows_from_version"].is_i64(), "{dry}");
    let unread: Vec<String> = last_commit(&p, "silver.mor")
        .iter()
        .flat_map(|a| ["add", "remove", "cdc"].map(|k| a.get(k).map(|x| x["path"].clone())))
        .flatten()
        .map(|v| text(&v))
        .collect();
    let done: Value =
        serde_json::from_str(&p.ok(&["--json", "vacuum", "silver.mor", "--retain", "0s"])).unwrap();
    assert_eq!(done[0]["files"], dry[0]["files"], "{done}");
    let first_deleted: Vec<String> = done[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(text)
        .collect();
    assert!(
        !first_deleted.is_empty(),
        "files no version the flow reads needs go: {done}"
    );
    for f in &unread {
        assert!(
            !first_deleted.contains(f),
            "`{f}`, which the flow has still to read, went"
        );
        assert!(
            p.file(&format!("lake/silver/mor/{f}")).exists(),
            "`{f}` is kept"
        );
    }
    p.ok(&["run", "gold"]);
    expected[4][1] = "paid".into();
    assert_eq!(sql_rows(&p, "gold.orders"), expected);

    // Once it has read them, they go: only files the table holds are left. A file no
    // commit holds, written just now (a run still writing), stays.
    let writing = p.file("lake/silver/mor/part-00000-still-being-written.snappy.parquet");
    std::fs::write(&writing, b"PAR1").unwrap();
    let done: Value =
        serde_json::from_str(&p.ok(&["--json", "vacuum", "mor", "--retain", "0s"])).unwrap();
    let table = &done[0];
    assert_eq!(table["table"], "silver.mor");
    assert!(table["kept_for_flows_from_version"].is_null(), "{done}");
    let deleted: Vec<String> = table["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(text)
        .chain(first_deleted)
        .collect();
    assert!(
        deleted.iter().any(|f| f.starts_with("deletion_vector_")),
        "the replaced deletion vector file goes: {deleted:?}"
    );
    assert!(
        writing.exists(),
        "a file being written is kept: {deleted:?}"
    );
    std::fs::remove_file(&writing).unwrap();
    let live = data_files(&p, "silver.mor");
    assert_eq!(kernel_rows(&p, "silver.mor", &["id", "status"]), expected);
    assert_eq!(sql_rows(&p, "silver.mor"), expected);
    assert!(
        live.len() <= 2,
        "only the optimized file and the last run's: {live:?}"
    );
}

#[test]
fn optimize_auto_rewrites_after_the_run_commit_and_reports_it() {
    let p = Project::with_pipeline(
        "lake: ./lake
flows:
  orders:
    apply:
      from: raw.orders
      into: silver.orders
      schema: orders.sql
      keys: [id]
      write_mode: merge_on_read
      optimize: auto
",
    );
    schemas(&p, &["silver.orders"], "status STRING");
    p.ok(&["sql", "CREATE TABLE raw.orders (id STRING, status STRING)"]);
    p.ok(&[
        "sql",
        "INSERT INTO raw.orders VALUES ('1', 'new'), ('2', 'new'), ('3', 'new')",
    ]);
    let first = p.flows(&["run"]);
    assert!(
        first[0].get("optimized").is_none(),
        "one file: nothing to do {first:?}"
    );
    p.ok(&["sql", "INSERT INTO raw.orders VALUES ('1', 'paid')"]);
    let second = p.flows(&["run"]);
    let optimized = &second[0]["optimized"];
    assert_eq!(optimized["rows_purged"], 1, "{second:?}");
    assert_eq!(optimized["files_removed"], 2, "{second:?}");
    assert_eq!(
        optimized["version"], second[0]["silver_version"],
        "{second:?}"
    );
    let commit = last_commit(&p, "silver.orders");
    assert!(
        of_kind(&commit, "add")
            .iter()
            .all(|a| a["dataChange"] == false),
        "{commit:?}"
    );
    assert_eq!(
        kernel_rows(&p, "silver.orders", &["id", "status"]),
        [["1", "paid"], ["2", "new"], ["3", "new"]]
    );
    // Killed after the run's commit and its optimize, before the event log: the next run
    // writes the lost row from the run's commit, behind the optimize commit.
    p.ok(&["sql", "INSERT INTO raw.orders VALUES ('2', 'paid')"]);
    let out = p.abort_at("before_event_log", &["run"]);
    assert_eq!(common::signal_of(&out.status), Some(6), "aborted: {out:?}");
    let commit = last_commit(&p, "silver.orders");
    assert!(
        of_kind(&commit, "commitInfo")[0]["operation"] == "OPTIMIZE",
        "the last commit is the optimize: {commit:?}"
    );
    p.ok(&["run"]);
    let log = p.query("SELECT status, updated FROM _smelt.event_log ORDER BY finished_at");
    let statuses: Vec<String> = log.iter().map(|r| text(&r["status"])).collect();
    assert_eq!(
        statuses,
        ["applied", "applied", "applied", "up_to_date"],
        "{log:?}"
    );
    assert_eq!(
        log[2]["updated"], 1,
        "the lost row, from the run's commit: {log:?}"
    );
    // An Iceberg silver is refused at validation, with the line.
    p.write(
        "smelt.yaml",
        "lake: ./lake
catalogs:
  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}
flows:
  orders:
    apply:
      from: raw.orders
      into: ice.silver.orders
      keys: [id]
      optimize: auto
",
    );
    let (_, err) = p.fails(&["validate"], 2);
    insta::assert_snapshot!("optimize_auto_on_iceberg", pinned(&p, &err));
}

/// `smelt optimize --cluster` rewrites a silver whose runs left files of overlapping key
/// ranges in key order (rows unchanged, the rows marked deleted purged), says so, and has
/// nothing to do the second time; a table no apply flow writes has no key to cluster by.
#[test]
fn optimize_cluster_puts_overlapping_files_in_key_order() {
    let p = mor_orders("");
    // Three runs of interleaved ids: each run's file spans the others' ranges.
    for run in 0..3 {
        let values = (0..10)
            .filter(|i| i % 3 == run)
            .map(|i| format!("('{i}', 'new')"))
            .collect::<Vec<_>>()
            .join(", ");
        p.ok(&["sql", &format!("INSERT INTO raw.orders VALUES {values}")]);
        p.ok(&["run"]);
    }
    p.ok(&["sql", "INSERT INTO raw.orders VALUES ('4', 'paid')"]);
    p.ok(&["run"]);
    let expected = kernel_rows(&p, "silver.mor", &["id", "status"]);
    assert_eq!(expected.len(), 10);
    let files = data_files(&p, "silver.mor").len();
    assert_eq!(files, 4);

    // Thresholds no file passes: only `--cluster` rewrites.
    let none = ["--deleted-fraction", "1", "--small-file-rows", "1", "mor"];
    let plain: Value =
        serde_json::from_str(&p.ok(&[&["--json", "optimize"][..], &none].concat())).unwrap();
    assert!(plain[0]["version"].is_null(), "{plain}");
    let out = p.ok(&[&["optimize", "--cluster"][..], &none].concat());
    assert!(
        out.contains("4 files rewritten into 1 (10 rows kept, 1 deleted rows purged")
            && out.contains(", in key order)"),
        "{out}"
    );
    assert_eq!(kernel_rows(&p, "silver.mor", &["id", "status"]), expected);
    let again: Value =
        serde_json::from_str(&p.ok(&["--json", "optimize", "--cluster", "mor"])).unwrap();
    assert!(again[0]["version"].is_null(), "{again}");
    assert_eq!(again[0]["partitions_clustered"], 0, "{again}");

    let (_, err) = p.fails(&["optimize", "--cluster", "raw.orders"], 1);
    insta::assert_snapshot!("optimize_cluster_without_a_key", pinned(&p, &err));
}
