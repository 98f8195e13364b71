//! Ingest flows on both engines: seed 002's CSV landing, JSON lines.

use super::*;

/// Seed 002's Auto Loader and APPLY CHANGES (`examples/tpch_part`), with the audit's file
/// row on and `cast_dialect: spark` (the Spark engine's casts).
pub(super) const INGEST: &str = "  part_raw:
    ingest:
      from: ./landing/**/*.tbl
      into: tpch.part_raw
      format: csv
      header: false
      sep: \"|\"
      columns: [p_partkey, p_name, p_mfgr, p_brand, p_type, p_size, p_container, p_retailprice, p_comment]
      audit:
        file_row: _file_row
  part:
    apply:
      from: tpch.part_raw
      into: tpch.part
      schema: silver/part.sql
      sequence_by: [_ingest_timestamp]
      cast_dialect: spark
      audit:
        ingest_timestamp: null
        update_timestamp: null
";

/// An ingest flow's report fields the engines cannot agree on (beyond [`NOT_COMPARED`]).
pub(crate) const INGEST_NOT_COMPARED: &[&str] = &[];

/// `text` written to `name` in `p`, modified at `at` seconds after 2026-07-01 (a whole
/// second: a Spark listing knows a file's time to the millisecond only).
pub(super) fn land(p: &Project, name: &str, text: &str, at: u64) {
    let path = p.file(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    stamp(&path, at);
}

pub(super) fn stamp(path: &std::path::Path, at: u64) {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_782_864_000 + at);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(time)
        .unwrap();
}

/// Bronze, its rejects and silver equal in both lakes; the reports of both flows.
pub(super) fn same_ingest(pair: &Pair, step: &str, reports: &(Vec<Value>, Vec<Value>)) {
    same_reports_but(
        step,
        INGEST_NOT_COMPARED,
        &(vec![reports.0[0].clone()], vec![reports.1[0].clone()]),
    );
    // The apply flow's, but the files it read: each engine lays bronze out in files its way.
    same_reports_but(
        step,
        &["files_read", "bytes_read"],
        &(reports.0[1..].to_vec(), reports.1[1..].to_vec()),
    );
    let bronze = "SELECT * FROM tpch.part_raw ORDER BY _datasource, _file_row";
    let (e, s) = pair.rows(bronze, &[]);
    assert!(!e.is_empty(), "{step}: bronze is empty");
    assert_eq!(e, s, "{step}: bronze differs (left embedded, right Spark)");
    let rejects = "SELECT * FROM tpch.part_raw__rejects ORDER BY file, line";
    let (e, s) = pair.rows(rejects, &["run_id", "rejected_at"]);
    assert_eq!(e, s, "{step}: rejects differ (left embedded, right Spark)");
    let silver = "SELECT * FROM tpch.part ORDER BY p_partkey";
    let (e, s) = pair.rows(silver, &[]);
    assert_eq!(e, s, "{step}: silver differs (left embedded, right Spark)");
}

/// Lines an ingest must quarantine, rescue or unquote: a short line, a quoted separator,
/// doubled quotes, a quoted field of 20,000 characters (a regular expression that recursed
/// per character would overflow Java's stack), two fields more than the columns, a blank
/// line, a CRLF line end.
pub(super) fn odd_lines() -> String {
    let long = format!("\"{}\"\"{}\"", "x|".repeat(5_000), "y".repeat(10_000));
    format!(
        "900001|short|x|\n900002|\"quoted|name\"|Manufacturer#1|Brand#11|PROMO TIN|7|JUMBO BOX|901.00|say \"\"hi\"\"|\n\n\
         900005|long|Manufacturer#3|Brand#33|LARGE|1|BOX|905.00|{long}|\n\
         900003|extra|Manufacturer#2|Brand#22|STANDARD|9|SM CASE|903.00|two more|x|\r\n"
    )
}

