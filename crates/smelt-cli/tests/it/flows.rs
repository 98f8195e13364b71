//! append, replace_where and export flows through the real binary: exactly once across
//! reruns and injected crashes, rewrites of an append flow's source, the replace_where
//! out-of-predicate error, exported files read back by a second Parquet reader, and the
//! seed 003 / 004 examples.

use std::fs::File;

use crate::common::{Project, pinned, rows};
use arrow::array::{Array, AsArray, RecordBatchReader};
use arrow::datatypes::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

// ---------------------------------------------------------------- append (seed 004)

fn output(p: &Project) -> Vec<Vec<String>> {
    rows(
        p,
        "SELECT id, status, CAST(amount AS VARCHAR) AS amount FROM foundry.output ORDER BY id",
        &["id", "status", "amount"],
    )
}

#[test]
fn append_active_example_appends_each_new_active_row_once() {
    let p = Project::example("append_active");
    p.ok(&["sql", "-f", "input.sql"]);
    let flows = p.flows(&["run"]);
    assert_eq!(
        (
            flows[0]["rows_written"].as_i64(),
            flows[0]["filtered"].as_i64()
        ),
        (Some(2), Some(1))
    );
    assert_eq!(
        output(&p),
        [["1", "active", "10.00"], ["3", "active", "30.00"]]
    );

    p.ok(&["sql", "-f", "input_2.sql"]);
    // A crash before the target commit: nothing appended; the rerun appends once.
    let out = p.run_with_failpoint("before_target_commit");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(output(&p).len(), 2);
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["mode"], "incremental");
    assert_eq!(flows[0]["changes_read"], 2, "only the rows added since");
    assert_eq!(
        output(&p),
        [
            ["1", "active", "10.00"],
            ["3", "active", "30.00"],
            ["4", "active", "40.00"]
        ]
    );
    assert_eq!(p.flows(&["run"])[0]["status"], "up_to_date");
    // The output keeps the input's types (no `schema:`).
    let types = p.query(
        "SELECT arrow_typeof(amount) AS a, arrow_typeof(ts) AS t FROM foundry.output LIMIT 1",
    );
    assert_eq!(types[0]["a"], "Decimal128(10, 2)");
}

#[test]
fn append_source_rewrites_fail_skip_or_rebuild() {
    let p = Project::example("append_active");
    p.ok(&["sql", "-f", "input.sql"]);
    p.ok(&["run"]);
    // A TRUNCATE rewrites the input (its files are removed), then new rows come.
    p.ok(&["sql", "TRUNCATE TABLE foundry.input"]);
    p.ok(&["sql", "-f", "input_2.sql"]);
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("append_refuses_a_rewrite", pinned(&p, &err));
    assert_eq!(output(&p).len(), 2, "nothing written");

    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &yaml.replace("on_rewrite: fail", "on_rewrite: skip"),
    );
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["skipped_versions"], serde_json::json!([2]));
    assert_eq!(
        output(&p),
        [
            ["1", "active", "10.00"],
            ["3", "active", "30.00"],
            ["4", "active", "40.00"]
        ],
        "the rows added after the truncate are appended"
    );

    p.ok(&["sql", "TRUNCATE TABLE foundry.input"]);
    p.write(
        "smelt.yaml",
        &yaml.replace("on_rewrite: fail", "on_rewrite: full_refresh"),
    );
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["mode"], "rebuild");
    assert!(
        output(&p).is_empty(),
        "the output is the (empty) input's active rows"
    );
}

#[test]
fn append_casts_to_a_declared_target() {
    let p = Project::example("append_active");
    p.ok(&["sql", "-f", "input.sql"]);
    p.write(
        "output.sql",
        "CREATE TABLE foundry.output (id STRING, amount DOUBLE, ts TIMESTAMP_NTZ)",
    );
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write("smelt.yaml", &format!("{yaml}      schema: output.sql\n"));
    p.ok(&["run"]);
    let types = p.query(
        "SELECT arrow_typeof(id) AS i, arrow_typeof(amount) AS a, arrow_typeof(ts) AS t FROM foundry.output LIMIT 1",
    );
    assert!(types[0]["i"].as_str().unwrap().starts_with("Utf8"));
    assert_eq!(types[0]["a"], "Float64");
    assert_eq!(types[0]["t"], "Timestamp(µs)");
    assert_eq!(
        rows(
            &p,
            "SELECT id, amount FROM foundry.output ORDER BY id",
            &["id", "amount"]
        ),
        [["1", "10.0"], ["3", "30.0"]]
    );
}

