//! More flows into Iceberg tables, checked by pyiceberg (installed by `testenv/setup.sh`):
//! a replace_where flow into a table pyiceberg created and filled, and an SCD2 silver with
//! its tombstones — a late delete, the version it closes arriving after it, and the
//! tombstone's expiry. Expected results are models the tests keep.

use std::collections::BTreeMap;

use crate::common::{self, Project, text};
use serde_json::{Value, json};

/// Runs `steps` through pyiceberg on the project's catalog (warehouse `./warehouse`).
fn pyiceberg(p: &Project, steps: &[Value]) -> Vec<Value> {
    common::pyiceberg(p, &p.file("warehouse").display().to_string(), &[], steps)
}

/// An Iceberg table as pyiceberg reads it, `columns` of each row as text, sorted.
fn scan(p: &Project, table: &str, columns: &[&str]) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = pyiceberg(p, &[json!({ "scan": table })])[0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| columns.iter().map(|c| text(&r[*c])).collect())
        .collect();
    rows.sort();
    rows
}

/// A Delta table's (id, status) rows as text, by id.
fn delta_rows(p: &Project, table: &str) -> Vec<Vec<String>> {
    p.query(&format!("SELECT id, status FROM {table} ORDER BY id"))
        .iter()
        .map(|r| vec![text(&r["id"]), text(&r["status"])])
        .collect()
}

fn sale(id: &str, day: &str, amount: &str) -> Value {
    json!({"sale_id": id, "sale_date": day, "amount": amount})
}

#[test]
fn replace_where_replaces_the_matching_rows_of_a_table_pyiceberg_wrote() {
    let p = Project::with_pipeline(
        "lake: ./lake
catalogs:
  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}
flows:
  sales:
    replace_where:
      from: abc.sales
      into: ice.demo.sales
      predicate: \"sale_date >= {min(sale_date)}\"
",
    );
    // The target: three days in one file, written by pyiceberg.
    let stored = [
        sale("1", "2026-07-19", "100"),
        sale("2", "2026-07-20", "200"),
        sale("3", "2026-07-20", "300"),
        sale("4", "2026-07-21", "400"),
    ];
    pyiceberg(
        &p,
        &[
            json!({"create": "demo.sales", "columns": ["sale_id", "sale_date", "amount"]}),
            json!({"append": "demo.sales", "rows": stored}),
        ],
    );
    // The batch: days 07-20 and 07-21 again, re-exported.
    p.ok(&[
        "sql",
        "CREATE TABLE abc.sales (sale_id STRING, sale_date STRING, amount STRING)",
    ]);
    p.ok(&[
        "sql",
        "INSERT INTO abc.sales VALUES ('2', '2026-07-20', '250'), ('5', '2026-07-21', '500')",
    ]);
    let expected = |batch: &[[&str; 3]]| {
        // The model: the stored rows before the batch's first day, then the batch.
        let first = batch.iter().map(|r| r[1]).min().unwrap();
        let mut rows: Vec<Vec<String>> = stored
            .iter()
            .map(|r| {
                ["sale_id", "sale_date", "amount"]
                    .iter()
                    .map(|c| text(&r[*c]))
                    .collect::<Vec<_>>()
            })
            .filter(|r| r[1].as_str() < first)
            .chain(batch.iter().map(|r| r.map(str::to_string).to_vec()))
            .collect();
        rows.sort();
        rows
    };
    let columns = ["sale_id", "sale_date", "amount"];
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["rows_written"], 2, "{flows:?}");
    assert_eq!(flows[0]["rows_replaced"], 3, "{flows:?}");
    let batch = [["2", "2026-07-20", "250"], ["5", "2026-07-21", "500"]];
    assert_eq!(scan(&p, "demo.sales", &columns), expected(&batch));
    let snapshots = &pyiceberg(&p, &[json!({"snapshots": "demo.sales"})])[0]["snapshots"];
    let last = snapshots.as_array().unwrap().last().unwrap();
    assert_eq!(last["operation"], "overwrite", "{snapshots}");
    assert_eq!(last["summary"]["total-records"], "3", "{snapshots}");

    // A new source version: the whole batch again, with one more row.
    p.ok(&[
        "sql",
        "INSERT INTO abc.sales VALUES ('6', '2026-07-22', '600')",
    ]);
    p.ok(&["run"]);
    let batch = [
        ["2", "2026-07-20", "250"],
        ["5", "2026-07-21", "500"],
        ["6", "2026-07-22", "600"],
    ];
    assert_eq!(scan(&p, "demo.sales", &columns), expected(&batch));
    assert_eq!(p.flows(&["run"])[0]["status"], "up_to_date");
}

