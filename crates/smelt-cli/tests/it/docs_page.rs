//! `smelt docs` through the real binary, its page opened in a real browser: headless
//! Chromium (Debian's `chromium`, installed by `testenv/setup.sh`) driven by playwright-core
//! (`testenv/browser/check.mjs`) reports the console's errors, the requests the page makes,
//! the DAG's nodes and where they link, each flow's charts and their points; a screenshot of
//! each page is kept in the test's target folder (`docs-page/*.png`). Pages: seed 000's
//! product2 after its runs, one with a failed flow and quarantined rows, and 30 generated
//! flows. The page's HTML is snapshot-tested apart from its times.

use std::path::PathBuf;
use std::process::Command;

use crate::common::Project;
use serde_json::Value;

fn testenv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testenv")
}

/// What headless Chromium sees of `p`'s page; its screenshot saved as `<name>.png`.
fn browse(p: &Project, name: &str) -> Value {
    let page = p.file("site/index.html");
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("docs-page");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join(format!("{name}.png"));
    let script = testenv().join("browser/check.mjs");
    assert!(
        testenv().join("node_modules/playwright-core").exists()
            && std::path::Path::new("/usr/bin/chromium").exists(),
        "headless Chromium or playwright-core is not installed: run `testenv/setup.sh` (the README's test command does)"
    );
    let out = Command::new("node")
        .arg(&script)
        .arg(&page)
        .arg(&shot)
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "the browser check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(shot.exists(), "no screenshot at {}", shot.display());
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        seen["errors"],
        serde_json::json!([]),
        "console errors: {seen}"
    );
    assert_eq!(
        seen["requests"],
        serde_json::json!([]),
        "the page fetched: {seen}"
    );
    seen
}

/// The nodes of the DAG named `name`, with classes `class`.
fn nodes<'a>(seen: &'a Value, class: &str) -> Vec<&'a Value> {
    seen["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["classes"].as_array().unwrap().iter().any(|c| c == class))
        .collect()
}

