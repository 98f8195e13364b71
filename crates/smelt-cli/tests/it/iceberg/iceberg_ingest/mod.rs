//! Ingest flows into an Iceberg bronze: each landed file loaded once, across runs, snapshot
//! expiry (the file ledger lives beside the table, not only in snapshot summaries), a run
//! killed between its commit and its ledger entry, and runs at once. pyiceberg reads the
//! bronze; the expected rows are the landed files' rows, each once.

use serde_json::json;

use crate::common::{self, Project, text};

const PIPELINE: &str = with_catalog!(
    "flows:
  land:
    ingest:
      from: ./landing
      into: ice.raw.orders
      format: csv
"
);

const BRONZE: &str = "raw.orders";

fn project() -> Project {
    let p = Project::with_pipeline(PIPELINE);
    std::fs::create_dir_all(p.file("landing")).unwrap();
    std::fs::create_dir_all(p.file("warehouse")).unwrap();
    p
}

/// The bronze as pyiceberg reads it: (id, status, file name) rows, sorted.
fn bronze(p: &Project) -> Vec<(String, String, String)> {
    let out = super::pyiceberg(p, &[json!({"scan": BRONZE})]);
    let mut rows: Vec<_> = out[0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let file = text(&r["_datasource"]);
            let name = file.rsplit('/').next().unwrap().to_string();
            (text(&r["id"]), text(&r["status"]), name)
        })
        .collect();
    rows.sort();
    rows
}

/// Lands `name` with one row per id (status `s<id>`), and returns those rows.
fn land(p: &Project, name: &str, ids: &[u32]) -> Vec<(String, String, String)> {
    let mut body = "id,status\n".to_string();
    for id in ids {
        body.push_str(&format!("{id},s{id}\n"));
    }
    p.write(&format!("landing/{name}"), &body);
    ids.iter()
        .map(|id| (id.to_string(), format!("s{id}"), name.to_string()))
        .collect()
}

fn snapshot_count(p: &Project) -> usize {
    super::pyiceberg(p, &[json!({"snapshots": BRONZE})])[0]["snapshots"]
        .as_array()
        .unwrap()
        .len()
}

/// The ledger entries written beside the table (in the folder of its one table uuid).
fn ledger_files(p: &Project) -> usize {
    let Ok(tables) = std::fs::read_dir(p.file("warehouse/raw/orders/_smelt/ledger")) else {
        return 0;
    };
    let tables: Vec<_> = tables.flatten().collect();
    assert_eq!(tables.len(), 1, "one table uuid");
    std::fs::read_dir(tables[0].path().join("smelt.ingest.files")).map_or(0, |d| d.count())
}

pub fn each_file_is_loaded_once_past_snapshot_expiry() {
    let p = project();
    let mut want = land(&p, "a.csv", &[1, 2]);
    p.ok(&["run"]);
    want.extend(land(&p, "b.csv", &[3]));
    p.ok(&["run"]);
    want.extend(land(&p, "c.csv", &[4, 5]));
    p.ok(&["run"]);
    want.sort();
    assert_eq!(bronze(&p), want);
    assert_eq!(ledger_files(&p), 3);

    // Snapshots 1 and 2 expire: their summaries, which also list the files they loaded,
    // are gone; the ledger beside the table still has them.
    super::pyiceberg(&p, &[json!({"expire": BRONZE, "sequences": [1, 2]})]);
    assert_eq!(snapshot_count(&p), 1);
    let out = p.ok(&["run"]);
    assert!(
        out.contains("up to date: no new file among 3 found"),
        "{out}"
    );
    want.extend(land(&p, "d.csv", &[6]));
    want.sort();
    p.ok(&["run"]);
    assert_eq!(bronze(&p), want);
    assert_eq!(
        p.query(&format!("SELECT count(*) AS n FROM ice.{BRONZE}"))[0]["n"],
        json!(want.len())
    );
}

pub fn a_run_killed_between_its_commit_and_its_ledger_entry_loads_nothing_twice() {
    let p = project();
    let mut want = land(&p, "a.csv", &[1, 2]);
    let out = p.abort_at("before_iceberg_ledger", &["run"]);
    assert_eq!(common::signal_of(&out.status), Some(6), "{out:?}");
    // The commit landed; its entry is only in the snapshot summary.
    assert_eq!(snapshot_count(&p), 1);
    assert_eq!(ledger_files(&p), 0);
    let out = p.ok(&["run"]);
    assert!(
        out.contains("up to date: no new file among 1 found"),
        "{out}"
    );
    // Read once, the entry is written beside the table: expiry cannot lose it now.
    assert_eq!(ledger_files(&p), 1);
    want.extend(land(&p, "b.csv", &[3]));
    p.ok(&["run"]);
    super::pyiceberg(&p, &[json!({"expire": BRONZE, "sequences": [1]})]);
    want.extend(land(&p, "c.csv", &[4]));
    p.ok(&["run"]);
    want.sort();
    assert_eq!(bronze(&p), want);
}

/// Rounds of two runs at once, each round with a new file, until a race has happened
/// (a run refused by the other's commit) and at least three rounds ran; at most ten.
pub fn runs_at_once_load_each_file_once() {
    let p = project();
    let mut want = Vec::new();
    let mut refused = 0;
    let mut round = 0u32;
    while round < 3 || (refused == 0 && round < 10) {
        want.extend(land(
            &p,
            &format!("{round}.csv"),
            &[round * 10, round * 10 + 1],
        ));
        let spawn = || p.piped(&["run"]).spawn().unwrap();
        let (a, b) = (spawn(), spawn());
        for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
            if common::refused_by_a_race(&out) {
                refused += 1;
            } else {
                assert!(out.status.success(), "{out:?}");
            }
        }
        p.ok(&["run"]);
        want.sort();
        assert_eq!(bronze(&p), want, "round {round}");
        round += 1;
    }
    assert!(refused > 0, "no race in {round} rounds of two runs at once");
}
