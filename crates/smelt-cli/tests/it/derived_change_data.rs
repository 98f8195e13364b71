//! `change_data: derived`: a merge-on-read silver whose commits write no change data file;
//! change-feed readers derive each commit's changes from the rows its deletion vectors and
//! removed files delete and the rows its new files add. The expected rows and changes are
//! a model the test keeps; the silver and its change feed are read by delta-rs' kernel
//! (its own scan and change-feed scan, not smelt), by `smelt sql` and by a downstream flow
//! that fails on a sequence conflict.

use std::collections::BTreeMap;

use arrow::array::Array;
use arrow::util::display::array_value_to_string;
use serde_json::Value;

use crate::common::{self, Project};
use crate::merge_on_read::{kernel_rows, of_kind, schemas, sql_rows};

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
  derived:
    apply:
      from: raw.orders
      into: silver.derived
      schema: derived.sql
      keys: [id]
      sequence_by: [seq]
      apply_as_deletes: status = 'deleted'
      write_mode: merge_on_read
      change_data: derived
  gold:
    apply:
      from: silver.derived
      into: gold.orders
      schema: orders.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
      source_deletes: apply
      on_sequence_conflict: fail
";

/// The change feed of `table` at `version` as delta-rs' kernel reads it: `(change type,
/// id, status, seq)`, sorted.
fn kernel_changes(p: &Project, table: &str, version: u64) -> Vec<[String; 4]> {
    let dir = p.file(&format!("lake/{}", table.replace('.', "/")));
    let mut rows = Vec::new();
    for batch in smelt_bench::kernel::changes(&dir, version, Some(version)).unwrap() {
        let col = |name: &str| batch.column_by_name(name).unwrap().clone();
        let cols = [col("_change_type"), col("id"), col("status"), col("seq")];
        for i in 0..batch.num_rows() {
            rows.push(cols.clone().map(|c| {
                if c.is_null(i) {
                    "NULL".to_string()
                } else {
                    array_value_to_string(&c, i).unwrap()
                }
            }));
        }
    }
    rows.sort();
    rows
}

/// Every commit's actions of a Delta table, in version order.
pub(crate) fn log(p: &Project, table: &str) -> Vec<Vec<Value>> {
    let dir = p.file(&format!("lake/{}/_delta_log", table.replace('.', "/")));
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        })
        .collect()
}

/// Silver as a model (id → status, seq) and the changes of each step as change-feed readers
/// see them, in both modes.
#[derive(Default)]
pub(crate) struct Model {
    rows: BTreeMap<String, (String, String)>,
    seq: u32,
}

/// One step's bronze rows (an `INSERT`'s `VALUES`) and its changes, `(change type, id,
/// status, seq)` sorted: `derived`, as readers derive them (`delete`, `insert`); `written`,
/// as change data files hold them (`update_preimage`, `update_postimage`, …).
pub(crate) struct Step {
    pub(crate) values: String,
    pub(crate) derived: Vec<[String; 4]>,
    pub(crate) written: Vec<[String; 4]>,
}

/// The steps of the tests: inserts; updates and a delete; an unchanged row (a newer
/// sequence), an update, a key back; every row of the second file gone.
pub(crate) const STEPS: [&[(&str, &str)]; 4] = [
    &[("1", "new"), ("2", "new"), ("3", "new"), ("5", "new")],
    &[("1", "paid"), ("2", "deleted"), ("4", "new")],
    &[("3", "new"), ("1", "shipped"), ("2", "new")],
    &[("4", "deleted"), ("5", "deleted"), ("1", "closed")],
];

impl Model {
    /// The changes `rows` (`(id, status)`, a key once, `deleted` deletes) make, each with
    /// the next sequence.
    pub(crate) fn step(&mut self, rows: &[(&str, &str)]) -> Step {
        let change = |kind: &str, id: &str, (status, seq): &(String, String)| {
            [
                kind.to_string(),
                id.to_string(),
                status.clone(),
                seq.clone(),
            ]
        };
        let (mut values, mut derived, mut written) = (Vec::new(), Vec::new(), Vec::new());
        for (id, status) in rows {
            self.seq += 1;
            let new = (status.to_string(), format!("{:03}", self.seq));
            values.push(format!("('{id}', '{}', '{}')", new.0, new.1));
            let old = self.rows.remove(*id);
            if let Some(old) = &old {
                derived.push(change("delete", id, old));
            }
            if *status == "deleted" {
                written.extend(old.iter().map(|old| change("delete", id, old)));
                continue;
            }
            derived.push(change("insert", id, &new));
            match &old {
                Some(old) => written.extend([
                    change("update_preimage", id, old),
                    change("update_postimage", id, &new),
                ]),
                None => written.push(change("insert", id, &new)),
            }
            self.rows.insert(id.to_string(), new);
        }
        derived.sort();
        written.sort();
        Step {
            values: values.join(", "),
            derived,
            written,
        }
    }