const SCD2: &str = "lake: ./lake
catalogs:
  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}
flows:
  orders:
    apply:
      from: ice.raw.orders
      into: ice.silver.orders
      schema: silver.sql
      keys: [id]
      scd: 2
      sequence_by: [seq]
      apply_as_deletes: status = 'deleted'
      tombstone_retention: 3s
";

fn order(id: &str, seq: i64, status: &str) -> Value {
    json!({"id": id, "seq": seq.to_string(), "status": status})
}

/// The SCD2 model: per key, its changes by sequence (`None`: a delete); a version runs
/// from an upsert to the next change.
#[derive(Default)]
struct History(BTreeMap<String, BTreeMap<i64, Option<String>>>);

impl History {
    fn write(&mut self, rows: &[Value]) {
        for r in rows {
            let status = text(&r["status"]);
            let seq: i64 = text(&r["seq"]).parse().unwrap();
            self.0
                .entry(text(&r["id"]))
                .or_default()
                .insert(seq, (status != "deleted").then_some(status));
        }
    }

    /// (id, status, __START_AT, __END_AT) rows, sorted.
    fn versions(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for (id, changes) in &self.0 {
            let changes: Vec<_> = changes.iter().collect();
            for (i, (seq, status)) in changes.iter().enumerate() {
                let Some(status) = status else { continue };
                let end = changes
                    .get(i + 1)
                    .map_or("NULL".to_string(), |(s, _)| s.to_string());
                out.push(vec![id.clone(), status.clone(), seq.to_string(), end]);
            }
        }
        out.sort();
        out
    }
}

#[test]
fn scd2_iceberg_silver_keeps_a_late_delete_and_expires_its_tombstone() {
    let p = Project::with_pipeline(SCD2);
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING, seq BIGINT)",
    );
    let table = "raw.orders";
    let columns = ["id", "status", "__START_AT", "__END_AT"];
    let mut model = History::default();
    let mut step = |p: &Project, rows: &[Value]| {
        pyiceberg(p, &[json!({"append": table, "rows": rows})]);
        model.write(rows);
        let flows = p.flows(&["run"]);
        (flows, model.versions())
    };
    pyiceberg(
        &p,
        &[json!({"create": table, "columns": ["id", "seq", "status"]})],
    );
    let (_, expected) = step(
        &p,
        &[
            order("1", 1, "new"),
            order("1", 2, "paid"),
            order("2", 1, "new"),
        ],
    );
    assert_eq!(scan(&p, "silver.orders", &columns), expected);

    // Key 1 gets a later version; key 2 is deleted; key 3's delete (seq 5) arrives before
    // the version it closes: it leaves a tombstone.
    let (_, expected) = step(
        &p,
        &[
            order("1", 3, "shipped"),
            order("2", 3, "deleted"),
            order("3", 5, "deleted"),
        ],
    );
    assert_eq!(scan(&p, "silver.orders", &columns), expected);
    assert_eq!(
        scan(&p, "silver.orders__tombstones", &["id"]),
        [["3".to_string()]]
    );

    // Key 3's version at seq 4 arrives late: it ends at the delete.
    let (first, expected) = step(&p, &[order("3", 4, "new")]);
    assert_eq!(scan(&p, "silver.orders", &columns), expected);
    assert!(expected.contains(&vec!["3".into(), "new".into(), "4".into(), "5".into()]));

    // Past the retention, the tombstone goes (in this run or the one before).
    std::thread::sleep(std::time::Duration::from_secs(4));
    let (second, expected) = step(&p, &[order("4", 1, "new")]);
    assert_eq!(scan(&p, "silver.orders", &columns), expected);
    assert_eq!(
        scan(&p, "silver.orders__tombstones", &["id"]),
        Vec::<Vec<String>>::new()
    );
    let expired = first[0]["tombstones_expired"].as_u64().unwrap()
        + second[0]["tombstones_expired"].as_u64().unwrap();
    assert_eq!(expired, 1, "{first:?} {second:?}");
}

/// An Iceberg bronze applied into a Delta silver, bronze deletes applied.
const ICEBERG_BRONZE: &str = "lake: ./lake
catalogs:
  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}