/// Every node visible and linking to a section of the page; every flow and table of the
/// model a node.
fn every_node_links(seen: &Value, model: &Value) {
    for n in seen["nodes"].as_array().unwrap() {
        assert_eq!(n["visible"], true, "{n}");
        assert_eq!(n["target"], true, "a node links nowhere: {n}");
    }
    let names = |class: &str| -> Vec<String> {
        nodes(seen, class)
            .iter()
            .map(|n| n["name"].as_str().unwrap().to_string())
            .collect()
    };
    let of_model = |key: &str| -> Vec<String> {
        model[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("flow"), of_model("flows"));
    assert_eq!(names("table"), of_model("tables"));
}

/// Each flow's charts hold one point per run of the event log.
fn charts_have_a_point_per_run(seen: &Value, model: &Value) {
    for (flow, doc) in seen["flows"]
        .as_array()
        .unwrap()
        .iter()
        .zip(model["flows"].as_array().unwrap())
    {
        let runs = doc["runs"].as_array().unwrap().len();
        let charts = flow["charts"].as_array().unwrap();
        if runs == 0 {
            assert!(charts.is_empty(), "{flow}");
            continue;
        }
        assert_eq!(charts.len(), 6, "{flow}");
        for c in charts {
            assert_eq!(c["points"], runs, "{}: {c}", flow["name"]);
        }
    }
}

/// `smelt docs` written, and its model.
fn docs(p: &Project) -> Value {
    let out = p.ok(&["docs"]);
    assert!(out.contains("wrote site/index.html"), "{out}");
    serde_json::from_str(&p.ok(&["--json", "docs"])).unwrap()
}

/// The page's HTML, one element a line, its times, durations and run ids masked.
fn html_structure(p: &Project) -> String {
    let html = std::fs::read_to_string(p.file("site/index.html")).unwrap();
    html.replace("><", ">\n<")
}

#[test]
fn product2_page_after_its_runs() {
    let p = Project::product2();
    p.bronze_step1();
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "insert_2.sql"]);
    p.ok(&["run"]);
    p.ok(&["run"]);
    let model = docs(&p);
    let flow = &model["flows"][0];
    assert_eq!(flow["runs"].as_array().unwrap().len(), 3, "{flow}");
    // Independent of the page: the reports the runs printed (3 inserted, then 2 applied).
    assert_eq!(flow["runs"][0]["applied"], 3, "{flow}");
    assert_eq!(flow["watermark"], flow["source_version"], "{flow}");
    let silver = &model["tables"][1];
    assert_eq!(
        silver["rows"].as_i64(),
        Some(p.silver().len() as i64),
        "{silver}"
    );
    let seen = browse(&p, "product2");
    every_node_links(&seen, &model);
    charts_have_a_point_per_run(&seen, &model);
    assert_eq!(nodes(&seen, "up-to-date").len(), 1, "{seen}");
    insta::with_settings!({filters => vec![
        (r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", "[time]"),
        (r"\b\d+ ms\b|\b\d+\.\d s\b", "[duration]"),
        (r"(cx|cy)=.[0-9.]+.", "$1=[y]"),
        (r#"points="[0-9., ]*""#, "points=[line]"),
        (r"<b>\d+</b> <small>max \d+</small>", "<b>[n]</b> <small>max [n]</small>"),
        (r"<title>[^<]*: \d+</title>", "<title>[point]</title>"),
        (r"/tmp/\.tmp[^/]+/", "[tmp]/"),
        (r"(<dt>bytes</dt>\n<dd>)\d+", "$1[bytes]"),
    ]}, {
        insta::assert_snapshot!("product2_page", html_structure(&p));
    });
}

#[test]
fn a_failed_flow_and_quarantined_rows() {
    let p = Project::product2();
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let quarantining = yaml.replace("on_cast_error: null ", "on_cast_error: quarantine ");
    let strict = "  strict:\n    apply:\n      from: medallion_demo.product2__bronze\n      into: medallion_demo.product2__strict\n      schema: silver.sql\n      on_cast_error: fail\n";
    p.write("smelt.yaml", &format!("{quarantining}{strict}"));
    p.bronze_step1();
    p.ok(&["run"]);
    p.ok(&[
        "sql",
        "INSERT INTO medallion_demo.product2__bronze (Id, Name, IsActive) VALUES \
         ('01t000000000009AAA', 'bad flag', 'maybe'), ('01t000000000008AAA', 'good', 'true')",
    ]);
    p.fails(&["run"], 1);
    let model = docs(&p);
    let strict = &model["flows"][1];
    assert_eq!(
        strict["runs"].as_array().unwrap().last().unwrap()["status"],
        "failed"
    );
    let error = strict["runs"][1]["error"].as_str().unwrap();
    assert!(error.contains("IsActive"), "{error}");
    // The run's hint, as the terminal printed it, on a line of its own.
    assert!(error.contains("\nhint: fix the value in bronze"), "{error}");
    let quality = &model["flows"][0]["quality"];
    assert_eq!(quality["quarantined"], 1, "{quality}");
    assert_eq!(quality["cast_failures"][0]["name"], "IsActive", "{quality}");
    assert_eq!(quality["samples"].as_array().unwrap().len(), 1, "{quality}");

    let seen = browse(&p, "failed_and_quarantined");
    every_node_links(&seen, &model);
    charts_have_a_point_per_run(&seen, &model);
    let failed = nodes(&seen, "failed");
    assert_eq!(failed.len(), 1, "{seen}");
    assert_eq!(failed[0]["name"], "strict");
    let flows = seen["flows"].as_array().unwrap();
    assert!(
        flows[1]["error"].as_str().unwrap().contains("IsActive"),
        "{seen}"
    );
    // The rejects table's header row and its one sample.
    assert_eq!(flows[0]["samples"], 2, "{seen}");
}

#[test]
fn thirty_flows_stay_readable() {
    let mut yaml = String::from("lake: ./lake\nflows:\n");
    for i in 0..30 {
        yaml.push_str(&format!(
            "  f{i:02}:\n    append:\n      from: raw.events_{}\n      into: out.events_{i:02}\n",
            i % 5
        ));
    }
    let p = Project::with_pipeline(&yaml);
    for t in 0..5 {
        p.ok(&[
            "sql",
            &format!("CREATE TABLE raw.events_{t} (id BIGINT, v STRING); INSERT INTO raw.events_{t} VALUES (1, 'a'), (2, 'b')"),
        ]);
    }
    p.ok(&["run"]);
    let model = docs(&p);
    assert_eq!(model["flows"].as_array().unwrap().len(), 30);
    assert_eq!(model["tables"].as_array().unwrap().len(), 35);
    let seen = browse(&p, "thirty_flows");
    every_node_links(&seen, &model);
    charts_have_a_point_per_run(&seen, &model);
    // Laid out in layers, not one long row: the DAG fits a wide screen's width.
    let width = seen["dag"]["width"].as_f64().unwrap();
    assert!(width < 1_400.0, "the DAG is {width} px wide");
}
