//! `smelt validate` and `smelt plan` list every problem of every flow at once.

use crate::common::{Project, pinned};

/// A product2 project whose pipeline has problems in two flows.
fn broken() -> Project {
    let p = Project::product2();
    p.bronze_step1();
    let ddl = std::fs::read_to_string(p.file("silver.sql"))
        .unwrap()
        .replace(
            "`Name` STRING,",
            "`Name` STRING,\n`Colour` STRING,\n`Weight` STRING,",
        );
    p.write("silver.sql", &ddl);
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let yaml = yaml.replace(
        "      on_cast_error: null",
        "      where: \"Familyy = 'x'\"\n      on_cast_error: null",
    ) + "  other:\n    apply:\n      from: medallion_demo.nothing\n      into: medallion_demo.other\n      keys: [Id]\n";
    p.write("smelt.yaml", &yaml);
    p
}

#[test]
fn validate_lists_every_problem_of_every_flow() {
    let p = broken();
    let (_, err) = p.fails(&["validate"], 1);
    let err = err.replace(&p.path().display().to_string(), "[project]");
    insta::assert_snapshot!("validate_problems", err);
    // Nothing was written.
    assert!(!p.file("lake/medallion_demo/product2__silver").exists());
}

#[test]
fn plan_starts_with_the_same_checks() {
    let p = broken();
    let (_, plan) = p.fails(&["plan"], 1);
    let (_, validate) = p.fails(&["validate"], 1);
    assert_eq!(plan, validate);
    // One flow selected: its problems only.
    let (_, err) = p.fails(&["validate", "other"], 1);
    insta::assert_snapshot!("validate_one_flow", pinned(&p, &err));
}

#[test]
fn a_sound_pipeline_validates() {
    let p = Project::product2();
    p.bronze_step1();
    let out = p.ok(&["validate"]);
    assert!(
        out.contains("1 flow(s) of smelt.yaml checked: no problems"),
        "{out}"
    );
    let json: serde_json::Value = serde_json::from_str(&p.ok(&["--json", "validate"])).unwrap();
    assert_eq!(json["problems"].as_array().unwrap().len(), 0);
    // The checks write nothing: the plan still plans a first run.
    assert_eq!(p.flows(&["plan"])[0]["status"], "planned");
}

#[test]
fn append_and_replace_where_problems_are_listed_too() {
    let p = Project::example("append_active");
    p.ok(&["sql", "-f", "input.sql"]);
    p.write(
        "output.sql",
        "CREATE TABLE foundry.output (id STRING, status STRING, colour STRING, size STRING);",
    );
    let yaml = std::fs::read_to_string(p.file("smelt.yaml"))
        .unwrap()
        .replace("status = 'active'", "statuss = 'active'")
        .replace(
            "      on_rewrite: fail",
            "      on_rewrite: fail\n      schema: output.sql",
        )
        + "  copy:\n    replace_where:\n      from: foundry.input\n      into: foundry.copy\n      predicate: \"true\"\n";
    p.write("smelt.yaml", &yaml);
    let (_, err) = p.fails(&["validate"], 1);
    let err = err.replace(&p.path().display().to_string(), "[project]");
    insta::assert_snapshot!("append_and_replace_where_problems", err);
}

/// The engine choice is checked before any cluster is reached: the pipeline file's `engine:`
/// and `connect:`, `--engine`, a Spark pipeline without a cluster; a cluster that does not
/// answer is named (without its token).
#[test]
fn engine_choices_are_checked_and_named() {
    let p = Project::product2();
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write("typo.yaml", &format!("engine: sprak\n{yaml}"));
    let (_, err) = p.fails(&["-p", "typo.yaml", "validate"], 2);
    insta::assert_snapshot!("engine_misspelt", err);
    p.write("lonely.yaml", &format!("connect: sc://h:15002\n{yaml}"));
    let (_, err) = p.fails(&["-p", "lonely.yaml", "validate"], 2);
    insta::assert_snapshot!("connect_without_spark", err);
    p.write("nourl.yaml", &format!("engine: spark\n{yaml}"));
    let (_, err) = p.fails(&["-p", "nourl.yaml", "run"], 2);
    insta::assert_snapshot!("spark_without_cluster", err);
    let (_, err) = p.fails(&["--engine", "duckdb", "run"], 2);
    insta::assert_snapshot!("unknown_engine_option", err);
    let (_, err) = p.fails(&["compile"], 2);
    insta::assert_snapshot!("compile_embedded", err);
    // What the engine refuses needs no cluster; then nothing listens on port 9 of the
    // loopback: named, token hidden.
    let (_, err) = p.fails(&["--engine", "sc://127.0.0.1:9", "validate"], 1);
    insta::assert_snapshot!("spark_refuses_bigquery_dialect", pinned(&p, &err));
    let spark = yaml.replace(
        "      on_cast_error: null",
        "      on_cast_error: null\n      cast_dialect: spark",
    );
    p.write("spark.yaml", &spark);
    let (_, err) = p.fails(
        &[
            "-p",
            "spark.yaml",
            "--engine",
            "sc://127.0.0.1:9/;token=secret",
            "validate",
        ],
        1,
    );
    assert!(!err.contains("secret"), "{err}");
    insta::assert_snapshot!("spark_unreachable_token_hidden", pinned(&p, &err));
}