    /// Silver's `(id, status)` rows, by id.
    pub(crate) fn rows(&self) -> Vec<Vec<String>> {
        self.rows
            .iter()
            .map(|(id, (status, _))| vec![id.clone(), status.clone()])
            .collect()
    }
}

#[test]
fn derived_change_data_writes_no_change_data_and_reads_as_deletes_and_inserts() {
    let p = Project::with_pipeline(PIPELINE);
    schemas(
        &p,
        &["silver.cow", "silver.derived", "gold.orders"],
        "status STRING, seq STRING",
    );
    p.ok(&[
        "sql",
        "CREATE TABLE raw.orders (id STRING, status STRING, seq STRING)",
    ]);
    let mut model = Model::default();
    for (i, rows) in STEPS.iter().enumerate() {
        let step = model.step(rows);
        p.ok(&[
            "sql",
            &format!("INSERT INTO raw.orders VALUES {}", step.values),
        ]);
        // The updates and delete of the second step killed before the silver commit: the
        // rerun commits them once.
        if i == 1 {
            let out = p.abort_at("before_silver_commit", &["run", "derived"]);
            assert_eq!(common::signal_of(&out.status), Some(6), "aborted: {out:?}");
        }
        let flows = p.flows(&["run"]);
        let counts = |flow: &str| {
            let r = flows.iter().find(|f| f["flow"] == flow).unwrap().clone();
            let n = |k: &str| r[k].as_u64().unwrap();
            (
                n("inserted"),
                n("updated") + n("unchanged"),
                n("deleted"),
                n("stale"),
            )
        };
        // The same changes applied; unchanged rows are not told apart (the guard reads no
        // stored data) but are written as copy-on-write writes them.
        assert_eq!(counts("derived"), counts("cow"), "{flows:?}");
        let gold = flows.iter().find(|f| f["flow"] == "gold").unwrap();
        assert_eq!(gold["sequence_conflicts"], 0, "{gold}");
        let expected = model.rows();
        assert_eq!(
            kernel_rows(&p, "silver.derived", &["id", "status"]),
            expected,
            "kernel scan"
        );
        assert_eq!(sql_rows(&p, "silver.derived"), expected, "smelt sql");
        assert_eq!(sql_rows(&p, "silver.cow"), expected, "copy-on-write");
        assert_eq!(sql_rows(&p, "gold.orders"), expected, "downstream flow");
        let version = log(&p, "silver.derived").len() as u64 - 1;
        assert_eq!(
            kernel_changes(&p, "silver.derived", version),
            step.derived,
            "kernel change feed of version {version}"
        );
    }

    // No commit of the derived silver wrote change data, each after the first marked
    // rows in deletion vectors, and each says its change data is derived.
    let log = log(&p, "silver.derived");
    for (version, commit) in log.iter().enumerate() {
        assert!(
            of_kind(commit, "cdc").is_empty(),
            "version {version}: {commit:?}"
        );
        let info = of_kind(commit, "commitInfo")[0];
        if version > 0 {
            assert_eq!(info["smelt.change_data"], "derived", "{info}");
        }
    }
    assert!(
        log.iter().any(|c| of_kind(c, "add")
            .iter()
            .any(|a| a["deletionVector"].is_object())),
        "rows marked in deletion vectors"
    );
    // The feed is on (a flow reads the table): readers may derive it.
    let metadata = of_kind(&log[0], "metaData")[0];
    assert_eq!(
        metadata["configuration"]["delta.enableChangeDataFeed"],
        "true"
    );
}

#[test]
fn derived_change_data_is_refused_where_it_cannot_hold() {
    let p = Project::with_pipeline(
        "lake: ./lake
catalogs:
  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}
flows:
  cow:
    apply:
      from: raw.orders
      into: silver.cow
      keys: [id]
      change_data: derived
  iceberg:
    apply:
      from: raw.orders
      into: ice.silver.orders
      keys: [id]
      write_mode: merge_on_read
      change_data: derived
",
    );
    let (_, err) = p.fails(&["validate"], 2);
    insta::assert_snapshot!("derived_change_data_refused", err);
    let pipeline = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write("smelt.yaml", &pipeline.replace("derived\n", "derive\n"));
    let (_, err) = p.fails(&["validate"], 2);
    insta::assert_snapshot!("change_data_misspelt", err);
}
