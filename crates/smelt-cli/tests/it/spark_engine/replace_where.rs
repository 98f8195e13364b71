//! replace_where flows on both engines: seed 003 from a table, and from files.

use super::*;

/// Seed 003's selective overwrite from a table: the source's snapshot replaces the target
/// rows from its least `sale_date` on, cast (NUMERIC to DECIMAL(18,2), TIMESTAMP to
/// TIMESTAMP_NTZ) by `try_cast`.
pub(super) const REPLACE: &str = "  sales:
    replace_where:
      from: abc.export_demo_table
      into: demo.sales
      predicate: \"sale_date >= {min(sale_date)}\"
      cast_dialect: spark
";

/// A replace_where flow's report fields the engines cannot agree on (beyond
/// [`NOT_COMPARED`]).
pub(super) const REPLACE_NOT_COMPARED: &[&str] = &[
    // The predicate as run: its bounds are `arrow_cast(…)` embedded, `CAST(… AS …)` on Spark
    // (and its names backquoted there).
    "predicate",
];

/// The target of seed 003 without the export's column, and its three rows.
pub(super) const SALES: &str =
    "CREATE OR REPLACE TABLE demo.sales (sale_id BIGINT, product_name STRING, \
    quantity BIGINT, unit_price DECIMAL(18, 2), sale_date DATE, updated_at TIMESTAMP_NTZ);
INSERT INTO demo.sales VALUES
  (1, 'Notebook', 2, 500.00, '2026-07-20', '2026-07-20 01:00:00'),
  (2, 'Pen', 10, 120.00, '2026-07-20', '2026-07-20 02:00:00'),
  (3, 'File', 1, 300.00, '2026-07-21', '2026-07-21 01:00:00');
";

/// Seed 003's `replace_where` from a table (examples/export_replace's tables), as
/// embedded: a target column the source lacks, the first replace (the predicate's bound
/// from the batch), nothing new, a new source version whose run is killed before its write
/// and run again, `compile` and `plan`, a value that overflows its decimal, a batch row
/// outside a fixed predicate (nothing written), a rebuild, and `status`.
pub(super) fn replace_where(url: &str) {
    let p = Project::example("export_replace");
    let pair = Pair::placing(p, "  abc.export_demo_table: ./source\n", REPLACE, url);
    let both = |args: &[&str]| {
        for file in ["embedded.yaml", "spark.yaml"] {
            let mut all = vec!["-p", file];
            all.extend_from_slice(args);
            pair.p.ok(&all);
        }
    };
    pair.bronze("source.sql");
    both(&["sql", "-f", "target.sql"]);
    let (_, e) = pair.p.fails(&["-p", "embedded.yaml", "run"], 1);
    let (_, s) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    pin_failures("replace_where_target_column_not_in_input", &pair.p, &e, &s);

    pair.p.write("sales.sql", SALES);
    both(&["sql", "-f", "sales.sql"]);
    let replaced = |step: &str| {
        let sql = "SELECT * FROM demo.sales ORDER BY sale_id";
        let (e, s) = pair.rows(sql, &[]);
        assert!(!e.is_empty(), "{step}: the embedded target is empty");
        assert_eq!(e, s, "{step}: targets differ (left embedded, right Spark)");
    };
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["rows_replaced"], 3, "{:?}", first.1);
    let predicate = first.1[0]["predicate"].as_str().unwrap_or_default();
    // The Spark SQL run: the predicate rendered for Spark, its bound filled.
    assert_eq!(predicate, "`sale_date` >= CAST('2026-07-20' AS DATE)");
    same_reports_but("replace step 1", REPLACE_NOT_COMPARED, &first);
    replaced("replace step 1");
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);
    same_reports_but("replace step 2", REPLACE_NOT_COMPARED, &again);

    pair.p.write(
        "more.sql",
        "INSERT INTO abc.export_demo_table VALUES \
         (5, 'Chair', 3, 4500.00, DATE '2026-07-22', TIMESTAMP '2026-07-22 03:00:00+00')",
    );
    pair.bronze("more.sql");
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    abort_spark_run(&pair.p, "before_spark_replace");
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    same_reports_but(
        "replace step 3, killed and run again",
        REPLACE_NOT_COMPARED,
        &(embedded, rerun),
    );
    replaced("replace step 3");

    pair.p.write(
        "huge.sql",
        "INSERT INTO abc.export_demo_table VALUES \
         (6, 'Gold', 1, 100000000000000000000.00, DATE '2026-07-23', TIMESTAMP '2026-07-23 00:00:00+00')",
    );
    pair.bronze("huge.sql");
    let compiled = pair.p.ok(&["-p", "spark.yaml", "compile"]);
    for part in [
        "INSERT INTO delta.`",
        "REPLACE WHERE `sale_date` >= CAST('2026-07-20' AS DATE)",
        "txnAppId=`smelt/sales`",
        "try_cast(r.`unit_price` AS DECIMAL(18,2))",
    ] {
        assert!(compiled.contains(part), "`{part}` not in:\n{compiled}");
    }
    let planned = (
        pair.p.flows(&["-p", "embedded.yaml", "plan"]),
        pair.p.flows(&["-p", "spark.yaml", "plan"]),
    );
    assert_eq!(planned.1[0]["status"], "planned", "{:?}", planned.1);
    same_reports_but("replace plan", REPLACE_NOT_COMPARED, &planned);
    let overflow = pair.run(&[]);
    assert_eq!(
        overflow.1[0]["cast_failures"],
        serde_json::json!({"unit_price": 1}),
        "{:?}",
        overflow.1
    );
    same_reports_but(
        "replace step 4, an overflow",
        REPLACE_NOT_COMPARED,
        &overflow,
    );
    replaced("replace step 4");

    // A fixed predicate the batch's older rows fall outside: nothing is written.
    let fixed = REPLACE.replace("{min(sale_date)}", "'2026-07-21'");
    pair.flows(&fixed, url);
    pair.p.write(
        "update.sql",
        "UPDATE abc.export_demo_table SET quantity = 4 WHERE sale_id = 2",
    );
    pair.bronze("update.sql");
    let (_, e) = pair.p.fails(&["-p", "embedded.yaml", "run"], 1);
    let (_, s) = pair.p.fails(&["-p", "spark.yaml", "run"], 1);
    pin_failures("replace_where_row_outside", &pair.p, &e, &s);
    replaced("replace step 5, refused");

    pair.flows(REPLACE, url);
    let rebuilt = pair.run(&["--full-refresh"]);
    same_reports_but("replace rebuild", REPLACE_NOT_COMPARED, &rebuilt);
    replaced("replace rebuild");
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"][0].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for field in ["watermark", "bronze_version", "versions_behind", "problem"] {
        assert_eq!(e[field], s[field], "replace status `{field}`: {e} vs {s}");
    }
}

