//! Iceberg tables as sources: pyiceberg (from PyPI, installed by `testenv/setup.sh`) writes
//! an Iceberg bronze in a SQL catalog (SQLite) — appends, copy-on-write overwrites and
//! deletes — and `smelt run` applies its changes into a Delta silver. The expected silver
//! is a model the test keeps as it writes (the last row written per key).

use std::collections::BTreeMap;

use crate::common::{self, Project, text};
use serde_json::{Value, json};

/// The lake and catalog `ice` (SQLite, warehouse `./warehouse`) of the tests' pipelines, which
/// go on with their `flows:`.
macro_rules! with_catalog {
    ($flows:literal) => {
        concat!(
            "lake: ./lake
catalogs:
  ice:
    type: sql
    uri: sqlite:catalog.db
    warehouse: ./warehouse
",
            $flows
        )
    };
}

mod iceberg_ingest;
mod iceberg_sql;

const PIPELINE: &str = with_catalog!(
    "flows:
  orders:
    apply:
      from: ice.raw.orders
      into: silver.orders
      schema: silver.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
      source_deletes: apply
"
);

const SILVER: &str =
    "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING, amount BIGINT)";

/// Runs `steps` through pyiceberg on the project's catalog (warehouse `./warehouse`).
fn pyiceberg(p: &Project, steps: &[Value]) -> Vec<Value> {
    common::pyiceberg(p, &p.file("warehouse").display().to_string(), &[], steps)
}

fn row(id: &str, status: &str, amount: i64) -> Value {
    json!({"id": id, "status": status, "amount": amount.to_string()})
}

/// The silver as (id, status, amount) rows, by id.
fn silver(p: &Project) -> Vec<(String, String, String)> {
    p.query("SELECT id, status, amount FROM silver.orders ORDER BY id")
        .iter()
        .map(|r| (text(&r["id"]), text(&r["status"]), text(&r["amount"])))
        .collect()
}

/// The model: the last row written per key, less the keys deleted.
#[derive(Default)]
struct Model(BTreeMap<String, (String, String)>);

impl Model {
    fn write(&mut self, rows: &[Value]) {
        for r in rows {
            self.0
                .insert(text(&r["id"]), (text(&r["status"]), text(&r["amount"])));
        }
    }

    fn rows(&self) -> Vec<(String, String, String)> {
        self.0
            .iter()
            .map(|(k, (s, a))| (k.clone(), s.clone(), a.clone()))
            .collect()
    }
}