// ------------------------------------------------------- export + replace_where (seed 003)

/// The seed's final table, export_timestamp aside.
const SEED_003: [[&str; 6]; 4] = [
    [
        "1",
        "Notebook",
        "2",
        "500.00",
        "2026-07-20",
        "2026-07-20T01:00:00",
    ],
    [
        "2",
        "Pen",
        "10",
        "120.00",
        "2026-07-20",
        "2026-07-20T02:00:00",
    ],
    [
        "3",
        "File",
        "5",
        "300.00",
        "2026-07-21",
        "2026-07-21T01:00:00",
    ],
    [
        "4",
        "Desk",
        "1",
        "25000.00",
        "2026-07-21",
        "2026-07-21T02:00:00",
    ],
];

fn sales(p: &Project) -> Vec<Vec<String>> {
    rows(
        p,
        "SELECT sale_id, product_name, quantity, CAST(unit_price AS VARCHAR) AS unit_price,
                CAST(sale_date AS VARCHAR) AS sale_date, updated_at FROM demo.sales ORDER BY sale_id",
        &[
            "sale_id",
            "product_name",
            "quantity",
            "unit_price",
            "sale_date",
            "updated_at",
        ],
    )
}

/// Exported Parquet files, below `exports/`, as (relative path, file).
fn exported(p: &Project) -> Vec<String> {
    let root = p.file("exports/export_demo_table");
    let mut out = Vec::new();
    for e in walk(&root) {
        out.push(
            e.strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
    }
    out.sort();
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn export_replace_example_reproduces_the_seed() {
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    p.ok(&["sql", "-f", "target.sql"]);
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["rows_written"], 2, "rows updated since 2026-07-21");
    assert_eq!(flows[1]["rows_replaced"], 1, "sale 3 as it was");
    assert_eq!(sales(&p), SEED_003.map(|r| r.map(str::to_string)).to_vec());
    let types = p.query(
        "SELECT arrow_typeof(unit_price) AS u, arrow_typeof(updated_at) AS t, arrow_typeof(export_timestamp) AS e FROM demo.sales LIMIT 1",
    );
    assert_eq!(
        (&types[0]["u"], &types[0]["t"], &types[0]["e"]),
        (
            &Value::from("Decimal128(18, 2)"),
            &Value::from("Timestamp(µs)"),
            &Value::from("Timestamp(µs)")
        )
    );

    // The export, read back by the parquet crate: the source's columns and types, the
    // partition column, and the folder's value in Tokyo time.
    let files = exported(&p);
    let parquet: Vec<&String> = files.iter().filter(|f| f.ends_with(".parquet")).collect();
    assert_eq!(parquet.len(), 1, "{files:?}");
    let (folder, name) = parquet[0].split_once('/').unwrap();
    assert!(name.starts_with("part-00000-"), "{name}");
    let stamp = folder.strip_prefix("export_timestamp=").unwrap();
    assert!(stamp.ends_with("+09:00"), "{stamp}");
    let reader = ParquetRecordBatchReaderBuilder::try_new(
        File::open(p.file("exports/export_demo_table").join(parquet[0])).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let schema = reader.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "sale_id",
            "product_name",
            "quantity",
            "unit_price",
            "sale_date",
            "updated_at",
            "export_timestamp"
        ]
    );
    assert_eq!(schema.field(3).data_type(), &DataType::Decimal128(38, 9));
    assert_eq!(
        schema.field(6).data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
    let batches: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    let ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(ids, [3, 4]);
    let at = batches[0]
        .column(6)
        .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    assert!(at.is_valid(0));
    let tokyo: chrono_tz::Tz = "Asia/Tokyo".parse().unwrap();
    let exported_at = chrono::DateTime::from_timestamp_micros(at.value(0))
        .unwrap()
        .with_timezone(&tokyo)
        .format("%Y-%m-%d %H:%M:%S%:z")
        .to_string();
    assert_eq!(exported_at, stamp, "the column and the folder agree");

    // Nothing new: nothing exported, no batch.
    let flows = p.flows(&["run"]);
    assert_eq!(
        (flows[0]["status"].as_str(), flows[1]["status"].as_str()),
        (Some("up_to_date"), Some("up_to_date"))
    );
    assert_eq!(exported(&p).len(), files.len());
}

#[test]
fn exports_are_exactly_once_across_crashes() {
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    p.ok(&["sql", "-f", "target.sql"]);
    // Crash after writing, before the state: only hidden files; the rerun removes them.
    let out = p.run_with_failpoint("before_export_state");
    assert_eq!(out.status.code(), Some(1));
    let files = exported(&p);
    assert!(
        files
            .iter()
            .all(|f| f.rsplit('/').next().unwrap().starts_with(".smelt-tmp-")),
        "{files:?}"
    );
    // Crash after the state, before the renames: the rerun finishes them first.
    let out = p.run_with_failpoint("before_export_rename");
    assert_eq!(out.status.code(), Some(1));
    p.ok(&["run", "export_demo_table"]);
    let visible: Vec<String> = exported(&p)
        .into_iter()
        .filter(|f| f.ends_with(".parquet") && !f.contains("/.smelt-tmp-"))
        .collect();
    assert_eq!(visible.len(), 1, "one export: {visible:?}");
    assert!(!exported(&p).iter().any(|f| f.contains(".smelt-tmp-")));

    // A crash before the replace commit: the rerun applies the batch once.
    let out = p.run_with_failpoint("before_target_commit");
    assert_eq!(out.status.code(), Some(1));
    p.ok(&["run"]);
    assert_eq!(sales(&p), SEED_003.map(|r| r.map(str::to_string)).to_vec());

    // A new sale is exported alone, under a new folder. A fixed predicate would replace
    // the whole period with it; the batch's own bound replaces from its first row on.
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &yaml.replace(
            "updated_at >= '2026-07-21 00:00:00'",
            "updated_at >= {min(updated_at)}",
        ),
    );
    p.ok(&[
        "sql",
        "INSERT INTO abc.export_demo_table VALUES (5, 'Lamp', 3, 80.00, DATE '2026-07-22', TIMESTAMP '2026-07-22 03:00:00+00')",
    ]);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["rows_written"], 1);
    assert_eq!(
        flows[1]["predicate"],
        "updated_at >= arrow_cast('2026-07-22T03:00:00', 'Timestamp(µs)')"
    );
    assert_eq!(flows[1]["rows_replaced"], 0);
    assert_eq!(sales(&p).len(), 5);
    let parquet = exported(&p)
        .into_iter()
        .filter(|f| f.ends_with(".parquet"))
        .count();
    assert_eq!(parquet, 2);
    // The last save of the state (`_smelt/<flow>/<n>.json`, n growing).
    let saves = p.file("exports/export_demo_table/_smelt/export_demo_table");
    let last = std::fs::read_dir(saves)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    let state: Value = serde_json::from_str(&std::fs::read_to_string(last).unwrap()).unwrap();
    assert_eq!(
        state["column_max"],
        "arrow_cast('2026-07-22T03:00:00Z', 'Timestamp(µs, \"UTC\")')"
    );
    assert_eq!(state["pending"], serde_json::json!([]));
}

