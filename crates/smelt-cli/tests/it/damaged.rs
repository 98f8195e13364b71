//! Damaged and missing storage through the real binary: a bronze table whose log file does
//! not parse, whose data file is gone or is not Parquet, a pipeline or schema file that is
//! missing. Each ends in one error naming the table and the file, what is wrong and what to
//! do, exit code 1, and nothing written: silver is as it was, and once the file is back a
//! run gives the silver of a run that never met the damage.

use std::path::PathBuf;

use crate::common::{Project, files_under, pinned, without_audit};

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

#[test]
fn an_iceberg_table_whose_metadata_file_is_gone_is_named() {
    let p = iceberg_orders_behind();
    let current = files_under(&p.file("warehouse"), ".metadata.json")
        .pop()
        .expect("the silver's metadata");
    let kept = std::fs::read(&current).unwrap();
    std::fs::remove_file(&current).unwrap();
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("iceberg_metadata_file_gone", pinned(&p, &err));
    std::fs::write(&current, kept).unwrap();
    p.ok(&["run"]);
    assert_eq!(iceberg_orders(&p), orders_done());
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

/// Silver written merge-on-read (its replaced rows marked in a deletion vector file), whose
/// deletion vector file is then damaged: the next run that marks more rows of that data file
/// must read it, and stops naming the table and the file; nothing is written; the file back,
/// the run gives the silver of a lake that was never damaged.
#[test]
fn a_damaged_deletion_vector_file_is_named() {
    fn start() -> Project {
        let p = Project::product2();
        let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
        p.write("smelt.yaml", &format!("write_mode: merge_on_read\n{yaml}"));
        for step in ["bronze.sql", "insert_1.sql"] {
            p.ok(&["sql", "-f", step]);
        }
        p.ok(&["run"]);
        p.ok(&["sql", "-f", "insert_2.sql"]);
        p.ok(&["run"]);
        p.write(
            "rename.sql",
            "INSERT INTO medallion_demo.product2__bronze (Id, Name, ProductCode) \
             SELECT Id, concat(Name, ' (renamed)'), ProductCode \
             FROM medallion_demo.product2__bronze",
        );
        p.ok(&["sql", "-f", "rename.sql"]);
        p
    }
    let reference = start();
    reference.ok(&["run"]);
    let want = without_audit(&reference.silver());

    let p = start();
    let dvs = files_under(&p.file("lake/medallion_demo/product2__silver"), ".bin");
    assert!(!dvs.is_empty(), "silver has no deletion vector file");
    let dv = dvs[0].strip_prefix(p.path()).unwrap().display().to_string();
    let err = with_damaged(&p, &dv, Some(b"not a deletion vector"), || {
        p.fails(&["run"], 1).1
    });
    // The vector's id (Z85 of a random UUID) as `[id]`.
    insta::with_settings!({filters => vec![(r"parquet` \(.{20,40}?\): Deletion", "parquet` ([id]): Deletion")]}, {
        insta::assert_snapshot!("damaged_deletion_vector", pinned(&p, &err));
    });
    p.ok(&["run"]);
    assert_eq!(without_audit(&p.silver()), want);
}

/// Silver `ice.silver.orders` in an Iceberg SQL catalog, applied from Delta bronze
/// `raw.orders` (ids 1 and 2 `new`), with a change of id 1 (`done`) in bronze not yet
/// applied: the next run has to read silver.
fn iceberg_orders_behind() -> Project {
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
         INSERT INTO raw.orders VALUES ('1', 'new'), ('2', 'new')",
    ]);
    p.ok(&["run"]);
    p.ok(&["sql", "INSERT INTO raw.orders VALUES ('1', 'done')"]);
    p
}

/// `ice.silver.orders` as (id, status), by id.
fn iceberg_orders(p: &Project) -> Vec<(String, String)> {
    p.query("SELECT id, status FROM ice.silver.orders ORDER BY id")
        .iter()
        .map(|r| {
            (
                crate::common::text(&r["id"]),
                crate::common::text(&r["status"]),
            )
        })
        .collect()
}

/// What [`iceberg_orders`] gives once the change is applied.
fn orders_done() -> Vec<(String, String)> {
    vec![("1".into(), "done".into()), ("2".into(), "new".into())]
}