flows:
  orders:
    apply:
      from: ice.raw.orders
      into: silver.orders
      schema: silver.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
      source_deletes: apply
";

fn row(id: &str, status: &str) -> Value {
    json!({"id": id, "status": status})
}

#[test]
fn merge_on_read_deletes_and_updates_in_an_iceberg_bronze_are_read_as_changes() {
    let p = Project::with_pipeline(ICEBERG_BRONZE);
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING)",
    );
    let table = "raw.orders";
    // The model: the bronze's live rows, which silver must equal.
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let check = |p: &Project, model: &BTreeMap<String, String>| {
        let expected: Vec<Vec<String>> = model
            .iter()
            .map(|(k, v)| vec![k.clone(), v.clone()])
            .collect();
        // The fixture did what the model says (pyiceberg applies position deletes)...
        assert_eq!(scan(p, table, &["id", "status"]), expected);
        // ...and silver, applied from the changes, agrees.
        let silver = delta_rows(p, "silver.orders");
        assert_eq!(silver, expected);
    };
    let first = [row("1", "new"), row("2", "new"), row("3", "new")];
    pyiceberg(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status"]}),
            json!({"append": table, "rows": first}),
        ],
    );
    for r in &first {
        model.insert(text(&r["id"]), text(&r["status"]));
    }
    p.ok(&["run"]);
    check(&p, &model);

    // A merge-on-read delete: one position-delete file marks key 2's row.
    pyiceberg(
        &p,
        &[json!({"mor_delete": table, "column": "id", "values": ["2"]})],
    );
    model.remove("2");
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["deleted"], 1, "{flows:?}");
    check(&p, &model);

    // A merge-on-read update: key 3's old row deleted by position, its new row appended.
    pyiceberg(
        &p,
        &[
            json!({"mor_delete": table, "column": "id", "values": ["3"], "rows": [row("3", "paid")]}),
        ],
    );
    model.insert("3".into(), "paid".into());
    p.ok(&["run"]);
    check(&p, &model);

    // A copy-on-write delete of key 1 removes the first file whole: read with the rows
    // deleted before (keys 2 and 3's old row), only key 1 is a delete — key 3 stays.
    pyiceberg(&p, &[json!({"delete": table, "where": "id = '1'"})]);
    model.remove("1");
    p.ok(&["run"]);
    check(&p, &model);

    // A rebuild reads the snapshot with its position deletes applied.
    p.ok(&["run", "--full-refresh"]);
    check(&p, &model);
}

const BOTH_MODES: &str = "lake: ./lake
catalogs:
  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}
flows:
  cow:
    apply:
      from: ice.raw.orders
      into: ice.silver.cow
      schema: cow.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
      apply_as_deletes: status = 'deleted'
  mor:
    apply:
      from: ice.raw.orders
      into: ice.silver.mor
      schema: mor.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
      apply_as_deletes: status = 'deleted'
      write_mode: merge_on_read
  gold:
    apply:
      from: ice.silver.mor
      into: gold.orders
      schema: gold.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
      source_deletes: apply
";

/// The last snapshot of an Iceberg table, as pyiceberg lists it.
fn last_snapshot(p: &Project, table: &str) -> Value {
    let snapshots = &pyiceberg(p, &[json!({ "snapshots": table })])[0]["snapshots"];
    snapshots.as_array().unwrap().last().unwrap().clone()
}

