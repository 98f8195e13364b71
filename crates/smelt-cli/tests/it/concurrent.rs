//! Two `smelt run` of one pipeline at once: one commits, the other's commit is refused with
//! a clear message, and nothing is applied twice. Compared with runs one at a time.

use std::process::Output;

use crate::common::{self, Project, without_audit};

/// Starts two `smelt run` at the same moment; their outputs.
fn two_runs(p: &Project) -> [Output; 2] {
    let spawn = || p.piped(&["run"]).spawn().unwrap();
    let (a, b) = (spawn(), spawn());
    [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()]
}

/// Two runs started at once, over and over (each time with a new bronze commit), until
/// one of them has lost the race (at most 12 rounds; none lost fails the test): after each
/// round one more run finishes the work, and silver is what runs one at a time leave.
#[test]
fn concurrent_runs_never_apply_twice() {
    let p = Project::product2();
    let reference = Project::product2();
    for q in [&p, &reference] {
        q.ok(&["sql", "-f", "bronze.sql"]);
    }
    let mut refused = 0;
    let mut round = 0;
    while round < 2 || (refused == 0 && round < 12) {
        let step = match round {
            0 => "insert_1.sql",
            1 => "insert_2.sql",
            n => {
                for q in [&p, &reference] {
                    q.write(
                        "round.sql",
                        &format!(
                            "INSERT INTO medallion_demo.product2__bronze (Id, Name) VALUES \
                             ('01t0000000000{n:02}XYZ', 'round {n}')"
                        ),
                    );
                }
                "round.sql"
            }
        };
        for q in [&p, &reference] {
            q.ok(&["sql", "-f", step]);
        }
        reference.ok(&["run"]);
        for out in two_runs(&p) {
            if common::refused_by_a_race(&out) {
                refused += 1;
            }
        }
        // Whatever the race did, one more run finishes the job, and silver holds each key
        // once, as the runs one at a time left it.
        p.ok(&["run"]);
        assert_eq!(
            without_audit(&p.silver()),
            without_audit(&reference.silver()),
            "round {round}"
        );
        round += 1;
    }
    assert!(
        refused > 0,
        "no run lost a race in {round} rounds: the test proved nothing"
    );
    eprintln!("{refused} run(s) refused in {round} rounds");
}

/// Rows of every visible exported Parquet file below `dir`, as `sale_id`s, sorted.
fn exported_ids(dir: &std::path::Path) -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    let mut ids = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with('.') || !name.ends_with(".parquet") {
            continue;
        }
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&file).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            let column = batch.column_by_name("sale_id").unwrap();
            let column = arrow::compute::cast(column, &arrow::datatypes::DataType::Utf8).unwrap();
            let column = arrow::array::AsArray::as_string::<i32>(&column);
            ids.extend(column.iter().map(|v| v.unwrap().to_string()));
        }
    }
    ids.sort();
    ids
}

/// `examples/export_replace` with its source and target tables.
fn export_project() -> Project {
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    p.ok(&["sql", "-f", "target.sql"]);
    p
}

/// Every source row `p`'s export selects is published once: as one export run alone does.
fn published_once(p: &Project) {
    let reference = export_project();
    reference.ok(&["run", "export_demo_table"]);
    let ids = exported_ids(&p.file("exports"));
    assert!(!ids.is_empty());
    assert_eq!(ids, exported_ids(&reference.file("exports")));
}

/// True when an export run was refused because another run saved its state first (exit
/// code 1, saying so); false when it succeeded; any other end fails the test.
fn refused_export(out: &std::process::Output) -> bool {
    if out.status.success() {
        return false;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("another run of this export saved its state first"),
        "{stderr}"
    );
    true
}

/// An export held before saving its state while another run of it publishes: the held one
/// is refused ("saved its state first"), and every row is published once.
#[test]
fn an_export_held_at_its_state_loses_to_one_that_saved_first() {
    let p = export_project();
    let held = p.held_at("before_export_state", &["run", "export_demo_table"]);
    p.ok(&["run", "export_demo_table"]);
    assert!(refused_export(&held.release()), "the held export published");
    p.ok(&["run", "export_demo_table"]);
    published_once(&p);
}

#[test]
fn concurrent_exports_publish_each_row_once() {
    let p = export_project();
    let spawn = || p.piped(&["run", "export_demo_table"]).spawn().unwrap();
    let (a, b) = (spawn(), spawn());
    for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
        refused_export(&out);
    }
    // One more run publishes nothing new; every source row the export selects is there once.
    p.ok(&["run", "export_demo_table"]);
    published_once(&p);
}

/// Three ingest runs at once: each file's rows land in bronze once, its malformed lines
/// in the rejects table once.
#[test]
fn concurrent_ingests_load_each_file_once() {
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  raw:\n    ingest:\n      from: ./landing\n      into: raw.items\n      format: csv\n",
    );
    // Five rounds, and more (at most 12) until some run has lost a race.
    let (mut round, mut refused) = (0, 0);
    while round < 5 || (refused == 0 && round < 12) {
        for f in 0..3 {
            let name = format!("landing/r{round}-f{f}.csv");
            let rows: String = (0..50)
                .map(|i| format!("{round}-{f}-{i},x,oops\n"))
                .collect();
            // One malformed line per file: the rejects table is written too, and raced.
            p.write(&name, &format!("id,name\n{rows}broken\"\n"));
        }
        let spawn = || p.piped(&["run"]).spawn().unwrap();
        let runs = [spawn(), spawn(), spawn()];
        for run in runs {
            let out = run.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                assert!(
                    stderr.contains("another writer committed first"),
                    "{stderr}"
                );
                refused += 1;
            }
        }
        p.ok(&["run"]);
        let loaded = p.query("SELECT count(*) AS n, count(DISTINCT id) AS k FROM raw.items");
        let want = 150 * (round + 1);
        assert_eq!(
            (loaded[0]["n"].as_i64(), loaded[0]["k"].as_i64()),
            (Some(want), Some(want)),
            "round {round}"
        );
        let rejected = p.query("SELECT count(*) AS n FROM raw.items__rejects");
        assert_eq!(
            rejected[0]["n"].as_i64(),
            Some(3 * (round + 1)),
            "round {round}"
        );
        round += 1;
    }
    assert!(refused > 0, "no ingest lost a race in {round} rounds");
}
