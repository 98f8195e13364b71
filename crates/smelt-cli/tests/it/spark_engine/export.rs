//! Export flows on both engines (seed 003's export).

use super::*;

/// An export flow's report fields the engines cannot agree on (beyond [`NOT_COMPARED`]):
/// each engine's own folder, and the partition named by the run's time.
pub(super) const EXPORT_NOT_COMPARED: &[&str] = &["into", "partition"];

/// Seed 003's whole pipeline (`examples/export_replace`) on each engine, each exporting to
/// a folder of its own and replacing from it: equal targets and reports; a second export
/// with the Spark run killed before its state, before its files and before they are
/// published, then run again (the same rows into the same folder); nothing new;
/// `smelt status`.
pub(super) fn export(url: &str) {
    let p = Project::example("export_replace");
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let flows = &yaml[yaml.find("flows:\n").unwrap() + "flows:\n".len()..];
    let flows = flows.replace("predicate:", "cast_dialect: spark\n      predicate:");
    let pair = Pair::placing(p, "  abc.export_demo_table: ./source\n", "", url);
    let tables = "tables:\n  abc.export_demo_table: ./source\n";
    pair.p.write(
        "embedded.yaml",
        &format!(
            "lake: ./lake_e\n{tables}flows:\n{}",
            flows.replace("./exports/", "./exports_e/")
        ),
    );
    pair.p.write(
        "spark.yaml",
        &format!(
            "engine: spark\nconnect: {url}\nlake: ./lake_s\n{tables}flows:\n{}",
            flows.replace("./exports/", "./exports_s/")
        ),
    );
    pair.bronze("source.sql");
    for file in ["embedded.yaml", "spark.yaml"] {
        pair.p.ok(&["-p", file, "sql", "-f", "target.sql"]);
    }
    let same = |step: &str, reports: &(Vec<Value>, Vec<Value>)| {
        let first = |r: &[Value]| vec![r[0].clone()];
        let exported = (first(&reports.0), first(&reports.1));
        same_reports_but(step, EXPORT_NOT_COMPARED, &exported);
        // The replace_where reads each engine's own export: its folder, files and bytes.
        let rest = |r: &[Value]| r[1..].to_vec();
        let own = ["predicate", "from", "files_read", "bytes_read"];
        same_reports_but(step, &own, &(rest(&reports.0), rest(&reports.1)));
        let sql = "SELECT * EXCEPT (export_timestamp) FROM demo.sales ORDER BY sale_id";
        let (e, s) = pair.rows(sql, &[]);
        assert!(!e.is_empty(), "{step}: the embedded target is empty");
        assert_eq!(e, s, "{step}: targets differ (left embedded, right Spark)");
    };
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["rows_written"], 2, "{:?}", first.1);
    same("export step 1", &first);

    pair.p.write(
        "more.sql",
        "INSERT INTO abc.export_demo_table VALUES \
         (5, 'Chair', 3, 4500.00, DATE '2026-07-22', TIMESTAMP '2099-07-22 03:00:00+00')",
    );
    pair.bronze("more.sql");
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    // Killed before its state is saved (nothing done), before its files (the state says
    // pending), then, writing that export again, before it is published.
    for point in [
        "before_spark_export_state",
        "before_spark_export",
        "before_spark_export_publish",
    ] {
        abort_spark_run(&pair.p, point);
    }
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(rerun[0]["status"], "up_to_date", "{rerun:?}");
    assert_eq!(rerun[1]["files_new"], 1, "{rerun:?}");
    same_reports_but(
        "export step 2, killed and run again",
        &["predicate", "from", "files_read", "bytes_read"],
        &(embedded[1..].to_vec(), rerun[1..].to_vec()),
    );
    let (e, s) = pair.rows("SELECT sale_id FROM demo.sales ORDER BY sale_id", &[]);
    assert_eq!(
        e, s,
        "export step 2: targets differ (left embedded, right Spark)"
    );
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);
    same("export step 3", &again);
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for i in 0..2 {
        for field in ["watermark", "bronze_version", "problem"] {
            assert_eq!(e[i][field], s[i][field], "status `{field}`: {e} vs {s}");
        }
    }
}
