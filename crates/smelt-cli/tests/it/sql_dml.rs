//! `smelt sql` DML and change feeds: UPDATE, DELETE and MERGE (BigQuery's and Databricks'
//! spellings) as one commit each with change data, `table_changes` / `CHANGES` /
//! `APPENDS`, BigQuery script variables and type names, and seed 000's own MERGE run as
//! written.

use crate::common::{Project, text};
use serde_json::{Value, json};

fn ids_and(p: &Project, sql: &str, column: &str) -> Vec<(i64, String)> {
    p.query(sql)
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), text(&r[column])))
        .collect()
}

#[test]
fn update_delete_and_merge_are_one_commit_each_with_change_data() {
    let p = Project::product2();
    p.ok(&[
        "sql",
        "CREATE TABLE raw.t (id BIGINT, name STRING, n BIGINT) TBLPROPERTIES (delta.enableChangeDataFeed = true);
         INSERT INTO raw.t VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3);",
    ]);
    // Version 2: an update through an alias, the column named in another case.
    let out = p.ok(&["sql", "UPDATE raw.t AS x SET x.N = N * 10 WHERE x.ID >= 2"]);
    assert!(out.contains("updated 2 rows of raw.t"), "{out}");
    // Version 3: a delete (BigQuery: FROM may be left out).
    let out = p.ok(&["sql", "DELETE raw.t WHERE id = 3"]);
    assert!(out.contains("deleted 1 rows from raw.t"), "{out}");
    assert_eq!(
        ids_and(&p, "SELECT id, n FROM raw.t ORDER BY id", "n"),
        vec![(1, "1".into()), (2, "20".into())]
    );

    // Databricks' table_changes: the change data of those two commits, in commit order.
    let feed = p.query(
        "SELECT id, n, _change_type, _commit_version FROM table_changes('raw.t', 2) ORDER BY _commit_version, _change_type, id",
    );
    let feed: Vec<(i64, i64, String, i64)> = feed
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["n"].as_i64().unwrap(),
                text(&r["_change_type"]),
                r["_commit_version"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        feed,
        vec![
            (2, 20, "update_postimage".into(), 2),
            (3, 30, "update_postimage".into(), 2),
            (2, 2, "update_preimage".into(), 2),
            (3, 3, "update_preimage".into(), 2),
            (3, 30, "delete".into(), 3),
        ]
    );
    // One version, and a range of versions.
    assert_eq!(
        p.query("SELECT * FROM table_changes('raw.t', 3, 3)").len(),
        1
    );
    assert_eq!(
        p.query("SELECT * FROM table_changes('raw.t', 0, 1)").len(),
        3
    );

    // BigQuery's CHANGES: no pre-images, INSERT / UPDATE / DELETE, open bounds.
    let kinds = p.query(
        "SELECT _CHANGE_TYPE AS k, COUNT(*) AS c FROM CHANGES(TABLE raw.t, NULL, NULL) GROUP BY _CHANGE_TYPE ORDER BY k",
    );
    assert_eq!(
        kinds,
        vec![
            json!({"k": "DELETE", "c": 1}),
            json!({"k": "INSERT", "c": 3}),
            json!({"k": "UPDATE", "c": 2}),
        ]
    );
    let appends = p.query("SELECT id FROM APPENDS(TABLE `raw.t`, NULL, NULL) ORDER BY id");
    assert_eq!(appends.len(), 3);

    // Databricks' MERGE with `*`: one delete, one update, one insert.
    p.ok(&[
        "sql",
        "CREATE TABLE raw.src (id BIGINT, name STRING, n BIGINT);
         INSERT INTO raw.src VALUES (1, 'A', 100), (2, 'gone', 0), (4, 'd', 4);",
    ]);
    let out = p.ok(&[
        "sql",
        "MERGE INTO raw.t AS t USING raw.src AS s ON t.id = s.id
         WHEN MATCHED AND s.n = 0 THEN DELETE
         WHEN MATCHED THEN UPDATE SET *
         WHEN NOT MATCHED THEN INSERT *",
    ]);
    assert!(
        out.contains("merged into raw.t: 1 inserted, 1 updated, 1 deleted"),
        "{out}"
    );
    assert_eq!(
        ids_and(&p, "SELECT id, name FROM raw.t ORDER BY id", "name"),
        vec![(1, "A".into()), (4, "d".into())]
    );
    // BigQuery's spelling: no INTO, a query as the source, INSERT ROW.
    let out = p.ok(&[
        "sql",
        "MERGE raw.t T USING (SELECT 4 AS id, 'z' AS name, 7 AS n UNION ALL SELECT 9, 'new', 9) S ON T.id = S.id
         WHEN MATCHED THEN UPDATE SET T.name = S.name
         WHEN NOT MATCHED BY TARGET THEN INSERT ROW",
    ]);
    assert!(out.contains("1 inserted, 1 updated, 0 deleted"), "{out}");
    assert_eq!(
        ids_and(&p, "SELECT id, name FROM raw.t ORDER BY id", "name"),
        vec![(1, "A".into()), (4, "z".into()), (9, "new".into())]
    );
    // The merge's change data is there for flows to read.
    let merged = p.query("SELECT _change_type FROM table_changes('raw.t', 5, 5)");
    assert_eq!(merged.len(), 3, "{merged:?}");

    // BigQuery's "…" is a string, also where delta-rs re-reads the expression.
    p.ok(&["sql", "UPDATE raw.t SET name = \"q\" WHERE id = 1"]);
    let out = p.ok(&["sql", "DELETE FROM raw.t WHERE name = \"name\""]);
    assert!(out.contains("deleted 0 rows"), "{out}");
    assert_eq!(
        ids_and(&p, "SELECT id, name FROM raw.t ORDER BY id", "name"),
        vec![(1, "q".into()), (4, "z".into()), (9, "new".into())]
    );
    // A variable named like a column the statement reads is refused, not guessed.
    let (_, err) = p.fails(
        &[
            "sql",
            "DECLARE id INT64 DEFAULT 5; DELETE FROM raw.t WHERE id = id",
        ],
        1,
    );
    insta::assert_snapshot!("variable_shadows_column", err);
    assert_eq!(p.query("SELECT id FROM raw.t").len(), 3);
    // A change feed over versions before a new column has the columns of those versions.
    p.ok(&["sql", "ALTER TABLE raw.t ADD COLUMN note STRING"]);
    let early = p.query("SELECT * FROM table_changes('raw.t', 1, 1) ORDER BY id");
    assert_eq!(early.len(), 3);
    assert!(early[0].get("note").is_none(), "{early:?}");
    assert_eq!(
        p.query("SELECT * FROM CHANGES(TABLE raw.t, NULL, NULL)")
            .len(),
        12
    );

    // What smelt sql does not carry out is refused by name.
    let (_, err) = p.fails(&["sql", "UPDATE raw.t SET n = 1 FROM raw.src"], 1);
    insta::assert_snapshot!("update_from_refused", err);
    let (_, err) = p.fails(&["sql", "SELECT * FROM table_changes('raw.t', 99)"], 1);
    insta::assert_snapshot!("table_changes_past_the_end", err);
    let (_, err) = p.fails(&["sql", "SELECT * FROM CHANGES(TABLE raw.t, 1, 2)"], 1);
    insta::assert_snapshot!("changes_takes_times", err);
}