#[test]
fn an_iceberg_bronze_written_by_pyiceberg_applies_into_delta_silver() {
    let p = Project::with_pipeline(PIPELINE);
    p.write("silver.sql", SILVER);
    let mut model = Model::default();
    let table = "raw.orders";
    pyiceberg(
        &p,
        &[json!({"create": table, "columns": ["id", "status", "amount"]})],
    );

    // 1. Two appends: the first run reads the current snapshot.
    let first = [row("1", "new", 10), row("2", "new", 20)];
    let second = [row("1", "active", 11), row("3", "new", 30)];
    pyiceberg(
        &p,
        &[
            json!({"append": table, "rows": first}),
            json!({"append": table, "rows": second}),
        ],
    );
    model.write(&first);
    model.write(&second);
    p.ok(&["run"]);
    assert_eq!(silver(&p), model.rows());

    // 2. A copy-on-write overwrite of key 2: pyiceberg removes the files holding it and
    // re-adds their other rows (an old version of key 1 among them), which are carried
    // over, not changes.
    let overwrite = [row("2", "active", 21)];
    pyiceberg(
        &p,
        &[json!({"overwrite": table, "where": "id = '2'", "rows": overwrite})],
    );
    model.write(&overwrite);
    p.ok(&["run"]);
    assert_eq!(
        silver(&p),
        model.rows(),
        "carried-over rows are not changes"
    );

    // 3. A copy-on-write delete of key 3, and a new key: with `source_deletes: apply` the
    // delete reaches silver.
    let late = [row("4", "new", 40)];
    pyiceberg(
        &p,
        &[
            json!({"delete": table, "where": "id = '3'"}),
            json!({"append": table, "rows": late}),
        ],
    );
    model.0.remove("3");
    model.write(&late);
    p.ok(&["run"]);
    assert_eq!(silver(&p), model.rows());

    // Nothing new: nothing read. The watermark is the bronze's last sequence number,
    // as pyiceberg reports it.
    let snapshots = &pyiceberg(&p, &[json!({"snapshots": table})])[0]["snapshots"];
    let last = snapshots.as_array().unwrap().last().unwrap()["sequence"]
        .as_i64()
        .unwrap();
    let status = p.status();
    assert_eq!(status["watermark"], last, "{status}");
    assert_eq!(status["bronze_version"], last, "{status}");
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["changes_read"], 0, "{flows:?}");
    assert_eq!(silver(&p), model.rows());

    // The bronze as pyiceberg reads it has every key of the model (and the silver agrees
    // with the latest row of each).
    let bronze = &pyiceberg(&p, &[json!({"scan": table})])[0]["rows"];
    let keys: std::collections::BTreeSet<String> = bronze
        .as_array()
        .unwrap()
        .iter()
        .map(|r| text(&r["id"]))
        .collect();
    assert_eq!(keys, model.0.keys().cloned().collect());

    // A replay from before the table's first snapshot reads every snapshot again (its
    // first has sequence number 1 and no parent: nothing was expired) and gives the same
    // silver.
    p.ok(&["run", "--since", "2000-01-01", "orders"]);
    assert_eq!(silver(&p), model.rows());
}

/// The Iceberg silver as pyiceberg reads it: (id, status, amount), by id.
fn iceberg_silver(p: &Project) -> Vec<(String, String, String)> {
    let mut rows: Vec<(String, String, String)> = pyiceberg(p, &[json!({"scan": "silver.orders"})])
        [0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (text(&r["id"]), text(&r["status"]), text(&r["amount"])))
        .collect();
    rows.sort();
    rows
}

#[test]
fn an_apply_flow_writes_iceberg_silver_copy_on_write_that_pyiceberg_reads() {
    let p =
        Project::with_pipeline(&PIPELINE.replace("into: silver.orders", "into: ice.silver.orders"));
    p.write("silver.sql", SILVER);
    let mut model = Model::default();
    let table = "raw.orders";
    let first = [
        row("1", "new", 10),
        row("2", "new", 20),
        row("3", "new", 30),
    ];
    pyiceberg(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status", "amount"]}),
            json!({"append": table, "rows": first}),
        ],
    );
    model.write(&first);
    p.ok(&["run"]);
    assert_eq!(iceberg_silver(&p), model.rows());

    // A delete of key 2 (pyiceberg rewrites the file, carrying keys 1 and 3 over), then
    // updates of keys 1 and 3 and a new key 4.
    let second = [
        row("1", "active", 11),
        row("3", "active", 31),
        row("4", "new", 40),
    ];
    pyiceberg(
        &p,
        &[
            json!({"delete": table, "where": "id = '2'"}),
            json!({"append": table, "rows": second}),
        ],
    );
    model.0.remove("2");
    model.write(&second);
    p.ok(&["run"]);
    assert_eq!(iceberg_silver(&p), model.rows());
    // The silver's last snapshot rewrote the file holding the old rows.
    let snapshots = &pyiceberg(&p, &[json!({"snapshots": "silver.orders"})])[0]["snapshots"];
    let last = snapshots.as_array().unwrap().last().unwrap();
    assert_eq!(last["operation"], "overwrite", "{snapshots}");
    assert_eq!(last["summary"]["total-records"], "3", "{snapshots}");

    // A rebuild gives the same silver.
    p.ok(&["run", "--full-refresh"]);
    assert_eq!(iceberg_silver(&p), model.rows());
    // Nothing new: nothing changes.
    p.ok(&["run"]);
    assert_eq!(iceberg_silver(&p), model.rows());
}