/// Seed 002 (`examples/tpch_part`): TPC-H `part.tbl` files land, are loaded once each into
/// bronze and applied to typed silver, on both engines from one landing folder; odd lines
/// quarantined and rescued alike; runs killed before the rejects' and bronze's statements
/// load nothing twice; a rebuild, a plan and the embedded engine reading the Spark engine's
/// ledger.
pub(super) fn ingest(url: &str) {
    use smelt_bench::tpch;
    let p = Project::tpch_part();
    std::fs::create_dir_all(p.file("landing")).unwrap();
    tpch::write_tbl(&tpch::day1(0.01), &p.file("landing/part-day1.tbl")).unwrap();
    stamp(&p.file("landing/part-day1.tbl"), 0);
    land(&p, "landing/day=2/odd.tbl", &odd_lines(), 10);
    let pair = Pair::placing(p, "", INGEST, url);
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["malformed"], 1, "{:?}", first.1);
    assert_eq!(first.1[0]["rescued"], 1, "{:?}", first.1);
    same_ingest(&pair, "ingest step 1", &first);

    // Day 2: repriced and new parts; the Spark run killed before its bronze commit.
    tpch::write_tbl(&tpch::day2(0.01), &pair.p.file("landing/part-day2.tbl")).unwrap();
    stamp(&pair.p.file("landing/part-day2.tbl"), 20);
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    abort_spark_run(&pair.p, "before_spark_bronze");
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    same_ingest(
        &pair,
        "ingest step 2, killed and run again",
        &(embedded, rerun),
    );

    // A file with malformed lines: killed after its rejects, then before them.
    land(&pair.p, "landing/day=3/odd.tbl", &odd_lines(), 30);
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    for point in ["before_spark_bronze", "before_spark_ingest_rejects"] {
        abort_spark_run(&pair.p, point);
    }
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(rerun[0]["to_version"], 3, "{rerun:?}");
    same_ingest(&pair, "ingest step 3, killed twice", &(embedded, rerun));

    // Nothing new; the embedded engine reads the Spark engine's ledger alike.
    let again = pair.run(&[]);
    assert_eq!(again.1[0]["status"], "up_to_date", "{:?}", again.1);
    same_ingest(&pair, "ingest step 4", &again);
    let across = pair
        .p
        .flows(&["-p", "spark.yaml", "run", "--engine", "embedded"]);
    assert_eq!(across[0]["status"], "up_to_date", "{across:?}");

    land(
        &pair.p,
        "landing/late.tbl",
        "900004|late|m|b|t|1|c|1.00|c|\n",
        40,
    );
    let compiled = pair.p.ok(&["-p", "spark.yaml", "compile", "part_raw"]);
    for part in [
        "binaryFile.`",
        "txnAppId=`smelt/part_raw`",
        "INSERT INTO delta.`",
    ] {
        assert!(compiled.contains(part), "`{part}` not in:\n{compiled}");
    }
    let planned = (
        pair.p.flows(&["-p", "embedded.yaml", "plan"]),
        pair.p.flows(&["-p", "spark.yaml", "plan"]),
    );
    assert_eq!(planned.1[0]["status"], "planned", "{:?}", planned.1);
    same_reports_but("ingest plan", INGEST_NOT_COMPARED, &planned);
    let status = |file: &str| -> Value {
        let out = pair.p.ok(&["-p", file, "--json", "status"]);
        serde_json::from_str::<Value>(&out).unwrap()["flows"][0].clone()
    };
    let (e, s) = (status("embedded.yaml"), status("spark.yaml"));
    for field in ["watermark", "files_waiting", "problem"] {
        assert_eq!(e[field], s[field], "ingest status `{field}`: {e} vs {s}");
    }
    let rebuilt = pair.run(&["--full-refresh"]);
    assert_eq!(rebuilt.1[0]["mode"], "rebuild", "{:?}", rebuilt.1);
    same_ingest(&pair, "ingest rebuild", &rebuilt);
}

/// JSON lines as Auto Loader lands them, with the file row audit on.
pub(super) const INGEST_JSON: &str = "  events:
    ingest:
      from: ./landing/**/*.json
      into: raw.events
      format: json
      audit:
        file_row: _file_row
";

/// Lines of JSON: nested values (keys out of order), NULL, numbers as JSON writes them, a
/// key written twice, blank and padded lines, two lines that are not objects, a CRLF end.
pub(super) const EVENTS: &str = "{\"id\": 1, \"name\": \"a\", \"n\": {\"z\": 1, \"y\": [1, 2.50]}, \"f\": 1.0}\n\n  {\"id\": 2, \"name\": null, \"t\": true, \"id\": 3}  \nnot json\n[1,2]\n{\"id\": 4, \"e\": 1e3, \"s\": \"{x\"}\r\n";

/// JSON lines ingested on both engines from one landing folder: equal bronze and rejects
/// (but the reason's parser message); a file in a `day=` folder with a new key and one of
/// the flow's own names, the Spark run killed before its bronze commit and run again.
pub(super) fn ingest_json(url: &str) {
    let p = Project::with_pipeline("lake: ./lake\nflows: {}\n");
    land(&p, "landing/a.json", EVENTS, 0);
    let pair = Pair::placing(p, "", INGEST_JSON, url);
    let same = |step: &str, reports: &(Vec<Value>, Vec<Value>)| {
        same_reports_but(step, INGEST_NOT_COMPARED, reports);
        let bronze = "SELECT * FROM raw.events ORDER BY _datasource, _file_row";
        let (e, s) = pair.rows(bronze, &[]);
        assert!(!e.is_empty(), "{step}: bronze is empty");
        assert_eq!(e, s, "{step}: bronze differs (left embedded, right Spark)");
        let rejects = "SELECT * FROM raw.events__rejects ORDER BY file, line";
        let (e, s) = pair.rows(rejects, &["run_id", "rejected_at", "reason"]);
        assert_eq!(e, s, "{step}: rejects differ (left embedded, right Spark)");
    };
    let first = pair.run(&[]);
    assert_eq!(first.1[0]["malformed"], 2, "{:?}", first.1);
    same("json step 1", &first);
    land(
        &pair.p,
        "landing/day=2/b.json",
        "{\"id\": 5, \"extra\": \"x\", \"_datasource\": \"mine\"}\n",
        10,
    );
    let embedded = pair.p.flows(&["-p", "embedded.yaml", "run"]);
    abort_spark_run(&pair.p, "before_spark_bronze");
    let rerun = pair.p.flows(&["-p", "spark.yaml", "run"]);
    assert_eq!(rerun[0]["rescued"], 1, "{rerun:?}");
    same("json step 2, killed and run again", &(embedded, rerun));
}