#[test]
fn script_variables_bigquery_types_and_functions() {
    let p = Project::product2();
    p.ok(&[
        "sql",
        "CREATE TABLE raw.t (id BIGINT, s STRING);
         INSERT INTO raw.t VALUES (1, '12'), (2, 'x');",
    ]);
    let out = p.ok(&[
        "--json",
        "sql",
        "DECLARE upto TIMESTAMP DEFAULT TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 1 DAY);
         DECLARE since TIMESTAMP;
         SET since = TIMESTAMP_SUB(upto, INTERVAL 7 DAY);
         SELECT id, SAFE_CAST(s AS INT64) AS v, SAFE_CAST(s AS FLOAT64) AS f
         FROM CHANGES(TABLE raw.t, since, upto) ORDER BY id",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..3],
        [
            r#"{"message":"declared upto"}"#,
            r#"{"message":"declared since"}"#,
            r#"{"message":"set since"}"#
        ]
    );
    let rows: Value = serde_json::from_str(lines[3]).unwrap();
    // NULLs are written as `null`, never left out.
    assert_eq!(
        rows,
        json!([{"id": 1, "v": 12, "f": 12.0}, {"id": 2, "v": null, "f": null}])
    );
    // An end before every commit: nothing.
    let none =
        p.query("SELECT * FROM CHANGES(TABLE raw.t, NULL, TIMESTAMP('2000-01-01 00:00:00'))");
    assert!(none.is_empty(), "{none:?}");
    let (_, err) = p.fails(&["sql", "SET nope = 1"], 1);
    insta::assert_snapshot!("set_unknown_variable", err);
}

/// Seed 000's incremental load as the seed writes it — `DECLARE`, `MERGE … USING` seven
/// one-day `CHANGES(TABLE …)` windows, `QUALIFY`, `SAFE_CAST`, `brz.id` for the column
/// `Id` — runs through `smelt sql` unchanged but for the target's name, and gives the same
/// silver as the apply flow over the same bronze (the seed's `_update_timestamp` is the
/// MERGE's own time, so it is left out).
#[test]
fn seed_000_merge_runs_as_written_and_matches_the_apply_flow() {
    let p = Project::product2();
    p.bronze_step1();
    p.ok(&["run"]);
    p.ok(&["sql", "-f", "insert_2.sql"]);
    p.ok(&["run"]);
    let rename = |sql: &str| {
        sql.replace(
            "medallion_demo.product2__silver",
            "medallion_demo.product2__silver_by_merge",
        )
    };
    let ddl = std::fs::read_to_string(p.file("silver.sql")).unwrap();
    p.write("silver_by_merge.sql", &rename(&ddl));
    p.ok(&["sql", "-f", "silver_by_merge.sql"]);
    let merge = std::fs::read_to_string(p.file("merge.sql")).unwrap();
    p.write("merge_by_merge.sql", &rename(&merge));
    let out = p.ok(&["sql", "-f", "merge_by_merge.sql"]);
    assert!(
        out.contains("merged into medallion_demo.product2__silver_by_merge: 4 inserted"),
        "{out}"
    );
    let strip = |rows: Vec<Value>| -> Vec<Value> {
        rows.into_iter()
            .map(|mut r| {
                r.as_object_mut().unwrap().remove("_update_timestamp");
                r
            })
            .collect()
    };
    let by_flow = strip(p.silver());
    let by_merge =
        strip(p.query("SELECT * FROM medallion_demo.product2__silver_by_merge ORDER BY Id"));
    assert_eq!(by_flow.len(), 4);
    assert_eq!(by_merge, by_flow);
}

/// `SAFE_CAST` from a string follows BigQuery's rules and `TRY_CAST` Spark's, as apply flows'
/// `cast_dialect` does; other casts are DataFusion's.
#[test]
fn safe_cast_is_bigquerys_and_try_cast_sparks() {
    let p = Project::product2();
    let rows = p.query(
        "SELECT SAFE_CAST(' true' AS BOOL) AS bq_bool, TRY_CAST(' true' AS BOOLEAN) AS sp_bool,
                SAFE_CAST('0x1A' AS INT64) AS bq_hex, TRY_CAST('0x1A' AS BIGINT) AS sp_hex,
                SAFE_CAST('2026-07-01 09:00:00 Asia/Tokyo' AS TIMESTAMP) AS bq_ts,
                SAFE_CAST('2026-07-01 09:00' AS TIMESTAMP) AS bq_no_seconds,
                TRY_CAST('2026-07-01 09:00' AS TIMESTAMP) AS sp_no_seconds,
                SAFE_CAST('1.0123456789' AS NUMERIC) AS bq_numeric,
                SAFE_CAST('2026-07-01 09:00:00+09' AS DATETIME) AS bq_datetime_zone",
    );
    assert_eq!(
        rows,
        vec![json!({
            "sp_bool": true,
            "bq_hex": 26,
            "bq_ts": "2026-07-01T00:00:00Z",
            "sp_no_seconds": "2026-07-01T09:00:00Z",
            "bq_numeric": 1.012345679,
        })]
    );
}

/// A plain `CAST` from a string follows BigQuery's rules (Spark's for `x::t`), and a value
/// that does not cast fails the statement, naming the value.
#[test]
fn a_plain_cast_follows_the_dialect_and_fails_on_a_bad_value() {
    let p = Project::product2();
    let rows = p.query(
        "SELECT CAST('0x1A' AS INT64) AS hex, 'yes'::boolean AS yes, CAST('2026-7-1' AS DATE) AS d",
    );
    assert_eq!(
        rows,
        vec![json!({"hex": 26, "yes": true, "d": "2026-07-01"})]
    );
    // An unaliased cast keeps its column's name, as DataFusion names a cast.
    assert_eq!(
        p.query("SELECT SAFE_CAST(v AS INT64), TRY_CAST(v AS INT) FROM (SELECT '7' AS v)"),
        vec![json!({"v": 7, "TRY_CAST(v AS INT)": 7})]
    );
    let (_, err) = p.fails(&["sql", "SELECT CAST(' true' AS BOOL) AS b"], 1);
    insta::assert_snapshot!("bigquery_cast_fails", err);
}
