//! Pipeline predicates in smelt's one dialect (docs/pipeline.md, "Predicates"): a name in
//! double quotes or backquotes is a column, a string is in single quotes with a quote
//! doubled and a backslash itself, names are case-sensitive, and a condition reads only the
//! columns it sees. The Spark engine's half of each rule is `spark_engine`'s
//! `predicates_mean_the_same`.

use crate::common::{Project, pinned};

/// product2 with `extra` added to its flow and bronze holding `values` rows of (Id, Name).
fn product2_with(extra: &str, values: &str) -> Project {
    let p = Project::product2();
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let yaml = yaml.replace(
        "      on_cast_error: null",
        &format!("{extra}      on_cast_error: null"),
    );
    p.write("smelt.yaml", &yaml);
    p.ok(&["sql", "-f", "bronze.sql"]);
    p.write(
        "rows.sql",
        &format!(
            "INSERT INTO medallion_demo.product2__bronze (Id, Name, IsDeleted) VALUES {values}"
        ),
    );
    p.ok(&["sql", "-f", "rows.sql"]);
    p
}

fn names(p: &Project) -> Vec<String> {
    let out = p.ok(&[
        "--json",
        "sql",
        "SELECT Name FROM medallion_demo.product2__silver ORDER BY Id",
    ]);
    let rows: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["Name"].as_str().unwrap_or("NULL").to_string())
        .collect()
}

#[test]
fn double_quotes_and_backquotes_name_columns_and_strings_keep_their_text() {
    let p = product2_with(
        "      where: '\"Name\" LIKE ''v1%'' OR `Name` = ''O''''Brien'' OR Name = ''a\\b'''\n      apply_as_deletes: '\"IsDeleted\" = ''true'''\n",
        r"('01t000000000001AAA', 'v1a', 'false'), ('01t000000000002AAA', 'v2b', 'false'),
          ('01t000000000003AAA', 'O\'Brien', 'false'), ('01t000000000004AAA', 'a\\b', 'false'),
          ('01t000000000005AAA', 'v1e', 'true')",
    );
    p.ok(&["run"]);
    assert_eq!(names(&p), ["v1a", "O'Brien", r"a\b"]);
}

#[test]
fn a_name_the_predicate_does_not_see_is_refused_with_the_nearest() {
    let p = product2_with(
        "      where: \"name = 'x'\"\n",
        "('01t000000000001AAA', 'x', 'false')",
    );
    let (_, err) = p.fails(&["validate"], 1);
    insta::assert_snapshot!("predicate_case_refused", pinned(&p, &err));
    let p = product2_with(
        "      where: 'Name = \"x\"'\n",
        "('01t000000000001AAA', 'x', 'false')",
    );
    let (_, err) = p.fails(&["validate"], 1);
    insta::assert_snapshot!("predicate_double_quoted_string", pinned(&p, &err));
}

/// What `smelt validate` prints of product2 with `where: <predicate>` (exit 2: refused when
/// the pipeline file is read, before any table is looked at).
fn refused_at_load(predicate: &str) -> String {
    let p = Project::product2();
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let yaml = yaml.replace(
        "      on_cast_error: null",
        &format!("      where: \"{predicate}\"\n      on_cast_error: null"),
    );
    p.write("smelt.yaml", &yaml);
    let (_, err) = p.fails(&["validate"], 2);
    pinned(&p, &err)
}

#[test]
fn a_predicate_that_is_not_one_condition_is_refused_at_load() {
    let err = refused_at_load("Name = 'x' Family = 'y'");
    insta::assert_snapshot!("predicate_syntax_refused", err);
}

#[test]
fn a_predicate_that_reads_another_table_is_refused_at_load() {
    let err = refused_at_load("EXISTS (SELECT 1 FROM medallion_demo.other)");
    insta::assert_snapshot!("predicate_subquery_refused", err);
}