/// Seed 003's selective overwrite from the export's Parquet files.
pub(super) const REPLACE_FILES: &str = "  sales:
    replace_where:
      from: ./exports/export_demo_table/**/*.parquet
      format: parquet
      into: demo.sales
      cast_dialect: spark
      predicate: \"updated_at >= '2026-07-21 00:00:00'\"
";

/// Seed 003 end to end (`examples/export_replace`): the export written embedded (its own
/// pipeline file), its Parquet files under `export_timestamp=<Tokyo time>/` replacing the
/// period in the target on both engines — the first batch, nothing new, a second export with
/// the Spark run killed before its write, `smelt status`.
pub(super) fn replace_files(url: &str) {
    let p = Project::example("export_replace");
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let export = &yaml[..yaml.find("  sales:").unwrap()];
    p.write(
        "export.yaml",
        &export.replace(
            "lake: ./lake",
            "lake: ./lake_x\ntables:\n  abc.export_demo_table: ./source",
        ),
    );
    p.ok(&["-p", "export.yaml", "sql", "-f", "source.sql"]);
    p.ok(&["-p", "export.yaml", "run"]);
    let pair = Pair::placing(p, "", REPLACE_FILES, url);
    for file in ["embedded.yaml", "spark.yaml"] {
        pair.p.ok(&["-p", file, "sql", "-f", "target.sql"]);
    }
    let fields = REPLACE_NOT_COMPARED;
    let replaced = |step: &str, reports: &(Vec<Value>, Vec<Value>)| {
        same_reports_but(step, fields, reports);
        let (e, s) = pair.rows("SELECT * FROM demo.sales ORDER BY sale_id", &[]);
        assert!(!e.is_empty(), "{step}: the embedded target is empty");
        assert_eq!(e, s, "{step}: targets differ (left embedded, right Spark)");
    };
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["files_new"], 1, "{:?}", first.1);
    replaced("replace from files step 1", &first);
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);
    replaced("replace from files step 2", &again);

    pair.p.write(
        "more.sql",
        "INSERT INTO abc.export_demo_table VALUES \
         (5, 'Chair', 3, 4500.00, DATE '2026-07-22', TIMESTAMP '2099-07-22 03:00:00+00')",
    );
    pair.p.ok(&["-p", "export.yaml", "sql", "-f", "more.sql"]);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    pair.p.ok(&["-p", "export.yaml", "run"]);
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    abort_spark_run(&pair.p, "before_spark_replace");
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(rerun[0]["files_new"], 1, "{rerun:?}");
    replaced(
        "replace from files step 3, killed and run again",
        &(embedded, rerun),
    );
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"][0].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for field in ["watermark", "bronze_version", "files_waiting", "problem"] {
        assert_eq!(e[field], s[field], "replace status `{field}`: {e} vs {s}");
    }
}
