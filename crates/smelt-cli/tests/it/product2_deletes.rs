//! The product2_deletes example (seed 000 with soft deletes) through the real binary: a
//! delete, late changes that must not resurrect it, a restore; crashes at each write.

use crate::common::Project;
use serde_json::Value;

const SILVER: &str = "SELECT Id, Name, IsActive, IsDeleted, SystemModstamp FROM medallion_demo.product2__silver ORDER BY Id";
const TOMBSTONES: &str =
    "SELECT Id, SystemModstamp FROM medallion_demo.product2__silver__tombstones ORDER BY Id";

/// The bronze file of each step after the first.
const STEPS: [&str; 3] = ["soft_delete.sql", "late.sql", "restore.sql"];

const HISTORY: &str = "SELECT Id, Name, IsDeleted, __START_AT, __END_AT FROM medallion_demo.product2__history ORDER BY Id, __START_AT";

/// `examples/product2_deletes/expected/step<step>.json`: silver after that step.
fn expected(step: usize) -> Vec<Value> {
    expected_file(&format!("step{step}.json"))
}

/// A file of `examples/product2_deletes/expected/`, as JSON rows.
fn expected_file(name: &str) -> Vec<Value> {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/product2_deletes/expected")
        .join(name);
    let text = std::fs::read_to_string(file).unwrap();
    serde_json::from_str::<Value>(&text)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn run_json(p: &Project) -> Value {
    p.flows(&["run"])[0].clone()
}

fn counts(f: &Value, names: &[&str]) -> Vec<i64> {
    names.iter().map(|n| f[*n].as_i64().unwrap()).collect()
}

#[test]
fn soft_delete_late_changes_and_restore_match_the_expected_tables() {
    let p = Project::product2_deletes();
    p.ok(&["sql", "-f", "../product2/bronze.sql"]);
    p.ok(&["sql", "-f", "../product2/insert_1.sql"]);
    run_json(&p);
    assert_eq!(p.query(SILVER), expected(1));

    // Step 2: ...002 deleted, ...003 renamed.
    p.ok(&["sql", "-f", STEPS[0]]);
    let f = run_json(&p);
    assert_eq!(
        counts(&f, &["deleted", "updated", "tombstones_written"]),
        [1, 1, 1]
    );
    assert_eq!(p.query(SILVER), expected(2));
    let tombs = p.query(TOMBSTONES);
    assert_eq!(tombs.len(), 1);
    assert_eq!(tombs[0]["Id"], "01t000000000002AAA");
    assert_eq!(tombs[0]["SystemModstamp"], "2026-08-01T00:00:00Z");

    // Step 3: late edits are older than the delete and the rename: both stale.
    p.ok(&["sql", "-f", STEPS[1]]);
    let f = run_json(&p);
    assert_eq!(counts(&f, &["stale", "inserted", "deleted"]), [2, 1, 0]);
    assert_eq!(p.query(SILVER), expected(3));

    // Step 4: a newer change restores ...002.
    p.ok(&["sql", "-f", STEPS[2]]);
    let f = run_json(&p);
    assert_eq!(counts(&f, &["inserted", "stale"]), [1, 0]);
    assert_eq!(p.query(SILVER), expected(4));

    // SCD2: late edits split the versions they fall in, the delete closed ...002's
    // version, the restore opened a new one.
    assert_eq!(p.query(HISTORY), expected_file("history_step4.json"));

    // Replaying every version is a no-op: the tombstone still guards, the history stays.
    let flows = p.flows(&["run", "--since", "2000-01-01"]);
    assert_eq!(
        counts(
            &flows[0],
            &["inserted", "updated", "deleted", "tombstones_written"]
        ),
        [0, 0, 0, 0]
    );
    assert_eq!(
        counts(
            &flows[1],
            &["inserted", "updated", "deleted", "files_written"]
        ),
        [0, 0, 0, 0]
    );
    assert_eq!(p.query(SILVER), expected(4));
    assert_eq!(p.query(HISTORY), expected_file("history_step4.json"));

    // A full refresh rebuilds both from the bronze snapshot, in one commit each: the same
    // tables. ...002's latest change is the restore, so no tombstone is left.
    let flows = p.flows(&["run", "--full-refresh"]);
    assert_eq!(flows[0]["mode"], "rebuild");
    assert_eq!(
        counts(&flows[0], &["inserted", "tombstones_written"]),
        [4, 0]
    );
    assert_eq!(p.query(SILVER), expected(4));
    assert_eq!(p.query(HISTORY), expected_file("history_step4.json"));
    assert!(p.query(TOMBSTONES).is_empty());
}

#[test]
fn a_crash_at_either_commit_of_a_delete_reruns_to_the_same_tables() {
    for point in ["before_tombstones_commit", "before_silver_commit"] {
        let p = Project::product2_deletes();
        p.ok(&["sql", "-f", "../product2/bronze.sql"]);
        p.ok(&["sql", "-f", "../product2/insert_1.sql"]);
        p.ok(&["run"]);
        p.ok(&["sql", "-f", STEPS[0]]);
        let out = p.run_with_failpoint(point);
        assert_eq!(out.status.code(), Some(1), "{point}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(point), "{stderr}");
        // Nothing of the run is visible in silver.
        assert_eq!(p.query(SILVER), expected(1), "{point}");

        let f = run_json(&p);
        assert_eq!(counts(&f, &["deleted", "updated"]), [1, 1], "{point}");
        assert_eq!(p.query(SILVER), expected(2), "{point}");
        assert_eq!(
            p.query(TOMBSTONES).len(),
            1,
            "{point}: one tombstone, not two"
        );

        p.ok(&["sql", "-f", STEPS[1]]);
        run_json(&p);
        assert_eq!(p.query(SILVER), expected(3), "{point}");
    }
}
