//! Bronze commits that rewrite rows: read through the change feed, or a clear error.

use crate::common::Project;
use deltalake::datafusion::prelude::{col, lit};

async fn open(p: &Project) -> deltalake::DeltaTable {
    let path = p
        .file("lake/medallion_demo/product2__bronze")
        .canonicalize()
        .unwrap();
    deltalake::open_table(url::Url::from_directory_path(path).unwrap())
        .await
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Renames product ...001 in bronze with a delta-rs UPDATE (a commit that rewrites rows).
async fn rename_first_product(table: deltalake::DeltaTable) -> deltalake::DeltaTable {
    let (table, _) = table
        .update()
        .with_predicate(col("\"Id\"").eq(lit("01t000000000001AAA")))
        .with_update(
            deltalake::datafusion::common::Column::from_name("Name"),
            lit("renamed"),
        )
        .await
        .unwrap();
    table
}

#[test]
fn rewrite_without_change_feed_is_a_clear_error() {
    let p = Project::product2();
    let ddl = std::fs::read_to_string(p.file("bronze.sql")).unwrap();
    let without_cdf = &ddl[..ddl.find("ALTER TABLE").unwrap()];
    p.write("bronze.sql", without_cdf);
    p.bronze_step1();
    p.ok(&["run"]);
    runtime().block_on(async {
        rename_first_product(open(&p).await).await;
    });
    let before = p.status();
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!(
        "rewrite_without_change_data",
        crate::common::pinned(&p, &err)
    );
    assert_eq!(p.status()["silver_version"], before["silver_version"]);
}

#[test]
fn rewrites_with_change_feed_apply_post_images_and_ignore_deletes() {
    let p = Project::product2();
    p.bronze_step1();
    p.ok(&["run"]);
    runtime().block_on(async {
        let t = rename_first_product(open(&p).await).await;
        t.delete()
            .with_predicate(col("\"Id\"").eq(lit("01t000000000002AAA")))
            .await
            .unwrap();
    });
    let json: serde_json::Value = serde_json::from_str(&p.ok(&["--json", "run"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(f["updated"].as_i64(), Some(1), "{f}");
    assert!(
        f["ignored"].as_i64().unwrap() >= 2,
        "pre-image and delete are ignored: {f}"
    );
    let rows = p.silver();
    assert_eq!(
        rows.len(),
        3,
        "a bronze delete never deletes silver by default"
    );
    assert_eq!(rows[0]["Name"], "renamed");
}

#[test]
fn truncating_bronze_never_deletes_silver() {
    let p = Project::product2();
    p.bronze_step1();
    p.ok(&["run"]);
    p.ok(&["sql", "TRUNCATE TABLE medallion_demo.product2__bronze"]);
    let json: serde_json::Value = serde_json::from_str(&p.ok(&["--json", "run"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(f["delete_files_ignored"].as_i64(), Some(1), "{f}");
    assert_eq!(f["changes_read"].as_i64(), Some(0), "{f}");
    assert_eq!(p.silver().len(), 3);
    assert!(p.ok(&["run"]).contains("up to date"));
}

/// The product2 flow with `source_deletes: apply`.
fn applying_source_deletes(p: &Project) {
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &format!("{yaml}      source_deletes: apply\n"),
    );
}

#[test]
fn source_deletes_apply_deletes_silver_rows_from_the_change_feed() {
    let p = Project::product2();
    applying_source_deletes(&p);
    p.bronze_step1();
    p.ok(&["run"]);
    runtime().block_on(async {
        open(&p)
            .await
            .delete()
            .with_predicate(col("\"Id\"").eq(lit("01t000000000002AAA")))
            .await
            .unwrap();
    });
    let json: serde_json::Value = serde_json::from_str(&p.ok(&["--json", "run"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(
        (f["deleted"].as_i64(), f["tombstones_written"].as_i64()),
        (Some(1), Some(1)),
        "{f}"
    );
    let ids: Vec<String> = p
        .silver()
        .iter()
        .map(|r| r["Id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["01t000000000001AAA", "01t000000000003AAA"]);
}

#[test]
fn source_deletes_apply_reads_truncated_files_as_deletes() {
    let p = Project::product2();
    applying_source_deletes(&p);
    p.bronze_step1();
    p.ok(&["run"]);
    p.ok(&["sql", "TRUNCATE TABLE medallion_demo.product2__bronze"]);
    let json: serde_json::Value = serde_json::from_str(&p.ok(&["--json", "run"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(
        (f["deleted"].as_i64(), f["delete_files_ignored"].as_i64()),
        (Some(3), Some(0)),
        "{f}"
    );
    assert!(p.silver().is_empty());
    // The rows come back only through newer bronze changes.
    p.ok(&["sql", "-f", "insert_1.sql"]);
    p.ok(&["run"]);
    assert_eq!(p.silver().len(), 3);
}