#[test]
fn a_full_refresh_reads_the_current_snapshot_with_its_deletes() {
    let p = Project::with_pipeline(PIPELINE);
    p.write("silver.sql", SILVER);
    let table = "raw.orders";
    let rows = [
        row("1", "new", 10),
        row("2", "new", 20),
        row("3", "new", 30),
    ];
    pyiceberg(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status", "amount"]}),
            json!({"append": table, "rows": rows}),
            json!({"delete": table, "where": "id = '2'"}),
        ],
    );
    p.ok(&["run"]);
    let mut model = Model::default();
    model.write(&[row("1", "new", 10), row("3", "new", 30)]);
    assert_eq!(silver(&p), model.rows());
    p.ok(&["run", "--full-refresh"]);
    assert_eq!(silver(&p), model.rows());
}

#[test]
fn an_unknown_iceberg_table_is_refused_by_name() {
    let p = Project::with_pipeline(PIPELINE);
    p.write("silver.sql", SILVER);
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("unknown_iceberg_table", crate::common::pinned(&p, &err));
}

#[test]
fn ingest_into_iceberg_loads_each_file_once_past_snapshot_expiry() {
    iceberg_ingest::each_file_is_loaded_once_past_snapshot_expiry();
}

#[test]
fn ingest_into_iceberg_killed_between_commit_and_ledger_loads_nothing_twice() {
    iceberg_ingest::a_run_killed_between_its_commit_and_its_ledger_entry_loads_nothing_twice();
}

#[test]
fn ingest_into_iceberg_runs_at_once_load_each_file_once() {
    iceberg_ingest::runs_at_once_load_each_file_once();
}

const SEED_004: &str = "lake: ./lake
catalogs:
  ice:
    type: sql
    uri: sqlite:catalog.db
    warehouse: ./warehouse
flows:
  active:
    append:
      from: ice.foundry.input
      into: ice.foundry.output
      where: status = 'active'
      on_rewrite: fail
";

fn input_row(id: i64, status: &str, day: u32, amount: &str) -> Value {
    json!({"id": id, "status": status, "ts": format!("2026-07-0{day}T09:00:00+00:00"), "amount": amount})
}

