//! Quarantine through the real binary: rejected changes land in `<silver>__rejects` once,
//! even when a run crashes after writing them.

use crate::common::Project;

const REJECTS: &str = "SELECT rule, column_name, raw_value, target_type, source_version FROM medallion_demo.product2__silver__rejects";

/// product2 with `on_cast_error: quarantine` and an expectation, step 1 applied, then a
/// bronze commit with one bad IsActive, one missing Name and one good row.
fn project() -> Project {
    let p = Project::product2();
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let yaml = yaml.replace("on_cast_error: null ", "on_cast_error: quarantine ");
    p.write(
        "smelt.yaml",
        &format!(
            "{yaml}      expect:\n        named: Name IS NOT NULL\n      on_violation: quarantine\n"
        ),
    );
    p.bronze_step1();
    p.ok(&["run"]);
    p.ok(&[
        "sql",
        "INSERT INTO medallion_demo.product2__bronze (Id, Name, IsActive) VALUES \
         ('01t000000000009AAA', 'bad flag', 'maybe'), \
         ('01t000000000010AAA', NULL, 'true'), \
         ('01t000000000008AAA', 'good', 'true')",
    ]);
    p
}

fn ids(p: &Project) -> Vec<String> {
    p.silver()
        .iter()
        .map(|r| r["Id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn rejected_changes_are_written_once_across_crashes() {
    for point in [
        None,
        Some("before_rejects_commit"),
        Some("before_silver_commit"),
    ] {
        let p = project();
        if let Some(point) = point {
            let out = p.run_with_failpoint(point);
            assert_eq!(out.status.code(), Some(1), "{point}");
            assert_eq!(ids(&p).len(), 3, "{point}: silver untouched");
        }
        let f = p.flows(&["run"])[0].clone();
        assert_eq!(f["quarantined"].as_i64(), Some(2), "{point:?}: {f}");
        assert_eq!(f["inserted"].as_i64(), Some(1), "{point:?}: {f}");
        assert!(ids(&p).contains(&"01t000000000008AAA".to_string()));
        let rejects = p.query(&format!("{REJECTS} ORDER BY rule"));
        assert_eq!(rejects.len(), 2, "{point:?}: written once: {rejects:?}");
        assert_eq!(rejects[0]["rule"], "cast");
        assert_eq!(rejects[0]["column_name"], "IsActive");
        assert_eq!(rejects[0]["raw_value"], "maybe");
        assert_eq!(rejects[0]["target_type"], "BOOL");
        assert_eq!(rejects[0]["source_version"], 3);
        assert_eq!(rejects[1]["rule"], "named");

        // A full refresh re-reads those versions: still no duplicate rejects.
        p.ok(&["run", "--full-refresh"]);
        assert_eq!(p.query(REJECTS).len(), 2, "{point:?}");
    }
}