#[test]
fn replace_where_rejects_a_batch_row_outside_the_predicate() {
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    p.ok(&["sql", "-f", "target.sql"]);
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    // Every row exported, but the predicate covers only 2026-07-21 on.
    p.write(
        "smelt.yaml",
        &yaml.replace("      since: \"2026-07-21 00:00:00+00:00\"   # the first run: updated_at >= export_from\n", ""),
    );
    let (_, err) = p.fails(&["run"], 1);
    // Not a snapshot: the message names the exported file and its row, stamped with the
    // export's time.
    assert!(
        err.contains("is outside the predicate `updated_at >= '2026-07-21 00:00:00'`"),
        "{err}"
    );
    assert!(
        err.contains("sale_id = 1, product_name = Notebook"),
        "{err}"
    );
    assert!(err.contains("row 1 of file:///"), "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert_eq!(sales(&p).len(), 3, "the target is as it was");

    // `{min(updated_at)}`: the predicate covers the batch, whatever it holds.
    p.write(
        "smelt.yaml",
        &yaml
            .replace("      since: \"2026-07-21 00:00:00+00:00\"   # the first run: updated_at >= export_from\n", "")
            .replace("updated_at >= '2026-07-21 00:00:00'", "updated_at >= {min(updated_at)}"),
    );
    let flows = p.flows(&["run", "sales"]);
    assert_eq!(
        flows[0]["predicate"],
        "updated_at >= arrow_cast('2026-07-20T01:00:00', 'Timestamp(µs)')"
    );
    assert_eq!(flows[0]["rows_replaced"], 3);
    assert_eq!(sales(&p), SEED_003.map(|r| r.map(str::to_string)).to_vec());
}

#[test]
fn replace_where_from_a_table_replaces_on_each_new_version() {
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    p.ok(&["sql", "-f", "target.sql"]);
    p.write(
        "smelt.yaml",
        "lake: ./lake\nflows:\n  sales:\n    replace_where:\n      from: abc.export_demo_table\n      into: demo.sales\n      predicate: \"sale_date >= {min(sale_date)}\"\n",
    );
    // The source lacks `export_timestamp`: the target's column is required.
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("replace_where_column_missing", pinned(&p, &err));
    p.ok(&[
        "sql",
        "CREATE OR REPLACE TABLE demo.sales (sale_id BIGINT, product_name STRING, quantity BIGINT, unit_price DECIMAL(18, 2), sale_date DATE, updated_at TIMESTAMP_NTZ)",
    ]);
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["rows_written"], 4);
    assert_eq!(sales(&p), SEED_003.map(|r| r.map(str::to_string)).to_vec());
    assert_eq!(p.flows(&["run"])[0]["status"], "up_to_date");
    assert_eq!(p.status()["versions_behind"], 0);
}

