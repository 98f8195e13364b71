//! The product2 example (seed 000) through the real binary.

use crate::common::{Project, without_audit};
use serde_json::Value;

fn row<'a>(rows: &'a [Value], id: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["Id"] == id)
        .unwrap_or_else(|| panic!("no row {id} in {rows:?}"))
}

#[test]
fn seed_000_two_steps_then_replay() {
    let p = Project::product2();
    p.bronze_step1();

    // Step 1: three typed rows.
    let report = p.ok(&["run"]);
    assert!(report.contains("inserted"), "{report}");
    let step1 = p.silver();
    assert_eq!(step1.len(), 3);
    let r3 = row(&step1, "01t000000000003AAA");
    assert_eq!(r3["IsArchived"], true);
    assert_eq!(r3["IsActive"], false);
    assert!(
        r3.get("LastViewedDate").is_none() || r3["LastViewedDate"].is_null(),
        "NULL stays NULL: {r3}"
    );
    let r1 = row(&step1, "01t000000000001AAA");
    assert_eq!(r1["CreatedDate"], "2026-07-01T09:00:00Z");
    assert_eq!(r1["LastViewedDate"], "2026-07-29T01:00:00Z");
    assert_eq!(r1["Name"], "ノートパソコン Standard");
    assert_eq!(r1["IsDeleted"], false);
    assert!(
        r1["_ingest_timestamp"].is_string() && r1["_update_timestamp"].is_string(),
        "{r1}"
    );
    let v1 = p.status()["silver_version"].as_i64().unwrap();

    // Step 2: ...001 re-sent with new view dates, ...004 new.
    p.ok(&["sql", "-f", "insert_2.sql"]);
    let json: Value = serde_json::from_str(&p.ok(&["--json", "run"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(
        (
            f["inserted"].as_i64(),
            f["updated"].as_i64(),
            f["stale"].as_i64()
        ),
        (Some(1), Some(1), Some(0))
    );
    assert_eq!(f["mode"], "incremental");
    let step2 = p.silver();
    assert_eq!(step2.len(), 4);
    let r1b = row(&step2, "01t000000000001AAA");
    assert_eq!(r1b["LastViewedDate"], "2026-07-30T01:00:00Z");
    assert_eq!(r1b["LastReferencedDate"], "2026-07-30T01:05:00Z");
    assert_ne!(
        r1b["_update_timestamp"], r1["_update_timestamp"],
        "changed row gets the new run time"
    );
    assert!(r1b["_ingest_timestamp"].as_str() > r1["_ingest_timestamp"].as_str());
    let r2a = row(&step1, "01t000000000002AAA");
    let r2b = row(&step2, "01t000000000002AAA");
    assert_eq!(r2a, r2b, "untouched row keeps its audit columns");
    let r4 = row(&step2, "01t000000000004AAA");
    assert_eq!(r4["Family"], "Service");
    assert_eq!(r4["IsActive"], true);
    let v2 = p.status()["silver_version"].as_i64().unwrap();
    assert!(v2 > v1);

    // Step 3: nothing new -> no new silver version.
    let report = p.ok(&["run"]);
    assert!(report.contains("up to date"), "{report}");
    let status = p.status();
    assert_eq!(status["silver_version"].as_i64(), Some(v2));
    assert_eq!(status["versions_behind"].as_i64(), Some(0));
    assert_eq!(p.silver(), step2);

    // Re-sending an identical row: the sequence (ingest time) moves, the update time does not.
    let resend = std::fs::read_to_string(p.file("insert_1.sql")).unwrap();
    let second_row_only = resend.replace("TRUNCATE TABLE `medallion_demo.product2__bronze`;", "");
    let first = second_row_only.find("(\n'01t000000000001AAA'").unwrap();
    let second = second_row_only.find("(\n'01t000000000002AAA'").unwrap();
    let third = second_row_only.find("(\n'01t000000000003AAA'").unwrap();
    let only_002 = format!(
        "{}{}",
        &second_row_only[..first],
        second_row_only[second..third]
            .trim_end()
            .trim_end_matches(',')
    );
    p.write("resend.sql", &only_002);
    p.ok(&["sql", "-f", "resend.sql"]);
    let json: Value = serde_json::from_str(&p.ok(&["--json", "run"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(
        (f["unchanged"].as_i64(), f["updated"].as_i64()),
        (Some(1), Some(0)),
        "{f}"
    );
    let step3 = p.silver();
    let r2c = row(&step3, "01t000000000002AAA");
    assert_eq!(r2c["_update_timestamp"], r2b["_update_timestamp"]);
    assert!(r2c["_ingest_timestamp"].as_str() > r2b["_ingest_timestamp"].as_str());
    let step2 = step3;

    // Replaying every bronze version is a no-op on the data (the guard).
    let json: Value =
        serde_json::from_str(&p.ok(&["--json", "run", "--since", "2000-01-01"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(
        (f["inserted"].as_i64(), f["updated"].as_i64()),
        (Some(0), Some(0)),
        "{f}"
    );
    assert_eq!(p.silver(), step2);

    // A full refresh rebuilds silver from the bronze snapshot in one commit: the same rows,
    // stamped with the rebuild's run time.
    let version_before = p.status()["silver_version"].as_i64().unwrap();
    let json: Value = serde_json::from_str(&p.ok(&["--json", "run", "--full-refresh"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(
        (f["mode"].as_str(), f["inserted"].as_i64()),
        (Some("rebuild"), Some(4)),
        "{f}"
    );
    assert_eq!(
        f["silver_version"].as_i64(),
        Some(version_before + 1),
        "one commit"
    );
    assert!(
        f["files_removed"].as_i64().unwrap() >= 1,
        "every old file goes: {f}"
    );
    let rebuilt = p.silver();
    assert_eq!(without_update_time(&rebuilt), without_update_time(&step2));
}

/// Rows without `_update_timestamp`.
fn without_update_time(rows: &[Value]) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("_update_timestamp");
            r
        })
        .collect()
}

#[test]
fn plan_reports_without_writing() {
    let p = Project::product2();
    p.bronze_step1();
    let json: Value = serde_json::from_str(&p.ok(&["--json", "plan"])).unwrap();
    assert_eq!(json["flows"][0]["inserted"].as_i64(), Some(3));
    assert_eq!(json["flows"][0]["status"], "planned");
    assert!(
        !p.file("lake/medallion_demo/product2__silver").exists(),
        "plan created silver"
    );
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "insert_2.sql"]);
    let before = p.status();
    let json: Value = serde_json::from_str(&p.ok(&["--json", "plan"])).unwrap();
    assert_eq!(
        (
            json["flows"][0]["inserted"].as_i64(),
            json["flows"][0]["updated"].as_i64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(p.status()["silver_version"], before["silver_version"]);
}

#[test]
fn crash_before_the_silver_commit_leaves_everything_untouched() {
    // Uninterrupted reference.
    let reference = Project::product2();
    reference.bronze_step1();
    reference.ok(&["run"]);
    reference.ok(&["sql", "-f", "insert_2.sql"]);
    reference.ok(&["run"]);

    let p = Project::product2();
    p.bronze_step1();
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "insert_2.sql"]);
    let before_rows = p.silver();
    let before = p.status();
    let out = p.run_with_failpoint("before_silver_commit");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("injected failure"), "{stderr}");
    let after = p.status();
    assert_eq!(after["silver_version"], before["silver_version"]);
    assert_eq!(after["watermark"], before["watermark"]);
    assert_eq!(p.silver(), before_rows);

    p.ok(&["run"]);
    let rows = p.silver();
    assert_eq!(without_audit(&rows), without_audit(&reference.silver()));
    // Audit columns come from this lake's own bronze commits: ...001 and ...004 from the second insert.
    let ingest = |id: &str| {
        row(&rows, id)["_ingest_timestamp"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(ingest("01t000000000001AAA"), ingest("01t000000000004AAA"));
    assert!(ingest("01t000000000001AAA") > ingest("01t000000000002AAA"));
    assert_eq!(p.status()["watermark"], reference.status()["watermark"]);
}

#[test]
fn crash_on_the_first_run_leaves_no_silver_and_recovers() {
    let p = Project::product2();
    p.bronze_step1();
    let out = p.run_with_failpoint("before_silver_commit");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        !p.file("lake/medallion_demo/product2__silver/_delta_log")
            .exists(),
        "no half-created silver"
    );
    assert!(p.status()["watermark"].is_null());
    p.ok(&["run"]);
    assert_eq!(p.silver().len(), 3);
}

#[test]
fn run_report_is_stable() {
    let p = Project::product2();
    p.bronze_step1();
    let human = p.ok(&["run"]);
    insta::with_settings!({filters => vec![
        (r"\d+ ms", "[ms]"),
        (r" +\d+(\.\d+)? (B|KiB|MiB)", " [size]"),
    ]}, {
        insta::assert_snapshot!("product2_step1_report", human);
    });
    p.ok(&["sql", "-f", "insert_2.sql"]);
    let human = p.ok(&["run"]);
    insta::with_settings!({filters => vec![
        (r"\d+ ms", "[ms]"),
        (r" +\d+(\.\d+)? (B|KiB|MiB)", " [size]"),
    ]}, {
        insta::assert_snapshot!("product2_step2_report", human);
    });
}

#[test]
fn every_flow_run_lands_in_the_event_log() {
    let p = Project::product2();
    p.bronze_step1();
    p.ok(&["plan"]);
    p.ok(&["run"]);
    p.ok(&["run"]);
    let out = p.run_with_failpoint("before_silver_commit");
    assert_eq!(
        out.status.code(),
        Some(0),
        "up to date: no write, so no failpoint"
    );
    p.ok(&["sql", "-f", "insert_2.sql"]);
    let out = p.run_with_failpoint("before_silver_commit");
    assert_eq!(out.status.code(), Some(1));
    let rows = p.query("SELECT flow, status, inserted, from_version, to_version, error FROM _smelt.event_log ORDER BY finished_at");
    let statuses: Vec<&str> = rows.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        vec!["applied", "up_to_date", "up_to_date", "failed"],
        "plans are not logged: {rows:?}"
    );
    assert_eq!(rows[0]["inserted"], 3);
    assert_eq!(rows[0]["to_version"], 2);
    assert!(
        rows[3]["error"]
            .as_str()
            .unwrap()
            .contains("injected failure")
    );
}

#[test]
fn a_tight_memory_limit_spills_key_partitions_and_gives_the_same_silver() {
    let whole = Project::product2();
    let split = Project::product2();
    for p in [&whole, &split] {
        p.bronze_step1();
    }
    whole.ok(&["run"]);
    let report = split.ok(&["run", "--memory-limit", "16KiB"]);
    assert!(report.contains("key partitions"), "{report}");
    for p in [&whole, &split] {
        p.ok(&["sql", "-f", "insert_2.sql"]);
    }
    whole.ok(&["run"]);
    let json: Value =
        serde_json::from_str(&split.ok(&["--json", "run", "--memory-limit", "16KiB"])).unwrap();
    let f = &json["flows"][0];
    assert!(f["partitions"].as_u64().unwrap() > 1, "{f}");
    assert_eq!(
        (f["inserted"].as_i64(), f["updated"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        without_audit(&split.silver()),
        without_audit(&whole.silver())
    );

    let (_, err) = split.fails(&["run", "--memory-limit", "lots"], 2);
    insta::assert_snapshot!("memory_limit_not_a_size", err);
}

/// `audit.update_timestamp_on: apply` stamps every newer update, as seed 000's MERGE does
/// (`_update_timestamp = CURRENT_TIMESTAMP()` whenever the bronze row is newer), where the
/// default keeps the stamp of a row whose data did not change.
#[test]
fn update_timestamp_on_apply_stamps_a_resent_identical_row() {
    let p = Project::product2();
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let line = "        update_timestamp: _update_timestamp";
    assert!(yaml.contains(line), "{yaml}");
    let with_apply = yaml.replacen(
        line,
        &format!("{line}\n        update_timestamp_on: apply\n#"),
        1,
    );
    p.write("smelt.yaml", &with_apply);
    p.bronze_step1();
    p.ok(&["run"]);
    let before = p.silver();
    // Re-send 003 unchanged: a newer bronze row with the same data.
    let insert = std::fs::read_to_string(p.file("insert_1.sql")).unwrap();
    let start = insert.find("(\n'01t000000000003AAA'").unwrap();
    let head = insert.find("VALUES").unwrap() + "VALUES".len();
    let resend = format!(
        "{}\n{}",
        &insert[..head].replace("TRUNCATE TABLE `medallion_demo.product2__bronze`;", ""),
        insert[start..].trim_end()
    );
    p.write("resend.sql", &resend);
    p.ok(&["sql", "-f", "resend.sql"]);
    let json: Value = serde_json::from_str(&p.ok(&["--json", "run"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(
        (f["unchanged"].as_i64(), f["updated"].as_i64()),
        (Some(1), Some(0)),
        "{f}"
    );
    let after = p.silver();
    let (b, a) = (
        row(&before, "01t000000000003AAA"),
        row(&after, "01t000000000003AAA"),
    );
    assert!(
        a["_update_timestamp"].as_str() > b["_update_timestamp"].as_str(),
        "{b} -> {a}"
    );
    // The rows the run did not write keep theirs.
    let (b1, a1) = (
        row(&before, "01t000000000001AAA"),
        row(&after, "01t000000000001AAA"),
    );
    assert_eq!(a1["_update_timestamp"], b1["_update_timestamp"]);
    assert_eq!(without_audit(&after), without_audit(&before));

    // Without a stamp column there is nothing to stamp: refused at validation.
    let no_stamp = with_apply.replacen(line, "        update_timestamp: null", 1);
    p.write("smelt.yaml", &no_stamp);
    let (_, err) = p.fails(&["validate"], 2);
    insta::assert_snapshot!("update_stamp_without_column", err);
}
