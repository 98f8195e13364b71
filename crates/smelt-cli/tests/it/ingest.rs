//! Ingest flows through the real binary: every CSV option, JSON lines, Parquet with Hive
//! folders, malformed lines, rescued fields, new columns, changed files, exactly once
//! across reruns and crashes, and the seed 002 example (`examples/tpch_part`).

use std::fs::File;
use std::sync::Arc;

use crate::common::{Project, count, pinned, rows};
use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use serde_json::Value;

fn ingest(name: &str, body: &str) -> String {
    format!("  {name}:\n    ingest:\n{body}")
}

fn pipeline(flows: &[String]) -> String {
    format!("lake: ./lake\nflows:\n{}", flows.concat())
}

#[test]
fn every_csv_option() {
    let p = Project::with_pipeline(&pipeline(&[
        ingest(
            "quoted",
            "      from: ./in/quoted/*.csv\n      into: raw.quoted\n      format: csv\n      escape: \"\\\\\"\n      null_value: \"\\\\N\"\n",
        ),
        ingest(
            "tabs",
            "      from: ./in/tabs\n      into: raw.tabs\n      format: csv\n      sep: \"\\t\"\n      quote: \"'\"\n",
        ),
        ingest(
            "sjis",
            "      from: ./in/sjis\n      into: raw.sjis\n      format: csv\n      encoding: shift_jis\n",
        ),
        ingest(
            "tbl",
            "      from: ./in/tbl/*.tbl\n      into: raw.tbl\n      format: csv\n      header: false\n      sep: \"|\"\n      columns: [k, name]\n      audit: {file_row: _line}\n",
        ),
        ingest(
            "renamed",
            "      from: ./in/renamed\n      into: raw.renamed\n      format: csv\n      columns: [a, b]\n      rescued_data: false\n",
        ),
        ingest(
            "headerless",
            "      from: ./in/headerless\n      into: raw.headerless\n      format: csv\n      header: false\n",
        ),
    ]));
    p.write(
        "in/quoted/a.csv",
        "id,name,note\n1,\"a, \\\"b\\\"\",\\N\n2,plain,\n",
    );
    p.write("in/tabs/a.tsv", "id\tname\n1\t'x\ty'\n");
    let (sjis, _, _) = encoding_rs::SHIFT_JIS.encode("品番,品名\n1,りんご\n");
    p.write_bytes("in/sjis/a.csv", &sjis);
    p.write("in/tbl/a.tbl", "1|one|\n2|two|\n");
    p.write("in/tbl/skip.csv", "not|matched|\n");
    p.write("in/renamed/a.csv", "x,y\n1,2\n");
    p.write("in/headerless/a.csv", "1,2\n3,4\n");
    p.ok(&["run"]);

    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.quoted ORDER BY id",
            &["id", "name", "note"]
        ),
        [["1", "a, \"b\"", "NULL"], ["2", "plain", ""]],
        "escape, and null_value: `\\N` is NULL and an empty field an empty string"
    );
    assert_eq!(
        rows(&p, "SELECT * FROM raw.tabs", &["id", "name"]),
        [["1", "x\ty"]]
    );
    assert_eq!(
        rows(&p, "SELECT * FROM raw.sjis", &["品番", "品名"]),
        [["1", "りんご"]]
    );
    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.tbl ORDER BY k",
            &["k", "name", "_line"]
        ),
        [["1", "one", "1"], ["2", "two", "2"]],
        "columns named, the trailing `|` dropped, only *.tbl read, row numbers"
    );
    assert_eq!(
        rows(&p, "SELECT * FROM raw.renamed", &["a", "b"]),
        [["1", "2"]]
    );
    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.headerless ORDER BY _c0",
            &["_c0", "_c1"]
        ),
        [["1", "2"], ["3", "4"]]
    );
    // Bronze is the raw layer: text, with the file and its modification time.
    let row = &p.query("SELECT * FROM raw.renamed")[0];
    let source = row["_datasource"].as_str().unwrap();
    assert!(
        source.starts_with("file:///") && source.ends_with("/in/renamed/a.csv"),
        "{source}"
    );
    let modified: chrono::DateTime<chrono::Utc> = std::fs::metadata(p.file("in/renamed/a.csv"))
        .unwrap()
        .modified()
        .unwrap()
        .into();
    let stored = row["_ingest_timestamp"].as_str().unwrap();
    assert_eq!(
        &stored[..19],
        modified.format("%Y-%m-%dT%H:%M:%S").to_string(),
        "{stored}"
    );
    assert!(
        row.get("_rescued_data").is_none(),
        "rescued_data: false leaves the column out"
    );
}