/// `on_cast_error: fail` names the batch row whose value does not cast (a bug: the message
/// read "(``t` version 1` version 1)").
#[test]
fn replace_where_names_the_row_that_does_not_cast() {
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    p.ok(&[
        "sql",
        "CREATE OR REPLACE TABLE demo.sales (sale_id BIGINT, product_name BIGINT, quantity BIGINT, unit_price DECIMAL(18, 2), sale_date DATE, updated_at TIMESTAMP_NTZ)",
    ]);
    p.write(
        "smelt.yaml",
        "lake: ./lake\nflows:\n  sales:\n    replace_where:\n      from: abc.export_demo_table\n      into: demo.sales\n      predicate: \"sale_date >= {min(sale_date)}\"\n      on_cast_error: fail\n",
    );
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("replace_where_cast_failure", pinned(&p, &err));
    assert!(sales(&p).is_empty(), "nothing was written");
}

#[test]
fn flow_spec_errors_name_the_option() {
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  a:\n    append:\n      from: x\n      into: s.t\n      on_cast_error: quarantine\n  e:\n    export:\n      from: s.t\n      to: ./out\n      since: '2026-01-01'\n      partition: {tz: Mars/Olympus}\n  r:\n    replace_where:\n      from: s.u\n      into: s.v\n      sep: \"|\"\n      predicate: \" \"\n  q:\n    replace_where:\n      from: s.u\n      into: s.w\n      predicate: \"d >= {min(d)} AND note <> 'as of {max(d)}'\"\n",
    );
    let (_, err) = p.fails(&["run"], 2);
    insta::assert_snapshot!("flow_spec_errors", pinned(&p, &err));
}