/// An Iceberg silver whose manifest list, or one of its manifests, is damaged: the run that
/// must read it stops naming the table and the file; the file back, the run completes.
#[test]
fn a_damaged_iceberg_manifest_is_named() {
    for (kind, name) in [
        ("snap-", "iceberg_manifest_list_damaged"),
        ("-m", "iceberg_manifest_damaged"),
    ] {
        let p = iceberg_orders_behind();
        let file = files_under(&p.file("warehouse/silver/orders/metadata"), ".avro")
            .into_iter()
            .rfind(|f| f.file_name().unwrap().to_string_lossy().contains(kind))
            .unwrap_or_else(|| panic!("no `{kind}` file"));
        let file = file.strip_prefix(p.path()).unwrap().display().to_string();
        let err = with_damaged(&p, &file, Some(b"Obj\x01 not avro"), || {
            p.fails(&["run"], 1).1
        });
        insta::with_settings!({filters => vec![(r"[0-9a-f-]{36}-m\d", "[uuid]-m0"), (r"snap-\d+-\d+-", "snap-[id]-")]}, {
            insta::assert_snapshot!(name, pinned(&p, &err));
        });
        p.ok(&["run"]);
        assert_eq!(iceberg_orders(&p), orders_done(), "{kind}");
    }
}

/// An export whose saved state is damaged: the run stops naming the file and what to do,
/// and publishes nothing; the file back, the run publishes what is new, once.
#[test]
fn a_damaged_export_state_is_named_and_nothing_is_published() {
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    p.ok(&["sql", "-f", "target.sql"]);
    p.ok(&["run", "export_demo_table"]);
    let states = files_under(&p.file("exports/export_demo_table/_smelt"), ".json");
    let state = states.last().expect("a saved state");
    let state = state.strip_prefix(p.path()).unwrap().display().to_string();
    p.ok(&[
        "sql",
        "UPDATE abc.export_demo_table SET quantity = 9, updated_at = TIMESTAMP '2026-07-25 00:00:00' WHERE sale_id = 2",
    ]);
    let published = files_under(&p.file("exports"), ".parquet");
    let err = with_damaged(&p, &state, Some(b"{\"version\": "), || {
        let (_, err) = p.fails(&["run", "export_demo_table"], 1);
        assert_eq!(files_under(&p.file("exports"), ".parquet"), published);
        err
    });
    insta::assert_snapshot!("damaged_export_state", pinned(&p, &err));
    p.ok(&["run", "export_demo_table"]);
    assert_eq!(
        files_under(&p.file("exports"), ".parquet").len(),
        published.len() + 1,
        "the update published once"
    );
}

/// A bronze table whose latest checkpoint (the file a reader starts from) is damaged: the
/// run stops naming the table and the file; the file back, the run completes.
#[test]
fn a_damaged_checkpoint_is_named() {
    let p = Project::product2();
    p.ok(&["sql", "-f", "bronze.sql"]);
    // delta-rs writes a checkpoint every 100 commits: 100 one-row inserts.
    let inserts: String = (0..100)
        .map(|i| {
            format!(
                "INSERT INTO medallion_demo.product2__bronze (Id, Name) VALUES ('01t0000000{i:05}AAA', 'n{i}');\n"
            )
        })
        .collect();
    p.write("many.sql", &inserts);
    p.ok(&["sql", "-f", "many.sql"]);
    let checkpoint = files_under(
        &p.file(&format!("{BRONZE}/_delta_log")),
        ".checkpoint.parquet",
    )
    .pop()
    .expect("a checkpoint after 100 commits");
    let checkpoint = checkpoint
        .strip_prefix(p.path())
        .unwrap()
        .display()
        .to_string();
    let err = with_damaged(&p, &checkpoint, Some(b"PAR1 not a checkpoint PAR1"), || {
        let (_, err) = p.fails(&["run"], 1);
        assert!(
            !p.file("lake/medallion_demo/product2__silver/_delta_log")
                .exists(),
            "a run over the damaged bronze wrote silver"
        );
        err
    });
    insta::assert_snapshot!("damaged_checkpoint", pinned(&p, &err));
    p.ok(&["run"]);
    let rows = p.query("SELECT count(*) AS n FROM medallion_demo.product2__silver");
    assert_eq!(rows[0]["n"], 100, "{rows:?}");
}

/// An Iceberg silver whose data file is gone: the run that must rewrite it stops naming
/// the table and the file; nothing is committed; the file back, the run completes.
#[test]
fn a_missing_iceberg_data_file_is_named() {
    let p = iceberg_orders_behind();
    let data = files_under(&p.file("warehouse/silver/orders/data"), ".parquet")
        .pop()
        .expect("silver's data file");
    let data = data.strip_prefix(p.path()).unwrap().display().to_string();
    let err = with_damaged(&p, &data, None, || p.fails(&["run"], 1).1);
    insta::assert_snapshot!("iceberg_data_file_gone", pinned(&p, &err));
    p.ok(&["run"]);
    assert_eq!(iceberg_orders(&p), orders_done());
}