/// The output as pyiceberg reads it: (id, status, amount), by id.
fn output(p: &Project) -> Vec<(i64, String, String)> {
    let mut rows: Vec<(i64, String, String)> = pyiceberg(p, &[json!({"scan": "foundry.output"})])
        [0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                text(&r["status"]),
                text(&r["amount"]),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn seed_004_appends_the_active_rows_of_an_iceberg_input_to_an_iceberg_output() {
    let p = Project::with_pipeline(SEED_004);
    pyiceberg(
        &p,
        &[
            json!({"create": "foundry.input", "schema": [["id", "long"], ["status", "string"], ["ts", "timestamptz"], ["amount", "decimal(10,2)"]]}),
            json!({"append": "foundry.input", "rows": [
                input_row(1, "active", 1, "10.00"),
                input_row(2, "inactive", 1, "20.00"),
                input_row(3, "active", 1, "30.00"),
            ]}),
        ],
    );
    // Build 1: the output is created and gets the active rows.
    p.ok(&["run"]);
    let active = |id: i64, amount: &str| (id, "active".to_string(), amount.to_string());
    assert_eq!(output(&p), vec![active(1, "10.00"), active(3, "30.00")]);

    // Build 2: only the rows added since are read.
    pyiceberg(
        &p,
        &[json!({"append": "foundry.input", "rows": [
            input_row(4, "active", 2, "40.00"),
            input_row(5, "inactive", 2, "50.00"),
        ]})],
    );
    p.ok(&["run"]);
    assert_eq!(
        output(&p),
        vec![active(1, "10.00"), active(3, "30.00"), active(4, "40.00")]
    );

    // Build 3: nothing added, nothing appended.
    p.ok(&["run"]);
    assert_eq!(output(&p).len(), 3);

    // The output's snapshots are appends, each carrying the input's sequence number it
    // read up to, as pyiceberg sees them.
    let input = &pyiceberg(&p, &[json!({"snapshots": "foundry.input"})])[0]["snapshots"];
    let input_last = input.as_array().unwrap().last().unwrap()["sequence"]
        .as_i64()
        .unwrap();
    let snapshots = &pyiceberg(&p, &[json!({"snapshots": "foundry.output"})])[0]["snapshots"];
    let last = snapshots.as_array().unwrap().last().unwrap();
    assert_eq!(last["operation"], "append", "{snapshots}");
    let watermark = last["summary"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with("smelt.watermark."))
        .map(|(_, v)| text(v));
    assert_eq!(watermark, Some(input_last.to_string()), "{snapshots}");
    let status = p.status();
    assert_eq!(status["watermark"], input_last, "{status}");
    let input_last_id = &input.as_array().unwrap().last().unwrap()["id"];
    assert_eq!(&status["watermark_snapshot_id"], input_last_id, "{status}");
    let table = p.ok(&["status"]);
    assert!(
        table.contains(&format!("watermark = snapshot {input_last_id}")),
        "{table}"
    );

    // A rewrite of the input stops the flow (`on_rewrite: fail`) and writes nothing.
    pyiceberg(
        &p,
        &[
            json!({"overwrite": "foundry.input", "where": "id = 2", "rows": [input_row(2, "active", 3, "21.00")]}),
        ],
    );
    let (_, err) = p.fails(&["run"], 1);
    assert!(err.contains("overwrite"), "{err}");
    assert_eq!(output(&p).len(), 3);
}

#[test]
fn a_run_killed_before_its_iceberg_commit_is_finished_by_the_next_run_exactly_once() {
    let p = Project::with_pipeline(SEED_004);
    pyiceberg(
        &p,
        &[
            json!({"create": "foundry.input", "schema": [["id", "long"], ["status", "string"], ["ts", "timestamptz"], ["amount", "decimal(10,2)"]]}),
            json!({"append": "foundry.input", "rows": [input_row(1, "active", 1, "10.00"), input_row(2, "active", 1, "20.00")]}),
        ],
    );
    p.ok(&["run"]);
    pyiceberg(
        &p,
        &[json!({"append": "foundry.input", "rows": [input_row(3, "active", 2, "30.00")]})],
    );
    // Killed after its data files are written, before the catalog swap: nothing visible.
    let out = p.abort_at("before_target_commit", &["run"]);
    assert!(!out.status.success());
    assert_eq!(common::signal_of(&out.status), Some(6), "aborted: {out:?}");
    assert_eq!(output(&p).len(), 2, "nothing of the killed run is visible");
    p.ok(&["run"]);
    let ids: Vec<i64> = output(&p).iter().map(|r| r.0).collect();
    assert_eq!(ids, [1, 2, 3], "each row once");
}

#[test]
fn renamed_and_added_columns_are_read_by_field_id() {
    let p = Project::with_pipeline(PIPELINE);
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING, total BIGINT, note STRING)",
    );
    let table = "raw.orders";
    pyiceberg(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status", "amount"]}),
            json!({"append": table, "rows": [row("1", "new", 10), row("2", "new", 20)]}),
            // `amount` becomes `total` (same field id); `note` is new.
            json!({"rename": table, "from": "amount", "to": "total"}),
            json!({"add_column": table, "name": "note"}),
            json!({"append": table, "rows": [{"id": "2", "status": "active", "total": "21", "note": "late"}]}),
        ],
    );
    p.ok(&["run"]);
    let got: Vec<Vec<String>> = p
        .query("SELECT id, status, total, note FROM silver.orders ORDER BY id")
        .iter()
        .map(|r| {
            ["id", "status", "total", "note"]
                .iter()
                .map(|c| text(&r[*c]))
                .collect()
        })
        .collect();
    // The first file was written before the rename: its `amount` reads as `total`, and it
    // has no `note`.
    assert_eq!(
        got,
        vec![
            vec!["1".to_string(), "new".into(), "10".into(), "NULL".into()],
            vec!["2".to_string(), "active".into(), "21".into(), "late".into()],
        ]
    );
}