#[test]
fn json_lines_with_rescued_fields_and_malformed_lines() {
    let p = Project::with_pipeline(&pipeline(&[ingest(
        "events",
        "      from: ./in\n      into: raw.events\n      format: json\n      schema_evolution: rescue\n      audit: {file_row: true}\n",
    )]));
    p.write(
        "in/1.jsonl",
        "{\"id\": 1, \"tags\": [\"a\"], \"ok\": true}\n{\"id\": 2, \"ok\": null}\n",
    );
    p.ok(&["run"]);
    p.write(
        "in/2.jsonl",
        "{\"id\": 3, \"color\": \"red\"}\nnot json\n\n{\"id\": 4}\n",
    );
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["malformed"], 1);
    assert_eq!(flows[0]["rescued"], 1);
    assert_eq!(flows[0]["rows_written"], 2);
    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.events ORDER BY id",
            &["id", "tags", "ok", "_rescued_data", "_file_row"]
        ),
        [
            ["1", "[\"a\"]", "true", "NULL", "1"],
            ["2", "NULL", "NULL", "NULL", "2"],
            ["3", "NULL", "NULL", "{\"color\":\"red\"}", "1"],
            ["4", "NULL", "NULL", "NULL", "4"],
        ],
        "a new key under `rescue` is kept as JSON; row numbers are line numbers"
    );
    let rejects = p.query("SELECT * FROM raw.events__rejects");
    assert_eq!(rejects.len(), 1);
    assert!(
        rejects[0]["file"]
            .as_str()
            .unwrap()
            .ends_with("/in/2.jsonl")
    );
    assert_eq!(rejects[0]["line"], 2);
    assert_eq!(rejects[0]["raw_line"], "not json");
    assert!(
        rejects[0]["reason"]
            .as_str()
            .unwrap()
            .contains("not a JSON object")
    );
}

#[test]
fn malformed_csv_lines_are_quarantined_and_the_rest_loads() {
    let p = Project::with_pipeline(&pipeline(&[ingest(
        "items",
        "      from: ./in\n      into: raw.items\n      format: csv\n",
    )]));
    p.write("in/a.csv", "id,name\n1,a\n2\n3,c,extra\n");
    let out = p.ok(&["run"]);
    assert!(out.contains("malformed rows"), "{out}");
    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.items ORDER BY id",
            &["id", "name", "_rescued_data"]
        ),
        [["1", "a", "NULL"], ["3", "c", "{\"_c2\":\"extra\"}"]]
    );
    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.items__rejects",
            &["line", "raw_line", "reason"]
        ),
        [["3", "2", "1 fields, but the file has 2 columns"]]
    );
}

/// A Parquet file with `id` and `amount`.
fn parquet_file(path: &std::path::Path, ids: &[i64]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef),
        (
            "amount",
            Arc::new(StringArray::from(
                ids.iter().map(|i| format!("{i}.50")).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
    ])
    .unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[test]
fn parquet_with_hive_partition_folders() {
    let p = Project::with_pipeline(&pipeline(&[ingest(
        "exports",
        "      from: ./exports/**/*.parquet\n      into: raw.exports\n      format: parquet\n",
    )]));
    // Seed 003's folders, the time written as BigQuery writes it (`:` escaped).
    parquet_file(
        &p.file("exports/export_timestamp=2026-07-21 10%3A00%3A00+09%3A00/part-0.parquet"),
        &[1, 2],
    );
    parquet_file(
        &p.file("exports/export_timestamp=2026-07-22 10%3A00%3A00+09%3A00/part-0.parquet"),
        &[3],
    );
    p.write("exports/_SUCCESS", "");
    p.ok(&["run"]);
    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.exports ORDER BY id",
            &["id", "amount", "export_timestamp"]
        ),
        [
            ["1", "1.50", "2026-07-21 10:00:00+09:00"],
            ["2", "2.50", "2026-07-21 10:00:00+09:00"],
            ["3", "3.50", "2026-07-22 10:00:00+09:00"],
        ]
    );
    // Text, like every bronze column: the apply flow types it.
    let types = p.query("SELECT arrow_typeof(id) AS t FROM raw.exports LIMIT 1");
    assert!(
        types[0]["t"].as_str().unwrap().starts_with("Utf8"),
        "{types:?}"
    );
}