#[test]
fn merge_on_read_silver_marks_replaced_rows_and_reads_as_copy_on_write_does() {
    let p = Project::with_pipeline(BOTH_MODES);
    for (file, table) in [
        ("cow.sql", "silver.cow"),
        ("mor.sql", "silver.mor"),
        ("gold.sql", "gold.orders"),
    ] {
        p.write(
            file,
            &format!("CREATE TABLE {table} (id STRING NOT NULL, status STRING)"),
        );
    }
    let table = "raw.orders";
    pyiceberg(&p, &[json!({"create": table, "columns": ["id", "status"]})]);
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    // Both silvers as pyiceberg reads them (it applies position deletes), the downstream
    // Delta table, and the model agree; so do the two tombstone tables, once there are some.
    let check = |p: &Project, model: &BTreeMap<String, String>, tombstones: bool| {
        let expected: Vec<Vec<String>> = model
            .iter()
            .map(|(k, v)| vec![k.clone(), v.clone()])
            .collect();
        assert_eq!(scan(p, "silver.mor", &["id", "status"]), expected, "mor");
        assert_eq!(scan(p, "silver.cow", &["id", "status"]), expected, "cow");
        let gold = delta_rows(p, "gold.orders");
        assert_eq!(gold, expected, "gold, read from the merge-on-read silver");
        if tombstones {
            assert_eq!(
                scan(p, "silver.mor__tombstones", &["id"]),
                scan(p, "silver.cow__tombstones", &["id"])
            );
        }
    };
    // Both modes see the same stored rows, so they count the same changes.
    let run = |p: &Project| {
        let flows = p.flows(&["run"]);
        let counts = |flow: &str| {
            let r = flows.iter().find(|f| f["flow"] == flow).unwrap();
            ["inserted", "updated", "deleted", "stale", "unchanged"].map(|k| r[k].clone())
        };
        assert_eq!(counts("cow"), counts("mor"), "{flows:?}");
    };
    let mut step = |p: &Project, rows: &[Value]| {
        pyiceberg(p, &[json!({"append": table, "rows": rows})]);
        for r in rows {
            let status = text(&r["status"]);
            if status == "deleted" {
                model.remove(&text(&r["id"]));
            } else {
                model.insert(text(&r["id"]), status);
            }
        }
        model.clone()
    };

    let m = step(&p, &[row("1", "new"), row("2", "new"), row("3", "new")]);
    run(&p);
    check(&p, &m, false);

    // An update of 1 and a delete of 2: two rows marked in a position-delete file, no data
    // file rewritten. Killed before the silver commit first: the rerun finishes it once.
    let m = step(
        &p,
        &[row("1", "paid"), row("2", "deleted"), row("4", "new")],
    );
    let out = p.abort_at("before_silver_commit", &["run", "mor"]);
    assert_eq!(common::signal_of(&out.status), Some(6), "aborted: {out:?}");
    run(&p);
    check(&p, &m, true);
    let last = last_snapshot(&p, "silver.mor");
    assert_eq!(last["operation"], "overwrite", "{last}");
    // The watermark's source and snapshot id, as pyiceberg names the bronze's snapshot.
    let bronze = last_snapshot(&p, table);
    assert_eq!(
        last["summary"]["smelt.watermark.smelt/mor"],
        bronze["sequence"].to_string()
    );
    assert_eq!(last["summary"]["smelt.source.smelt/mor"], "ice.raw.orders");
    assert_eq!(
        last["summary"]["smelt.source-snapshot-id.smelt/mor"],
        bronze["id"].to_string()
    );
    assert_eq!(last["summary"]["added-position-deletes"], "2", "{last}");
    assert_eq!(last["summary"].get("deleted-data-files"), None, "{last}");
    // `smelt status`: each flow's mode, and the share of stored rows marked deleted, as
    // pyiceberg's view of the summary counts it.
    let status = common::status_rows(&p.ok(&["--json", "status"]));
    let of = |flow: &str| status.iter().find(|s| s["flow"] == flow).unwrap().clone();
    let count = |k: &str| text(&last["summary"][k]).parse::<f64>().unwrap();
    assert_eq!(of("mor")["write_mode"], "merge_on_read");
    assert_eq!(
        of("mor")["deleted_fraction"].as_f64().unwrap(),
        count("total-position-deletes") / count("total-records")
    );
    assert_eq!(of("cow")["write_mode"], "copy_on_write");
    assert_eq!(of("cow")["deleted_fraction"], 0.0);
    assert_eq!(
        of("gold")["deleted_fraction"],
        0.0,
        "a Delta table without vectors"
    );
    let text_status = p.ok(&["status"]);
    assert!(
        text_status.contains("merge_on_read; 40.0% of stored rows marked deleted"),
        "{text_status}"
    );

    // Key 1 again (its first row is already marked: not marked twice), 3 deleted, 2 back.
    let m = step(
        &p,
        &[row("3", "deleted"), row("2", "new"), row("1", "shipped")],
    );
    run(&p);
    check(&p, &m, true);
    let last = last_snapshot(&p, "silver.mor");
    assert_eq!(last["summary"]["added-position-deletes"], "2", "{last}");

    // A rebuild replaces every data and delete file.
    p.ok(&["run", "--full-refresh"]);
    check(&p, &m, true);
    let last = last_snapshot(&p, "silver.mor");
    assert_eq!(last["summary"]["total-delete-files"], "0", "{last}");
}

