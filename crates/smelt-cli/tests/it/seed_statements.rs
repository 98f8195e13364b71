//! Every SQL statement of the four seeds (`../shared/seeds/`) that touches a table, through
//! `smelt sql` as written — table names, catalogs and the seeds' Python placeholders aside
//! — either runs, or is refused with a message naming the statement and the alternative.
//! Seed 000's scripts are the product2 example's files (`bronze.sql`, `insert_1.sql`,
//! `insert_2.sql`, `silver.sql`, `merge.sql`), copied from the seed unmodified.

use crate::common::Project;

/// What a statement must do.
enum Outcome {
    Runs,
    /// Refused: the message holds the first text, the hint the second.
    Refused(&'static str, &'static str),
}
use Outcome::{Refused, Runs};

fn check(p: &Project, id: &str, sql: &str, outcome: Outcome) {
    let file = format!("{id}.sql");
    p.write(&file, sql);
    match outcome {
        Runs => {
            p.ok(&["sql", "-f", &file]);
        }
        Refused(message, hint) => {
            let out = p.smelt().args(["sql", "-f", &file]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{id} ran: {err}");
            assert!(err.contains(message), "{id}: {err}");
            assert!(err.contains(hint), "{id}: {err}");
            assert!(err.contains("statement "), "{id} names no statement: {err}");
        }
    }
}

#[test]
fn seed_000_bigquery() {
    let p = Project::product2();
    // A1–A2, A3–A5, A6–A7, A8–A9, A10–A12.
    for file in [
        "bronze.sql",
        "insert_1.sql",
        "insert_2.sql",
        "silver.sql",
        "merge.sql",
    ] {
        p.ok(&["sql", "-f", file]);
    }
    p.ok(&["sql", "SELECT * FROM medallion_demo.product2__bronze"]);
    // A13 / A15: the change query the DataFrames and Spark versions build per day.
    check(
        &p,
        "A13",
        "SELECT
`Id`, `Name`, `IsActive`,
_CHANGE_TYPE AS `_change_type`,
_CHANGE_TIMESTAMP AS `_change_timestamp`
FROM CHANGES(
TABLE `medallion_demo.product2__bronze`,
TIMESTAMP('2026-01-01 00:00:00'),
TIMESTAMP('2099-01-01 00:00:00')
)",
        Runs,
    );
    // A14 / A16: their MERGE, from a temporary table.
    p.ok(&[
        "sql",
        "CREATE TABLE medallion_demo.product2__tmp (Id STRING, Name STRING, _ingest_timestamp TIMESTAMP);
         INSERT INTO medallion_demo.product2__tmp VALUES ('01t000000000001AAA', 'renamed', TIMESTAMP '2099-01-01 00:00:00');",
    ]);
    check(
        &p,
        "A14",
        "MERGE `medallion_demo.product2__silver` AS T
USING `medallion_demo.product2__tmp` AS S
ON T.`Id` = S.`Id`
WHEN MATCHED AND T.`_ingest_timestamp` < S.`_ingest_timestamp` THEN
UPDATE SET
T.`Name` = S.`Name`, T.`_ingest_timestamp` = S.`_ingest_timestamp`, T.`_update_timestamp` = CURRENT_TIMESTAMP()
WHEN NOT MATCHED THEN
INSERT (`Id`, `Name`, `_ingest_timestamp`, `_update_timestamp`)
VALUES (S.`Id`, S.`Name`, S.`_ingest_timestamp`, CURRENT_TIMESTAMP())",
        Runs,
    );
    let renamed =
        p.query("SELECT Name FROM medallion_demo.product2__silver WHERE Id = '01t000000000001AAA'");
    assert_eq!(renamed, vec![serde_json::json!({"Name": "renamed"})]);
}

#[test]
fn seed_002_databricks() {
    let p = Project::product2();
    check(
        &p,
        "B1",
        "CREATE CATALOG IF NOT EXISTS manabian_test;",
        Refused("CREATE CATALOG is not supported", "CREATE SCHEMA"),
    );
    // Nothing of a script that does not parse runs.
    let (_, err) = p.fails(
        &["sql", "CREATE SCHEMA early; CREATE VOLUME v; SELECT 1"],
        1,
    );
    assert!(err.contains("statement 2: CREATE VOLUME"), "{err}");
    assert!(!err.contains("ran and stay committed"), "{err}");
    // B2, the catalog aside.
    check(&p, "B2", "CREATE SCHEMA IF NOT EXISTS dlt_brz2slv;", Runs);
    check(
        &p,
        "B3",
        "CREATE VOLUME IF NOT EXISTS manabian_test.dlt_brz2slv.src_01;",
        Refused("CREATE VOLUME is not supported", "ingest flow"),
    );
    // B4, over the bronze the view reads (`part_raw`: all strings).
    p.ok(&[
        "sql",
        "CREATE TABLE dlt_brz2slv.part_raw (p_partkey STRING, p_name STRING, p_mfgr STRING, p_brand STRING, p_type STRING, p_size STRING, p_container STRING, p_retailprice STRING, p_comment STRING, _datasource STRING, _ingest_timestamp TIMESTAMP);
         INSERT INTO dlt_brz2slv.part_raw VALUES ('1', 'goldenrod', 'Manufacturer#1', 'Brand#13', 'PROMO', '7', 'JUMBO PKG', '901.00', 'ly. slyly', 'part.tbl', TIMESTAMP '2026-07-01 00:00:00');",
    ]);
    check(
        &p,
        "B4",
        "SELECT
    p_partkey::long,
    p_name,
    p_mfgr,
    p_brand,
    p_type,
    p_size::int,
    p_container,
    p_retailprice::decimal(12, 2),
    p_comment,
    _datasource,
    _ingest_timestamp
FROM
    dlt_brz2slv.part_raw",
        Runs,
    );
}

#[test]
fn seed_003_bigquery_and_databricks() {
    let p = Project::product2();
    check(
        &p,
        "C1",
        "CREATE OR REPLACE TABLE abc.export_demo_table
(
  sale_id       INT64,
  product_name  STRING,
  quantity      INT64,
  unit_price    NUMERIC,
  sale_date     DATE,
  updated_at    TIMESTAMP
);",
        Runs,
    );
    check(
        &p,
        "C2",
        "INSERT INTO abc.export_demo_table
(sale_id, product_name, quantity, unit_price, sale_date, updated_at)
VALUES
  (1, 'Notebook', 2, 500.00, DATE '2026-07-20', TIMESTAMP '2026-07-20 01:00:00+00'),
  (2, 'Pen', 10, 120.00, DATE '2026-07-20', TIMESTAMP '2026-07-20 02:00:00+00'),
  (3, 'File', 5, 300.00, DATE '2026-07-21', TIMESTAMP '2026-07-21 01:00:00+00'),
  (4, 'Desk', 1, 25000.00, DATE '2026-07-21', TIMESTAMP '2026-07-21 02:00:00+00');",
        Runs,
    );
    check(&p, "C3", "SELECT * FROM abc.export_demo_table;", Runs);
    // C4–C9: one script. The DECLAREs run; FORMAT is BigQuery's, and EXPORT DATA is an
    // export flow's work.
    check(
        &p,
        "C4-C6",
        "DECLARE export_timestamp TIMESTAMP DEFAULT CURRENT_TIMESTAMP();
DECLARE export_uri STRING;
DECLARE export_from TIMESTAMP DEFAULT '2026-07-21 00:00:00+00';",
        Runs,
    );
    check(
        &p,
        "C7",
        "DECLARE export_timestamp TIMESTAMP DEFAULT CURRENT_TIMESTAMP();
DECLARE export_uri STRING;
SET export_uri = FORMAT(
  'gs://export_demo_bucket/selectivity_export/export_demo_table/export_timestamp=%s/export_demo_table_*.parquet',
  FORMAT_TIMESTAMP(
    '%Y-%m-%d %H:%M:%S%Ez',
    export_timestamp,
    'Asia/Tokyo'
  )
);",
        Refused("statement 3: cannot compute", "BigQuery's FORMAT"),
    );
    check(
        &p,
        "C8",
        "DECLARE export_from TIMESTAMP DEFAULT '2026-07-21 00:00:00+00';
SET export_from = TIMESTAMP(
  DATETIME(
    CURRENT_DATE(),
    TIME '00:00:00'
  )
);",
        Refused("statement 2: cannot compute", "DATETIME(date, time)"),
    );
    check(
        &p,
        "C9",
        r#"EXECUTE IMMEDIATE FORMAT("""
  EXPORT DATA OPTIONS (
    uri = '%s',
    format = 'PARQUET',
    overwrite = TRUE,
    compression = 'SNAPPY'
  )
  AS
  SELECT
    sale_id,
    product_name,
    quantity,
    unit_price,
    sale_date,
    updated_at,
    %T AS export_timestamp
  FROM abc.export_demo_table
  WHERE updated_at >= %T
  """,
  export_uri,
  export_timestamp,
  export_from
);"#,
        Refused("EXECUTE IMMEDIATE", "an export flow"),
    );
    // C10–C12, `<table_name>` filled in.
    check(
        &p,
        "C10",
        "CREATE OR REPLACE TABLE abc.selective
(
  sale_id       BIGINT,
  product_name  STRING,
  quantity      BIGINT,
  unit_price    DECIMAL(18, 2),
  sale_date     DATE,
  updated_at    TIMESTAMP_NTZ,
  export_timestamp TIMESTAMP_NTZ
)
USING DELTA
TBLPROPERTIES (
  'delta.feature.timestampNtz' = 'supported'
);",
        Runs,
    );
    check(
        &p,
        "C11",
        "INSERT OVERWRITE TABLE abc.selective
(
  sale_id,
  product_name,
  quantity,
  unit_price,
  sale_date,
  updated_at,
  export_timestamp
)
VALUES
  (1, 'Notebook', 2, CAST(500.00 AS DECIMAL(18, 2)), '2026-07-20', '2026-07-20 01:00:00', '2026-07-21 01:00:00'),
  (2, 'Pen', 10, CAST(120.00 AS DECIMAL(18, 2)), '2026-07-20', '2026-07-20 02:00:00', '2026-07-21 01:00:00'),
  (3, 'File', 1, CAST(300.00 AS DECIMAL(18, 2)), '2026-07-21', '2026-07-21 01:00:00', '2026-07-21 01:00:00');",
        Runs,
    );
    check(
        &p,
        "C12",
        "SELECT *\nFROM abc.selective\nORDER BY sale_id;",
        Runs,
    );
    assert_eq!(
        p.query("SELECT sale_id FROM abc.selective ORDER BY sale_id")
            .len(),
        3
    );
}

#[test]
fn seed_004_foundry() {
    let p = Project::product2();
    p.ok(&[
        "sql",
        "CREATE TABLE raw.added_rows (id BIGINT, status STRING);
         INSERT INTO raw.added_rows VALUES (1, 'active'), (2, 'gone');",
    ]);
    // D1 (DuckDB over the rows a transform received), the relation named as a lake table.
    check(
        &p,
        "D1",
        "SELECT * FROM raw.added_rows WHERE status = 'active'",
        Runs,
    );
    check(
        &p,
        "D2",
        "SELECT snapshot_id FROM raw.added_rows.snapshots
ORDER BY committed_at DESC LIMIT 1",
        Refused("`raw.added_rows.snapshots`", "table_changes"),
    );
    // D3 / D4 / D7: seed 004 keeps its watermark in a table property of its own.
    check(
        &p,
        "D3",
        "ALTER TABLE raw.added_rows SET TBLPROPERTIES ('smelt_test.watermark' = '41')",
        Runs,
    );
    check(
        &p,
        "D7",
        "ALTER TABLE raw.added_rows SET TBLPROPERTIES ('smelt_test.watermark' = '42')",
        Runs,
    );
    assert_eq!(
        p.query("SHOW TBLPROPERTIES raw.added_rows ('smelt_test.watermark')"),
        vec![serde_json::json!({"key": "smelt_test.watermark", "value": "42"})]
    );
    check(
        &p,
        "D4",
        "SHOW TBLPROPERTIES raw.added_rows ('smelt_test.watermark')",
        Runs,
    );
    check(
        &p,
        "D5",
        "CALL ice.system.create_changelog_view(
    table => 'raw.added_rows',
    changelog_view => 'source_changelog',
    identifier_columns => array('id'),
    options => map('start-snapshot-id', '1', 'end-snapshot-id', '2')
)",
        Refused("CALL", "table_changes"),
    );
    // D6 over a changelog shaped as D5 makes it, as a lake table.
    p.ok(&[
        "sql",
        "CREATE TABLE raw.target (id BIGINT, status STRING);
         INSERT INTO raw.target VALUES (1, 'active'), (2, 'active');
         CREATE TABLE raw.source_changelog (id BIGINT, status STRING, _change_type STRING, _change_ordinal BIGINT);
         INSERT INTO raw.source_changelog VALUES
           (1, 'active', 'UPDATE_BEFORE', 1), (1, 'inactive', 'UPDATE_AFTER', 1),
           (2, 'active', 'DELETE', 1), (3, 'active', 'INSERT', 1);",
    ]);
    check(
        &p,
        "D6",
        "MERGE INTO raw.target AS tgt
USING (
    SELECT * FROM (
        SELECT *,
            ROW_NUMBER() OVER (
                PARTITION BY id ORDER BY _change_ordinal DESC
            ) AS _rn
        FROM raw.source_changelog
        WHERE _change_type != 'UPDATE_BEFORE'
    )
    WHERE _rn = 1
) AS src
ON src.id = tgt.id
WHEN MATCHED AND (src._change_type = 'DELETE' OR src.status != 'active') THEN DELETE
WHEN MATCHED AND src.status = 'active' THEN UPDATE SET *
WHEN NOT MATCHED AND src._change_type != 'DELETE' AND src.status = 'active' THEN INSERT *",
        Runs,
    );
    // 1 became inactive and 2 was deleted: both go; 3 is new and active.
    assert_eq!(
        p.query("SELECT id, status FROM raw.target ORDER BY id"),
        vec![serde_json::json!({"id": 3, "status": "active"})]
    );
}
