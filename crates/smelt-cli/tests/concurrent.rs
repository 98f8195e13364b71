//! Two `smelt run` of one pipeline at once: one commits, the other's commit is refused with
//! a clear message, and nothing is applied twice. Compared with runs one at a time.

mod common;

use std::process::{Output, Stdio};

use common::{Project, without_audit};

/// Starts two `smelt run` at the same moment; their outputs.
fn two_runs(p: &Project) -> [Output; 2] {
    let spawn = || {
        p.smelt_process()
            .arg("run")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()]
}

#[test]
fn concurrent_runs_never_apply_twice() {
    let p = Project::product2();
    let reference = Project::product2();
    let mut refused = 0;
    for (i, step) in ["insert_1.sql", "insert_2.sql"].iter().enumerate() {
        for q in [&p, &reference] {
            if i == 0 {
                q.ok(&["sql", "-f", "bronze.sql"]);
            }
            q.ok(&["sql", "-f", step]);
        }
        reference.ok(&["run"]);
        for out in two_runs(&p) {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                assert_eq!(out.status.code(), Some(1), "{stderr}");
                assert!(
                    stderr.contains("another writer committed first")
                        && stderr.contains("hint: run again"),
                    "{stderr}"
                );
                refused += 1;
            }
        }
        // Whatever the race did, one more run finishes the job, and silver holds each key
        // once, as the runs one at a time left it.
        p.ok(&["run"]);
        assert_eq!(
            without_audit(&p.silver()),
            without_audit(&reference.silver())
        );
    }
    // Runs that both read the same version cannot both commit; when the race was lost by
    // neither (one finished before the other started), there was nothing to refuse.
    eprintln!("{refused} run(s) refused");
}