#[test]
fn new_columns_are_added_or_fail_the_run() {
    let p = Project::with_pipeline(&pipeline(&[ingest(
        "items",
        "      from: ./in\n      into: raw.items\n      format: csv\n",
    )]));
    p.write("in/1.csv", "id\n1\n");
    p.ok(&["run"]);
    p.write("in/2.csv", "id,color\n2,red\n");
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["columns_added"], serde_json::json!(["color"]));
    assert_eq!(
        rows(&p, "SELECT * FROM raw.items ORDER BY id", &["id", "color"]),
        [["1", "NULL"], ["2", "red"]]
    );

    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &format!("{yaml}      schema_evolution: fail\n"),
    );
    p.write("in/3.csv", "id,size\n3,L\n");
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("new_column_refused", pinned(&p, &err));
    assert_eq!(count(&p, "raw.items"), 2, "nothing written");
}

#[test]
fn changed_files_are_reported_reloaded_or_fail() {
    let p = Project::with_pipeline(&pipeline(&[ingest(
        "items",
        "      from: ./in\n      into: raw.items\n      format: csv\n",
    )]));
    p.write("in/a.csv", "id\n1\n");
    p.ok(&["run"]);
    p.write("in/a.csv", "id\n1\n2\n");
    // Default: reported, not reloaded.
    let out = p.ok(&["run"]);
    assert!(out.contains("files changed"), "{out}");
    assert!(out.contains("/in/a.csv"), "{out}");
    assert_eq!(count(&p, "raw.items"), 1);

    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &format!("{yaml}      on_changed_file: fail\n"),
    );
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("changed_file_refused", pinned(&p, &err));

    p.write(
        "smelt.yaml",
        &format!("{yaml}      on_changed_file: reload\n"),
    );
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["rows_written"], 2);
    assert_eq!(count(&p, "raw.items"), 3, "the new version is appended");
    assert_eq!(p.flows(&["run"])[0]["status"], "up_to_date");
}

#[test]
fn each_file_loads_once_across_reruns_and_crashes() {
    let p = Project::with_pipeline(&pipeline(&[ingest(
        "items",
        "      from: ./in\n      into: raw.items\n      format: csv\n      max_files_per_run: 2\n",
    )]));
    for i in 1..=3 {
        p.write(
            &format!("in/{i}.csv"),
            &format!("id,name\n{i},a\n{i}0,b\nbad\n"),
        );
    }
    // A crash before the bronze commit, after the rejects commit: nothing in bronze; the
    // rerun loads the files once and leaves one copy of their malformed lines.
    let out = p.run_with_failpoint("before_bronze_commit");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        !p.file("lake/raw/items/_delta_log").exists(),
        "no bronze yet"
    );
    let out = p.run_with_failpoint("before_ingest_rejects_commit");
    assert_eq!(out.status.code(), Some(1));

    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["files_read"], 2);
    assert_eq!(flows[0]["files_pending"], 1, "max_files_per_run");
    assert_eq!(count(&p, "raw.items"), 4);
    assert_eq!(count(&p, "raw.items__rejects"), 2);
    assert_eq!(p.status()["files_waiting"], 1);

    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["files_read"], 1);
    assert_eq!(flows[0]["files_pending"], 0);
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["status"], "up_to_date");
    assert_eq!(
        rows(&p, "SELECT id FROM raw.items ORDER BY id", &["id"]),
        [["1"], ["10"], ["2"], ["20"], ["3"], ["30"]],
        "each file once"
    );
    assert_eq!(count(&p, "raw.items__rejects"), 3);

    // A file written under a hidden name is not read until it is renamed.
    p.write("in/.4.csv.tmp", "id,name\n4,d\n");
    assert_eq!(p.flows(&["run"])[0]["status"], "up_to_date");
    std::fs::rename(p.file("in/.4.csv.tmp"), p.file("in/4.csv")).unwrap();
    assert_eq!(p.flows(&["run"])[0]["rows_written"], 1);

    // `plan` lists what a run would load, and writes nothing.
    p.write("in/5.csv", "id,name\n5,e\n");
    let plan = p.flows(&["plan"]);
    assert_eq!(
        (plan[0]["status"].as_str(), plan[0]["files_new"].as_i64()),
        (Some("planned"), Some(1))
    );
    assert_eq!(count(&p, "raw.items"), 7);

    // A rebuild reloads every file (whatever max_files_per_run says), in one overwrite.
    p.ok(&["run", "--full-refresh"]);
    assert_eq!(count(&p, "raw.items"), 8);
    assert_eq!(count(&p, "raw.items__rejects"), 3);
    assert_eq!(p.flows(&["run"])[0]["status"], "up_to_date");
}

