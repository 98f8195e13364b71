//! Seed 004 on Iceberg (`examples/foundry_iceberg`) on both engines: one input table that
//! pyiceberg writes, the example's two transforms run embedded into one namespace and on the
//! Spark cluster into another (the same catalog, the same snapshots read), their outputs
//! read back by pyiceberg and compared, build by build; the Spark runs killed between their
//! statements and run again end in the same tables; an embedded run over the tables the
//! Spark engine wrote finds nothing to do.

use serde_json::{Value, json};

use crate::common::{self, Project};

/// The report fields the engines cannot agree on for these flows (beyond
/// [`super::NOT_COMPARED`]), and why: every other field is compared.
const NOT_COMPARED: &[(&str, &str)] = &[(
    "into",
    "each engine writes a namespace of its own in the one catalog (`demo_e`, `demo_s`)",
)];

/// The example's pipeline with its outputs in namespace `ns`, the schema file `schema`; the
/// changelog transform also quarantines an active row of 35.00 or more (a rejects table).
fn pipeline(example: &str, ns: &str, schema: &str, head: &str) -> String {
    let flows = &example[example.find("catalogs:").unwrap()..];
    let flows = flows
        .replace("foundry.demo.active", &format!("foundry.{ns}.active"))
        .replace("foundry.demo.current", &format!("foundry.{ns}.current"))
        .replace("schema: current.sql", &format!("schema: {schema}"))
        .replace(
            "      source_deletes: apply",
            "      source_deletes: apply\n      expect:\n        small: amount < 35\n      on_violation: quarantine",
        );
    format!("{head}{flows}")
}

/// An output table as pyiceberg reads it (`testenv/iceberg_tables.py` on the example's
/// catalog), by id, less the columns `drop`.
fn scan(p: &Project, table: &str, drop: &[&str]) -> Vec<Value> {
    let out = std::process::Command::new(python())
        .arg(testenv().join("iceberg_tables.py"))
        .args(["--catalog", "foundry", "--uri"])
        .arg(format!("sqlite:///{}", p.file("catalog.db").display()))
        .arg("--warehouse")
        .arg(p.file("warehouse"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            let step = json!({ "scan": table }).to_string();
            child.stdin.take().unwrap().write_all(step.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "pyiceberg: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut rows: Vec<Value> = printed["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut r = r.clone();
            for d in drop {
                r.as_object_mut().unwrap().remove(*d);
            }
            r
        })
        .collect();
    rows.sort_by_key(|r| r.to_string());
    rows
}

fn testenv() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testenv")
}

fn python() -> std::path::PathBuf {
    testenv().join(".venv/bin/python")
}

fn input(p: &Project, step: &str) {
    let out = std::process::Command::new(python())
        .arg(p.file("input.py"))
        .arg(step)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "input.py {step}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The tables `counts` names equal in both namespaces, each with as many rows as it says
/// (the example's outputs: its README's rows, less those the expectation quarantines).
fn same_outputs(p: &Project, step: &str, counts: &[(&str, usize)]) {
    let own = ["_update_timestamp", "run_id", "rejected_at", "raw_row"];
    for (table, n) in counts {
        let e = scan(p, &format!("demo_e.{table}"), &own);
        let s = scan(p, &format!("demo_s.{table}"), &own);
        assert_eq!(e.len(), *n, "{step}: demo_e.{table}: {e:?}");
        assert_eq!(
            e, s,
            "{step}: `{table}` differs (left embedded, right Spark)"
        );
    }
}

fn same_reports(step: &str, e: &[Value], s: &[Value]) {
    let also_not: Vec<&str> = NOT_COMPARED.iter().map(|(f, _)| *f).collect();
    super::same_reports_but(step, &also_not, &(e.to_vec(), s.to_vec()));
}

/// The Spark run killed (SIGABRT) at failpoint `point`, then the reports of its rerun.
fn killed_then_run(p: &Project, point: &str) -> Vec<Value> {
    let out = p.abort_at(point, &["-p", "spark.yaml", "run"]);
    assert!(
        common::signal_of(&out.status).is_some(),
        "not killed at {point}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    p.flows(&["-p", "spark.yaml", "run"])
}

/// Runs the example's builds on both engines.
pub fn foundry(url: &str) {
    let p = Project::example("foundry_iceberg");
    let example = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let ddl = std::fs::read_to_string(p.file("current.sql")).unwrap();
    for ns in ["demo_e", "demo_s"] {
        p.write(
            &format!("current_{ns}.sql"),
            &ddl.replace("demo.current", &format!("{ns}.current")),
        );
    }
    p.write(
        "embedded.yaml",
        &pipeline(&example, "demo_e", "current_demo_e.sql", "lake: ./lake_e\n"),
    );
    let spark = format!("engine: spark\nconnect: {url}\nlake: ./lake_s\n");
    p.write(
        "spark.yaml",
        &pipeline(&example, "demo_s", "current_demo_s.sql", &spark),
    );
    let run = |file: &str| p.flows(&["-p", file, "run"]);

    input(&p, "build1");
    let (e, s) = (run("embedded.yaml"), run("spark.yaml"));
    same_reports("build 1", &e, &s);
    same_outputs(&p, "build 1", &[("active", 2), ("current", 2)]);

    // Killed before silver's MERGE (the `active` flow done, the rejects written), then run
    // again: the rejects are not written twice.
    input(&p, "build2");
    let e = run("embedded.yaml");
    let s = killed_then_run(&p, "before_spark_silver");
    assert_eq!(s[0]["status"], "up_to_date", "{s:?}");
    same_reports("build 2, run again", &e[1..], &s[1..]);
    // id 1 inactive, id 4's 40.00 quarantined.
    same_outputs(
        &p,
        "build 2",
        &[("active", 3), ("current", 1), ("current__rejects", 1)],
    );

    // A copy-on-write delete in the input: `active` skips it, `current` deletes the key.
    // Killed after the append's snapshot, before the watermark lands in the properties.
    input(&p, "build3");
    let e = run("embedded.yaml");
    let s = killed_then_run(&p, "before_spark_watermark_property");
    assert_eq!(s[0]["status"], "up_to_date", "{s:?}");
    same_reports("build 3, run again", &e[1..], &s[1..]);
    same_outputs(
        &p,
        "build 3",
        &[("active", 3), ("current", 0), ("current__rejects", 1)],
    );

    let (e, s) = (run("embedded.yaml"), run("spark.yaml"));
    same_reports("build 4", &e, &s);
    assert!(s.iter().all(|r| r["status"] == "up_to_date"), "{s:?}");
    let status = |file: &str| -> Value {
        serde_json::from_str::<Value>(&p.ok(&["-p", file, "--json", "status"])).unwrap()["flows"]
            .clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for i in 0..2 {
        for field in ["watermark", "bronze_version", "silver_version", "problem"] {
            assert_eq!(e[i][field], s[i][field], "status `{field}`: {e} vs {s}");
        }
        assert!(s[i]["last_run_id"].is_string(), "{s}");
    }
    // The embedded engine reads the watermarks the Spark engine left.
    let again = p.flows(&["-p", "spark.yaml", "--engine", "embedded", "run"]);
    assert!(
        again.iter().all(|r| r["status"] == "up_to_date"),
        "{again:?}"
    );
}