#[test]
fn expired_snapshots_after_the_watermark_are_refused_with_the_fix() {
    let p = Project::with_pipeline(PIPELINE);
    p.write("silver.sql", SILVER);
    let table = "raw.orders";
    pyiceberg(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status", "amount"]}),
            json!({"append": table, "rows": [row("1", "new", 10)]}),
        ],
    );
    p.ok(&["run"]);
    pyiceberg(
        &p,
        &[
            json!({"append": table, "rows": [row("2", "new", 20)]}),
            json!({"append": table, "rows": [row("3", "new", 30)]}),
            json!({"expire": table, "sequences": [2]}),
        ],
    );
    let (_, err) = p.fails(&["run"], 1);
    // Not a snapshot: the message names the oldest snapshot left by its (random) id.
    assert!(err.contains("are no longer all there"), "{err}");
    assert!(err.contains("--full-refresh"), "{err}");
    // The fix works: a rebuild reads the current snapshot.
    p.ok(&["run", "--full-refresh"]);
    let mut model = Model::default();
    model.write(&[
        row("1", "new", 10),
        row("2", "new", 20),
        row("3", "new", 30),
    ]);
    assert_eq!(silver(&p), model.rows());
}

#[test]
fn two_runs_at_once_never_append_twice() {
    let p = Project::with_pipeline(SEED_004);
    pyiceberg(
        &p,
        &[
            json!({"create": "foundry.input", "schema": [["id", "long"], ["status", "string"], ["ts", "timestamptz"], ["amount", "decimal(10,2)"]]}),
        ],
    );
    let mut refused = 0;
    for (build, id) in [(1, 1), (2, 2), (3, 3)] {
        pyiceberg(
            &p,
            &[json!({"append": "foundry.input", "rows": [input_row(id, "active", build, "1.00")]})],
        );
        let spawn = || p.piped(&["run"]).spawn().unwrap();
        let (a, b) = (spawn(), spawn());
        for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
            if common::refused_by_a_race(&out) {
                refused += 1;
            }
        }
        // Whatever the race did, one more run finishes the job, each row once.
        p.ok(&["run"]);
        let ids: Vec<i64> = output(&p).iter().map(|r| r.0).collect();
        assert_eq!(ids, (1..=id).collect::<Vec<_>>());
    }
    eprintln!("{refused} run(s) refused");
}

#[test]
fn a_rewritten_file_keeps_its_rows_in_one_new_file() {
    let p =
        Project::with_pipeline(&PIPELINE.replace("into: silver.orders", "into: ice.silver.orders"));
    p.write("silver.sql", SILVER);
    let table = "raw.orders";
    let many: Vec<Value> = (0..3000)
        .map(|i| row(&format!("{i:05}"), "new", i))
        .collect();
    pyiceberg(
        &p,
        &[
            json!({"create": table, "columns": ["id", "status", "amount"]}),
            json!({"append": table, "rows": many}),
        ],
    );
    p.ok(&["run"]);
    pyiceberg(
        &p,
        &[json!({"append": table, "rows": [row("00007", "active", 7)]})],
    );
    p.ok(&["run"]);
    let snapshots = &pyiceberg(&p, &[json!({"snapshots": "silver.orders"})])[0]["snapshots"];
    let last = &snapshots.as_array().unwrap().last().unwrap()["summary"];
    // The file holding key 00007 is replaced by one file of its other 2,999 rows, plus the
    // file of the updated row.
    assert_eq!(last["deleted-data-files"], "1", "{last}");
    assert_eq!(last["added-data-files"], "2", "{last}");
    assert_eq!(last["total-records"], "3000", "{last}");
}

#[test]
fn smelt_sql_reads_iceberg_tables_as_pyiceberg_does() {
    iceberg_sql::smelt_sql_reads_iceberg_tables_as_pyiceberg_does();
}
