//! Damaged and missing storage through the real binary: a bronze table whose log file does
//! not parse, whose data file is gone or is not Parquet, a pipeline or schema file that is
//! missing. Each ends in one error naming the table and the file, what is wrong and what to
//! do, exit code 1, and nothing written: silver is as it was, and once the file is back a
//! run gives the silver of a run that never met the damage.

use std::path::PathBuf;

use crate::common::{Project, pinned, without_audit};

const BRONZE: &str = "lake/medallion_demo/product2__bronze";

/// product2 after its first run, with the second insert in bronze (version 3) and not yet
/// applied: the run that meets the damage has something to do.
fn product2_behind() -> Project {
    let p = Project::product2();
    p.ok(&["sql", "-f", "bronze.sql"]);
    p.ok(&["sql", "-f", "insert_1.sql"]);
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "insert_2.sql"]);
    p
}

/// The silver a run over undamaged bronze gives (its audit columns, times of this project's
/// runs and commits, left out).
fn silver_after_the_run() -> Vec<serde_json::Value> {
    let p = product2_behind();
    p.ok(&["run"]);
    without_audit(&p.silver())
}

/// `file` of the project, its bytes replaced by `damage` for the length of `during`, then
/// put back.
fn with_damaged<T>(
    p: &Project,
    file: &str,
    damage: Option<&[u8]>,
    during: impl FnOnce() -> T,
) -> T {
    let path: PathBuf = p.file(file);
    let kept = std::fs::read(&path).unwrap();
    match damage {
        Some(bytes) => std::fs::write(&path, bytes).unwrap(),
        None => std::fs::remove_file(&path).unwrap(),
    }
    let out = during();
    std::fs::write(&path, kept).unwrap();
    out
}

/// The data files of bronze, by name.
fn bronze_files(p: &Project) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(p.file(BRONZE))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    files.sort();
    files
}

/// A run meets `damage` to the file `file` picks (`None`: the file is gone): exit code 1
/// and the error of snapshot `name`; silver untouched; the file back, the run gives the
/// undamaged silver.
fn refused_then_recovered(
    file: impl Fn(&Project) -> String,
    damage: impl Fn(&[u8]) -> Option<Vec<u8>>,
    args: &[&str],
    name: &str,
) {
    let p = product2_behind();
    let before = p.silver();
    let file = file(&p);
    let damaged = damage(&std::fs::read(p.file(&file)).unwrap());
    let err = with_damaged(&p, &file, damaged.as_deref(), || {
        let (_, err) = p.fails(args, 1);
        assert_eq!(p.silver(), before, "{name}: silver changed");
        err
    });
    insta::assert_snapshot!(name, pinned(&p, &err));
    p.ok(&["run"]);
    assert_eq!(
        without_audit(&p.silver()),
        silver_after_the_run(),
        "{name}: after the file came back"
    );
}

/// Bronze's last commit, the one the run has to read.
fn last_commit(_: &Project) -> String {
    format!("{BRONZE}/_delta_log/00000000000000000003.json")
}

/// The data file bronze's first insert added (a rebuild reads every file of bronze).
fn first_data_file(p: &Project) -> String {
    let commit =
        std::fs::read_to_string(p.file(&format!("{BRONZE}/_delta_log/00000000000000000002.json")))
            .unwrap();
    let add = commit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find_map(|a| a["add"]["path"].as_str().map(str::to_string))
        .expect("an add action");
    assert!(bronze_files(p).contains(&add), "{add}");
    format!("{BRONZE}/{add}")
}

#[test]
fn a_truncated_commit_is_named_with_its_version() {
    // Its first line whole, then 20 bytes of the next: cut short mid-action.
    let cut = |text: &[u8]| {
        let first = text.iter().position(|&b| b == b'\n').unwrap() + 1;
        Some(text[..first + 20].to_vec())
    };
    refused_then_recovered(last_commit, cut, &["run"], "truncated_commit");
}

#[test]
fn a_commit_that_is_not_json_is_named() {
    let garbage = |_: &[u8]| Some(b"\x00\x01garbage\n".to_vec());
    refused_then_recovered(last_commit, garbage, &["run"], "garbage_commit");
}

#[test]
fn a_missing_data_file_is_named_with_its_table() {
    let gone = |_: &[u8]| None;
    let args = ["run", "--full-refresh"];
    refused_then_recovered(first_data_file, gone, &args, "missing_data_file");
}