#[test]
fn equality_deletes_in_an_iceberg_bronze_are_read_as_changes() {
    // Flink-style upserts: equality-delete files. pyiceberg cannot read such a table, so the
    // expected silver is the model's, and a rebuild (the `iceberg` crate's reader applying
    // the deletes to a snapshot) must agree with the incremental runs.
    let p = Project::with_pipeline(ICEBERG_BRONZE);
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING)",
    );
    let table = "raw.orders";
    let silver = |p: &Project| delta_rows(p, "silver.orders");
    let rows = |model: &[(&str, &str)]| -> Vec<Vec<String>> {
        model
            .iter()
            .map(|(k, v)| vec![k.to_string(), v.to_string()])
            .collect()
    };
    pyiceberg(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status"]}),
            json!({"append": table, "rows": [row("1", "new"), row("2", "new"), row("3", "new")]}),
            json!({"append": table, "rows": [row("4", "new")]}),
        ],
    );
    p.ok(&["run"]);
    // Key 2 deleted by value.
    pyiceberg(
        &p,
        &[json!({"eq_delete": table, "column": "id", "values": ["2"]})],
    );
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["deleted"], 1, "{flows:?}");
    let expected = rows(&[("1", "new"), ("3", "new"), ("4", "new")]);
    assert_eq!(silver(&p), expected);
    // An upsert of 3 and 4: their old rows deleted by value, the new ones (same snapshot,
    // so not deleted) appended.
    pyiceberg(
        &p,
        &[
            json!({"eq_delete": table, "column": "id", "values": ["3", "4"], "rows": [row("3", "paid"), row("4", "paid")]}),
        ],
    );
    p.ok(&["run"]);
    let expected = rows(&[("1", "new"), ("3", "paid"), ("4", "paid")]);
    assert_eq!(silver(&p), expected);
    p.ok(&["run", "--full-refresh"]);
    assert_eq!(silver(&p), expected, "a rebuild agrees");
}

#[test]
fn new_columns_are_added_to_an_iceberg_silver_with_the_run() {
    let p = Project::with_pipeline(&ICEBERG_BRONZE.replace(
        "into: silver.orders",
        "into: ice.silver.orders\n      schema_evolution: add_new_columns",
    ));
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING)",
    );
    let table = "raw.orders";
    pyiceberg(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status"]}),
            json!({"append": table, "rows": [row("1", "new"), row("2", "new")]}),
        ],
    );
    p.ok(&["run"]);
    // The bronze and the DDL gain `note`; key 1 gets one, key 3 is new.
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING, note STRING)",
    );
    pyiceberg(
        &p,
        &[
            json!({"add_column": table, "name": "note"}),
            json!({"append": table, "rows": [
                {"id": "1", "status": "paid", "note": "n1"},
                {"id": "3", "status": "new", "note": "n3"},
            ]}),
        ],
    );
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["columns_added"], json!(["note"]), "{flows:?}");
    // pyiceberg reads the new column: NULL in the row written before it.
    assert_eq!(
        scan(&p, "silver.orders", &["id", "status", "note"]),
        [
            ["1", "paid", "n1"],
            ["2", "new", "NULL"],
            ["3", "new", "n3"]
        ]
        .map(|r| r.map(str::to_string).to_vec())
        .to_vec()
    );
    // The next run writes rows of the new schema as usual.
    pyiceberg(
        &p,
        &[json!({"append": table, "rows": [{"id": "2", "status": "paid", "note": "n2"}]})],
    );
    p.ok(&["run"]);
    assert_eq!(
        scan(&p, "silver.orders", &["id", "status", "note"]),
        [["1", "paid", "n1"], ["2", "paid", "n2"], ["3", "new", "n3"]]
            .map(|r| r.map(str::to_string).to_vec())
            .to_vec()
    );
}