#[test]
fn spec_errors_name_the_line_and_option() {
    let p = Project::with_pipeline(&pipeline(&[ingest(
        "items",
        "      from: ./in\n      into: raw.items\n      format: parquet\n      sep: \"|\"\n      encoding: klingon\n",
    )]));
    let (_, err) = p.fails(&["run"], 2);
    insta::assert_snapshot!("csv_options_on_parquet", pinned(&p, &err));

    let p = Project::with_pipeline(&pipeline(&[ingest(
        "items",
        "      from: ./missing\n      into: raw.items\n      format: csv\n",
    )]));
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("landing_folder_missing", pinned(&p, &err));
}

/// Equal row lists, reporting the first row that differs (not thousands of them).
fn same_rows(got: Vec<Vec<String>>, want: Vec<Vec<String>>) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!("row {i} differs:\n got  {:?}\n want {:?}", got[i], want[i]);
    }
    assert_eq!(got.len(), want.len(), "row counts");
}

/// Seed 002: TPC-H `part.tbl` (generated by `tpchgen`) → bronze → typed silver, then a
/// second file with repriced and new parts. Silver must equal the generator's rows.
#[test]
fn tpch_part_example_matches_the_generator() {
    use smelt_bench::tpch;
    let p = Project::tpch_part();
    std::fs::create_dir_all(p.file("landing")).unwrap();
    tpch::write_tbl(&tpch::day1(0.01), &p.file("landing/part-day1.tbl")).unwrap();
    let flows = p.flows(&["run"]);
    assert_eq!(
        (
            flows[0]["rows_written"].as_i64(),
            flows[1]["inserted"].as_i64()
        ),
        (Some(2000), Some(2000))
    );
    let silver = |p: &Project| {
        rows(
            p,
            "SELECT *, CAST(p_retailprice AS VARCHAR) AS price FROM tpch.part ORDER BY p_partkey",
            &[
                "p_partkey",
                "p_name",
                "p_mfgr",
                "p_brand",
                "p_type",
                "p_size",
                "p_container",
                "price",
                "p_comment",
            ],
        )
    };
    let expected = |parts: Vec<tpch::PartRow>| -> Vec<Vec<String>> {
        let mut parts = parts;
        parts.sort_by_key(|p| p.p_partkey);
        parts
            .iter()
            .map(|r| {
                vec![
                    r.p_partkey.to_string(),
                    r.p_name.clone(),
                    r.p_mfgr.clone(),
                    r.p_brand.clone(),
                    r.p_type.clone(),
                    r.p_size.to_string(),
                    r.p_container.clone(),
                    format!(
                        "{}.{:02}",
                        r.p_retailprice_cents / 100,
                        r.p_retailprice_cents % 100
                    ),
                    r.p_comment.clone(),
                ]
            })
            .collect()
    };
    same_rows(silver(&p), expected(tpch::day1(0.01)));
    let types = p.query(
        "SELECT arrow_typeof(p_partkey) AS k, arrow_typeof(p_size) AS s, arrow_typeof(p_retailprice) AS r FROM tpch.part LIMIT 1",
    );
    assert_eq!(
        (&types[0]["k"], &types[0]["s"], &types[0]["r"]),
        (
            &Value::from("Int64"),
            &Value::from("Int32"),
            &Value::from("Decimal128(12, 2)")
        )
    );

    // Day 2 lands later: its rows win by `_ingest_timestamp` (the file's modification time).
    std::thread::sleep(std::time::Duration::from_millis(20));
    tpch::write_tbl(&tpch::day2(0.01), &p.file("landing/part-day2.tbl")).unwrap();
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["files_read"], 1);
    assert_eq!(
        (flows[1]["updated"].as_i64(), flows[1]["inserted"].as_i64()),
        (Some(100), Some(tpch::NEW_PARTS as i64))
    );
    same_rows(silver(&p), expected(tpch::after_day2(0.01)));
    let from_day2 =
        p.query("SELECT count(*) AS n FROM tpch.part WHERE _datasource LIKE '%part-day2.tbl'");
    assert_eq!(from_day2[0]["n"], 200);
    let flows = p.flows(&["run"]);
    assert_eq!(
        (flows[0]["status"].as_str(), flows[1]["status"].as_str()),
        (Some("up_to_date"), Some("up_to_date"))
    );
}