#[test]
fn a_data_file_that_is_not_parquet_is_named() {
    let text = |_: &[u8]| Some(b"not parquet".to_vec());
    let args = ["run", "--full-refresh"];
    refused_then_recovered(first_data_file, text, &args, "data_file_not_parquet");
}

/// A query of silver does not open bronze: a damaged table fails the queries that read it,
/// and no other.
#[test]
fn a_damaged_table_fails_only_the_queries_that_read_it() {
    let p = product2_behind();
    let commit = last_commit(&p);
    let silver = p.silver();
    with_damaged(&p, &commit, Some(b"garbage"), || {
        assert_eq!(p.silver(), silver);
        let query = "SELECT count(*) FROM medallion_demo.product2__bronze";
        let (_, err) = p.fails(&["sql", query], 1);
        insta::assert_snapshot!("query_of_a_damaged_table", pinned(&p, &err));
    });
}

#[test]
fn a_missing_pipeline_or_schema_file_is_named() {
    let p = Project::product2();
    let err = with_damaged(&p, "silver.sql", None, || p.fails(&["run"], 2).1);
    insta::assert_snapshot!("missing_schema_file", pinned(&p, &err));
    let err = with_damaged(&p, "smelt.yaml", None, || p.fails(&["run"], 2).1);
    insta::assert_snapshot!("missing_pipeline_file", pinned(&p, &err));
}

/// Every file under `dir` whose name ends with `suffix`, sorted by name.
fn files_under(dir: &std::path::Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path, suffix));
        } else if path.to_string_lossy().ends_with(suffix) {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn an_iceberg_table_whose_metadata_file_is_gone_is_named() {
    let p = Project::with_pipeline(
        "lake: ./lake
catalogs:
  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}
flows:
  orders:
    apply:
      from: raw.orders
      into: ice.silver.orders
      schema: silver.sql
      keys: [id]
      sequence_by: [_commit_timestamp]
",
    );
    p.write(
        "silver.sql",
        "CREATE TABLE silver.orders (id STRING NOT NULL, status STRING)",
    );
    p.ok(&[
        "sql",
        "CREATE TABLE raw.orders (id STRING, status STRING) TBLPROPERTIES (delta.enableChangeDataFeed = true);
         INSERT INTO raw.orders VALUES ('1', 'new')",
    ]);
    p.ok(&["run"]);
    p.ok(&["sql", "INSERT INTO raw.orders VALUES ('2', 'new')"]);
    let current = files_under(&p.file("warehouse"), ".metadata.json")
        .pop()
        .expect("the silver's metadata");
    let kept = std::fs::read(&current).unwrap();
    std::fs::remove_file(&current).unwrap();
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("iceberg_metadata_file_gone", pinned(&p, &err));
    std::fs::write(&current, kept).unwrap();
    p.ok(&["run"]);
    let ids: Vec<String> = p
        .query("SELECT id FROM ice.silver.orders ORDER BY id")
        .iter()
        .map(|r| crate::common::text(&r["id"]))
        .collect();
    assert_eq!(ids, ["1", "2"]);
}

/// `_last_checkpoint` is a hint (the Delta protocol lets a reader list the log instead): a
/// damaged one is read past, and the run gives the undamaged silver.
#[test]
fn a_damaged_last_checkpoint_is_read_past() {
    let p = product2_behind();
    p.write(
        &format!("{BRONZE}/_delta_log/_last_checkpoint"),
        "{\"version\": 3, \"size\":",
    );
    p.ok(&["run"]);
    assert_eq!(without_audit(&p.silver()), silver_after_the_run());
}

/// An empty landing file, and one with a header alone, load no rows and are not read again.
#[test]
fn an_empty_landing_file_loads_nothing_once() {
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  items:\n    ingest:\n      from: ./in\n      into: raw.items\n      format: csv\n",
    );
    p.write("in/1.csv", "id,name\n1,a\n");
    p.write("in/2.csv", "");
    p.write("in/3.csv", "id,name\n");
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["files_read"], 3, "{:?}", flows[0]);
    assert_eq!(crate::common::count(&p, "raw.items"), 1);
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["status"], "up_to_date", "{:?}", flows[0]);
}