#[test]
fn quarantined_changes_go_to_an_iceberg_rejects_table() {
    let p = Project::with_pipeline(&ICEBERG_BRONZE.replace(
        "into: silver.orders",
        "into: ice.silver.orders\n      expect:\n        has_status: status IS NOT NULL\n      on_violation: quarantine",
    ));
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING)",
    );
    let table = "raw.orders";
    pyiceberg(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status"]}),
            json!({"append": table, "rows": [row("1", "new"), {"id": "2"}, row("3", "new")]}),
        ],
    );
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["quarantined"], 1, "{flows:?}");
    assert_eq!(
        scan(&p, "silver.orders", &["id", "status"]),
        [["1", "new"], ["3", "new"]]
            .map(|r| r.map(str::to_string).to_vec())
            .to_vec()
    );
    // The rejects table, as pyiceberg reads it: key 2's row, the expectation, the source.
    let rejects = &pyiceberg(&p, &[json!({"scan": "silver.orders__rejects"})])[0]["rows"];
    let rejects = rejects.as_array().unwrap();
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    assert_eq!(
        text(&rejects[0]["raw_row"]),
        r#"{"id":"2","status":null}"#,
        "{rejects:?}"
    );
    assert_eq!(text(&rejects[0]["rule"]), "has_status", "{rejects:?}");
    assert_eq!(
        text(&rejects[0]["source_table"]),
        "ice.raw.orders",
        "{rejects:?}"
    );
}

#[test]
fn position_deletes_of_a_snapshots_own_rows_or_listed_again_are_read_once() {
    let p = Project::with_pipeline(ICEBERG_BRONZE);
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING)",
    );
    let table = "raw.orders";
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut step =
        |p: &Project, steps: &[Value], model_step: &dyn Fn(&mut BTreeMap<String, String>)| {
            pyiceberg(p, steps);
            model_step(&mut model);
            p.ok(&["run"]);
            let expected: Vec<Vec<String>> = model
                .iter()
                .map(|(k, v)| vec![k.clone(), v.clone()])
                .collect();
            assert_eq!(scan(p, table, &["id", "status"]), expected, "the fixture");
            let silver = delta_rows(p, "silver.orders");
            assert_eq!(silver, expected);
        };
    step(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status"]}),
            json!({"append": table, "rows": [row("1", "new"), row("2", "new"), row("3", "new")]}),
        ],
        &|m| {
            for k in ["1", "2", "3"] {
                m.insert(k.into(), "new".into());
            }
        },
    );
    // Key 1 deleted by position, then written again.
    step(
        &p,
        &[json!({"mor_delete": table, "column": "id", "values": ["1"]})],
        &|m| {
            m.remove("1");
        },
    );
    step(
        &p,
        &[json!({"append": table, "rows": [row("1", "back")]})],
        &|m| {
            m.insert("1".into(), "back".into());
        },
    );
    // Key 2's delete file lists key 1's old position again (Spark's file-scoped delete
    // files): that row was deleted before, so key 1 stays.
    step(
        &p,
        &[json!({"mor_delete": table, "column": "id", "values": ["2"], "repeat": true})],
        &|m| {
            m.remove("2");
        },
    );
    // A snapshot adds keys 9 and 10 and deletes its own 9 by position (Flink, within one
    // checkpoint): 9 was never visible.
    step(
        &p,
        &[
            json!({"mor_delete": table, "column": "id", "values": ["9"], "rows": [row("9", "tmp"), row("10", "new")], "own": true}),
        ],
        &|m| {
            m.insert("10".into(), "new".into());
        },
    );
    p.ok(&["run", "--full-refresh"]);
    assert_eq!(
        p.query("SELECT count(*) AS n FROM silver.orders")[0]["n"],
        3
    );
}

#[test]
fn a_partitioned_iceberg_target_is_refused_before_anything_is_written() {
    let p = Project::with_pipeline(
        "lake: ./lake\ncatalogs:\n  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}\nflows:\n  copy:\n    append:\n      from: ice.raw.orders\n      into: ice.out.orders\n",
    );
    pyiceberg(
        &p,
        &[
            json!({"create": "raw.orders", "columns": ["id", "status"]}),
            json!({"append": "raw.orders", "rows": [row("1", "new")]}),
            json!({"create": "out.orders", "columns": ["id", "status"], "partition_by": "status"}),
        ],
    );
    let (_, err) = p.fails(&["run"], 1);
    assert!(
        err.contains("`ice.out.orders` is partitioned (identity(status)); smelt writes unpartitioned Iceberg tables only"),
        "{err}"
    );
    assert_eq!(
        last_snapshot_count(&p, "out.orders"),
        0,
        "nothing committed"
    );
}

/// How many snapshots an Iceberg table has, as pyiceberg lists them.
fn last_snapshot_count(p: &Project, table: &str) -> usize {
    pyiceberg(p, &[json!({ "snapshots": table })])[0]["snapshots"]
        .as_array()
        .unwrap()
        .len()
}
