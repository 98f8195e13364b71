//! Races that happen by construction: one `smelt` process is held at a failpoint
//! (`SMELT_FAILPOINT=<point>:wait=<file>`, the commit it is about to make staged), another
//! command commits to the same tables meanwhile, then the held one goes on. Each case ends
//! with the tables a run of the same work one command at a time leaves: nothing applied
//! twice, nothing lost; a loser names the table and says "run again".

use crate::common::{self, Project, without_audit};

/// product2_deletes writing merge-on-read, with three runs' worth of changes applied (so
/// silver has deletion vectors for `optimize` to purge) and the restore waiting in bronze.
fn lake_behind() -> Project {
    let p = Project::product2_deletes();
    let pipeline = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &format!("write_mode: merge_on_read\n{pipeline}"),
    );
    for step in ["../product2/bronze.sql", "../product2/insert_1.sql"] {
        p.ok(&["sql", "-f", step]);
    }
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "soft_delete.sql"]);
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "late.sql"]);
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "restore.sql"]);
    p
}

/// The files of SCD1 silver's folder (data and deletion vectors), sorted.
fn data_files(p: &Project) -> Vec<String> {
    let dir = p.file("lake/medallion_demo/product2__silver");
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// Every apply flow's tables, rows sorted.
fn tables(p: &Project) -> Vec<(String, Vec<serde_json::Value>)> {
    [
        "medallion_demo.product2__silver",
        "medallion_demo.product2__silver__tombstones",
        "medallion_demo.product2__history",
    ]
    .iter()
    .map(|t| {
        let mut rows = without_audit(&p.query(&format!("SELECT * FROM {t}")));
        // A tombstone's time of deletion is the run's.
        for r in &mut rows {
            r.as_object_mut().unwrap().remove("_deleted_at");
        }
        rows.sort_by_key(|r| r.to_string());
        (t.to_string(), rows)
    })
    .collect()
}

/// Requires `got` to equal `want`, naming the rows only one side has.
fn same(
    got: &[(String, Vec<serde_json::Value>)],
    want: &[(String, Vec<serde_json::Value>)],
    case: &str,
) {
    let mut diff = String::new();
    for ((table, g), (_, w)) in got.iter().zip(want) {
        for r in g.iter().filter(|r| !w.contains(r)) {
            diff.push_str(&format!("\n{table}: only after the race: {r}"));
        }
        for r in w.iter().filter(|r| !g.contains(r)) {
            diff.push_str(&format!("\n{table}: only one at a time: {r}"));
        }
    }
    assert!(diff.is_empty(), "{case}:{diff}");
}

/// What the work leaves when its commands run one at a time.
fn reference() -> Vec<(String, Vec<serde_json::Value>)> {
    let p = lake_behind();
    p.ok(&["run"]);
    tables(&p)
}

/// The held command's end: success, or refused by the race, naming the table and saying
/// "run again". Returns whether it was refused.
fn lost_or_won(out: &std::process::Output) -> bool {
    let lost = common::refused_by_a_race(out);
    eprintln!(
        "held command {}: {}",
        if lost { "lost" } else { "won" },
        String::from_utf8_lossy(&out.stderr).trim()
    );
    lost
}

#[test]
fn a_run_held_at_its_commit_loses_to_a_run_that_committed_first() {
    let p = lake_behind();
    let held = p.held_at("before_silver_commit", &["run", "product2"]);
    p.ok(&["run", "product2"]);
    let out = held.release();
    assert!(
        lost_or_won(&out),
        "the held run committed over the other's: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    p.ok(&["run"]);
    same(&tables(&p), &reference(), "race");
}

#[test]
fn a_run_beside_optimize_keeps_every_change() {
    let want = reference();
    // The run's commit after optimize's.
    let p = lake_behind();
    let held = p.held_at("before_silver_commit", &["run", "product2"]);
    p.ok(&["optimize"]);
    lost_or_won(&held.release());
    p.ok(&["run"]);
    same(&tables(&p), &want, "a run held while optimize committed");
    // Optimize's commit after the run's.
    let p = lake_behind();
    let held = p.held_at("before_optimize_commit", &["optimize"]);
    p.ok(&["run"]);
    lost_or_won(&held.release());
    p.ok(&["run"]);
    same(&tables(&p), &want, "optimize held while a run committed");
}

#[test]
fn a_run_beside_vacuum_keeps_every_change() {
    let want = reference();
    // Vacuum (no retention) runs while a run's files are written and not yet committed.
    let p = lake_behind();
    let before = data_files(&p);
    let held = p.held_at("before_silver_commit", &["run", "product2"]);
    let staged: Vec<String> = data_files(&p)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    assert!(!staged.is_empty(), "the held run wrote no file yet");
    p.ok(&["vacuum", "--retain", "0s"]);
    let left = data_files(&p);
    assert!(
        staged.iter().all(|f| left.contains(f)),
        "vacuum deleted files of the run still writing: {staged:?}, left {left:?}"
    );
    lost_or_won(&held.release());
    p.ok(&["run"]);
    same(&tables(&p), &want, "a run held while vacuum deleted");
}

#[test]
fn a_run_beside_dml_on_its_bronze_applies_the_dml_once() {
    let update = "UPDATE medallion_demo.product2__bronze SET Name = 'renamed' \
                  WHERE Id = '01t000000000001AAA'";
    let want = {
        let p = lake_behind();
        p.ok(&["run"]);
        p.ok(&["sql", update]);
        p.ok(&["run"]);
        tables(&p)
    };
    let p = lake_behind();
    let held = p.held_at("before_silver_commit", &["run"]);
    p.ok(&["sql", update]);
    let out = held.release();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    p.ok(&["run"]);
    same(&tables(&p), &want, "race");
}

#[test]
fn two_flows_of_one_lake_both_write_the_event_log() {
    let p = lake_behind();
    let held = p.held_at("before_event_log", &["run", "product2"]);
    p.ok(&["run", "product2_history"]);
    let out = held.release();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("could not be written"), "{stderr}");
    let runs = p.query(
        "SELECT flow, count(*) AS n FROM _smelt.event_log WHERE status = 'applied' \
         GROUP BY flow ORDER BY flow",
    );
    assert_eq!(
        runs,
        [
            serde_json::json!({"flow": "product2", "n": 4}),
            serde_json::json!({"flow": "product2_history", "n": 4})
        ]
    );
    same(&tables(&p), &reference(), "race");
}
