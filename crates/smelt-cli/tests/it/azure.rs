//! The lake on Azure Blob Storage: the Azure emulator (Azurite, from npm, installed by
//! `testenv/setup.sh`) on a loopback port for each test. Expected silver comes from the
//! same steps on a local lake.

use crate::common::{self, Project, without_audit};
use smelt_test::services::Azurite;

/// `smelt --lake <lake> <args>` against the emulator; requires success, returns stdout.
fn on(p: &Project, az: &Azurite, lake: &str, args: &[&str]) -> String {
    p.ok_with(&az.env(), &[&["--lake", lake], args].concat())
}

#[test]
fn product2_with_the_lake_on_azure_gives_the_silver_of_a_local_lake_and_never_applies_twice() {
    let az = Azurite::start("lake");
    let lake = "az://lake/warehouse";
    let remote = Project::product2();
    let local = Project::product2();
    let silver = "SELECT * FROM medallion_demo.product2__silver ORDER BY Id";
    let mut refused = 0;
    for (i, step) in ["insert_1.sql", "insert_2.sql"].iter().enumerate() {
        if i == 0 {
            on(&remote, &az, lake, &["sql", "-f", "bronze.sql"]);
            local.ok(&["sql", "-f", "bronze.sql"]);
        }
        on(&remote, &az, lake, &["sql", "-f", step]);
        local.ok(&["sql", "-f", step]);
        local.ok(&["run"]);
        // Two runs at once: the store's precondition lets one commit.
        let spawn = || {
            remote
                .piped(&["--lake", lake, "run"])
                .envs(az.env())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
            if common::refused_by_a_race(&out) {
                refused += 1;
            }
        }
        on(&remote, &az, lake, &["run"]);
        let on_azure: Vec<serde_json::Value> =
            serde_json::from_str(&on(&remote, &az, lake, &["--json", "sql", silver])).unwrap();
        assert!(!on_azure.is_empty());
        assert_eq!(
            without_audit(&on_azure),
            without_audit(&local.query(silver)),
            "after {step}"
        );
    }
    // And a race by construction: a run held at its commit while another commits; the
    // store's precondition refuses the held one.
    let change = "INSERT INTO medallion_demo.product2__bronze (Id, Name) VALUES \
                  ('01t000000000099AAA', 'raced')";
    remote.write("raced.sql", change);
    local.write("raced.sql", change);
    on(&remote, &az, lake, &["sql", "-f", "raced.sql"]);
    local.ok(&["sql", "-f", "raced.sql"]);
    local.ok(&["run"]);
    let held = remote.held_at_with(&az.env(), "before_silver_commit", &["--lake", lake, "run"]);
    on(&remote, &az, lake, &["run"]);
    assert!(common::refused_by_a_race(&held.release()));
    refused += 1;
    let on_azure: Vec<serde_json::Value> =
        serde_json::from_str(&on(&remote, &az, lake, &["--json", "sql", silver])).unwrap();
    assert_eq!(
        without_audit(&on_azure),
        without_audit(&local.query(silver))
    );
    assert!(!remote.path().join("lake").exists());
    eprintln!("{refused} run(s) refused");
}