/// `from:` as a URL goes through the object store (here `file://`, the same code as
/// `s3://` and the others): listing, hidden names, Hive folders, streamed CSV, ranged
/// Parquet reads, exactly once.
#[test]
fn object_store_urls_read_like_folders() {
    let p = Project::with_pipeline("");
    let landing = p.file("landing");
    let url = url::Url::from_directory_path(&landing).unwrap();
    p.write(
        "smelt.yaml",
        &pipeline(&[
            ingest(
                "csv",
                &format!(
                    "      from: {url}csv/**/*.csv\n      into: raw.csv\n      format: csv\n      audit: {{file_row: true}}\n"
                ),
            ),
            ingest(
                "pq",
                &format!("      from: {url}pq\n      into: raw.pq\n      format: parquet\n"),
            ),
        ]),
    );
    p.write("landing/csv/day=1/a.csv", "id,name\n1,a\n2,b\nbroken\n");
    p.write("landing/csv/day=1/.b.csv", "id,name\n9,hidden\n");
    p.write("landing/csv/day=2/c.csv", "id,name\n3,c\n");
    parquet_file(&p.file("landing/pq/region=jp/x.parquet"), &[7, 8]);
    let flows = p.flows(&["run"]);
    assert_eq!(
        (
            flows[0]["files_read"].as_i64(),
            flows[0]["malformed"].as_i64()
        ),
        (Some(2), Some(1))
    );
    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.csv ORDER BY id",
            &["id", "name", "day", "_file_row"]
        ),
        [
            ["1", "a", "1", "1"],
            ["2", "b", "1", "2"],
            ["3", "c", "2", "1"]
        ]
    );
    let source = p.query("SELECT _datasource FROM raw.csv WHERE id = '3'");
    assert_eq!(
        source[0]["_datasource"].as_str().unwrap(),
        format!("{url}csv/day=2/c.csv")
    );
    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.pq ORDER BY id",
            &["id", "amount", "region"]
        ),
        [["7", "7.50", "jp"], ["8", "8.50", "jp"]]
    );
    let flows = p.flows(&["run"]);
    assert_eq!(
        (flows[0]["status"].as_str(), flows[1]["status"].as_str()),
        (Some("up_to_date"), Some("up_to_date"))
    );
}

/// The human report of an ingest run with every kind of line.
#[test]
fn ingest_report_is_stable() {
    let p = Project::with_pipeline(&pipeline(&[ingest(
        "items",
        "      from: ./in\n      into: raw.items\n      format: csv\n      max_files_per_run: 2\n",
    )]));
    p.write("in/1.csv", "id,name\n1,a\n2\n3,c,extra\n");
    p.write("in/2.csv", "id,name,color\n4,d,red\n");
    p.write("in/3.csv", "id,name\n5,e\n");
    let human = p.ok(&["run"]);
    insta::with_settings!({filters => vec![
        (r"\d+ ms", "[ms]"),
        (r" +\d+(\.\d+)? (B|KiB|MiB)", " [size]"),
    ]}, {
        insta::assert_snapshot!("ingest_report", human);
    });
}

/// `infer_types`: the first rows decide BIGINT / DOUBLE / BOOLEAN / STRING; a later value that
/// does not fit is NULL in its column and kept in the rescued-data column.
#[test]
fn inferred_types_and_values_that_do_not_fit() {
    let p = Project::with_pipeline(&pipeline(&[ingest(
        "typed",
        "      from: ./in\n      into: raw.typed\n      format: csv\n      infer_types: true\n",
    )]));
    p.write("in/1.csv", "id,price,ok,name\n1,9.5,true,a\n2,10,false,b\n");
    p.ok(&["run"]);
    let types = p.query(
        "SELECT arrow_typeof(id) AS i, arrow_typeof(price) AS p, arrow_typeof(ok) AS o, arrow_typeof(name) AS n FROM raw.typed LIMIT 1",
    );
    assert_eq!(
        (&types[0]["i"], &types[0]["p"], &types[0]["o"]),
        (
            &Value::from("Int64"),
            &Value::from("Float64"),
            &Value::from("Boolean")
        )
    );
    assert!(types[0]["n"].as_str().unwrap().starts_with("Utf8"));
    p.write("in/2.csv", "id,price,ok,name\nthree,1.5,yes,c\n");
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["rescued"], 1);
    assert_eq!(
        rows(
            &p,
            "SELECT * FROM raw.typed WHERE name = 'c'",
            &["id", "price", "ok", "_rescued_data"]
        ),
        [["NULL", "1.5", "true", "{\"id\":\"three\"}"]]
    );
}