#[test]
fn a_bad_partition_format_stops_the_export_without_a_panic() {
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    for (format, name) in [
        ("%Y-%Q", "export_partition_format_invalid"),
        ("%D", "export_partition_format_writes_a_slash"),
    ] {
        let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
        let yaml = yaml.replace("\"%Y-%m-%d %H:%M:%S%:z\"", &format!("\"{format}\""));
        let p2 = Project::with_pipeline(&yaml);
        std::fs::create_dir_all(p2.file("lake")).unwrap();
        let copy = |from: &std::path::Path, to: &std::path::Path| {
            std::process::Command::new("cp")
                .arg("-r")
                .arg(from)
                .arg(to)
                .status()
                .unwrap()
        };
        copy(&p.file("lake/abc"), &p2.file("lake/abc"));
        let (_, err) = p2.fails(&["run", "export_demo_table"], 1);
        // `%D` of the export's time: today's date.
        insta::with_settings!({filters => vec![(r"\d\d/\d\d/\d\d", "[mm/dd/yy]")]}, {
            insta::assert_snapshot!(name, pinned(&p2, &err), format);
        });
        assert!(
            !p2.file("exports")
                .join("export_demo_table")
                .join("_smelt")
                .exists()
        );
    }
}

/// A batch larger than what is held in memory (256k rows) is checked whole first, then read
/// again to be written.
#[test]
fn replace_where_checks_a_large_batch_before_writing_it() {
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  r:\n    replace_where:\n      from: s.src\n      into: s.dst\n      schema: dst.sql\n      predicate: \"id <= 300000\"\n",
    );
    p.write("dst.sql", "CREATE TABLE s.dst (id BIGINT, v STRING)");
    p.ok(&["sql", "CREATE TABLE s.src (id BIGINT, v STRING)"]);
    p.ok(&[
        "sql",
        "INSERT INTO s.src SELECT value AS id, CAST(value AS VARCHAR) AS v FROM generate_series(1, 300001)",
    ]);
    let (_, err) = p.fails(&["run"], 1);
    // A table's row is named by its values (it has no number a user could find).
    insta::assert_snapshot!("replace_where_large_batch_outside", pinned(&p, &err));
    assert!(!p.file("lake/s/dst").exists(), "nothing written");
    p.ok(&["sql", "TRUNCATE TABLE s.src"]);
    p.ok(&[
        "sql",
        "INSERT INTO s.src SELECT value AS id, CAST(value AS VARCHAR) AS v FROM generate_series(1, 300000)",
    ]);
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["rows_written"], 300_000);
    let n = p.query("SELECT count(*) AS n, max(id) AS m FROM s.dst");
    assert_eq!(
        (&n[0]["n"], &n[0]["m"]),
        (&Value::from(300_000), &Value::from(300_000))
    );
}

/// The human reports of the seed 003 and 004 examples' first runs.
#[test]
fn reports_are_stable() {
    let filters = vec![
        (r"\d+ ms", "[ms]"),
        (r" +\d+(\.\d+)? (B|KiB|MiB)", " [size]"),
        (
            r"export_timestamp=[^\n]+",
            "export_timestamp=[run time, Tokyo]",
        ),
    ];
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    p.ok(&["sql", "-f", "target.sql"]);
    let human = p.ok(&["run"]);
    insta::with_settings!({filters => filters.clone()}, {
        insta::assert_snapshot!("export_replace_report", human);
    });
    let p = Project::example("append_active");
    p.ok(&["sql", "-f", "input.sql"]);
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "input_2.sql"]);
    let human = p.ok(&["run"]);
    insta::with_settings!({filters => filters}, {
        insta::assert_snapshot!("append_active_report", human);
    });
}

#[test]
fn exports_can_be_zstd_compressed() {
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &yaml.replace("compression: snappy", "compression: zstd"),
    );
    p.ok(&["run", "export_demo_table"]);
    let file = exported(&p)
        .into_iter()
        .find(|f| f.ends_with(".parquet"))
        .unwrap();
    let reader = parquet::file::reader::SerializedFileReader::new(
        File::open(p.file("exports/export_demo_table").join(file)).unwrap(),
    )
    .unwrap();
    use parquet::file::reader::FileReader;
    let column = reader.metadata().row_group(0).column(0).compression();
    assert!(
        matches!(column, parquet::basic::Compression::ZSTD(_)),
        "{column:?}"
    );
}
