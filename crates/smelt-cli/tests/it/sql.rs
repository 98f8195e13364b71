//! `smelt sql`: the seed scripts' DDL and DML, and queries over the lake.

use crate::common::{self, Project, pinned};

#[test]
fn spark_ddl_insert_select_truncate_and_queries() {
    let p = Project::product2();
    let out = p.ok(&[
        "sql",
        "CREATE TABLE raw.events (id BIGINT NOT NULL, name STRING, amount DECIMAL(12,2), at TIMESTAMP) TBLPROPERTIES (delta.enableChangeDataFeed = true);
         INSERT INTO raw.events VALUES (1, 'a', 1.5, TIMESTAMP '2026-07-01 09:00:00'), (2, 'b', NULL, NULL);
         CREATE TABLE raw.copy (id BIGINT, name STRING);
         INSERT INTO raw.copy (id, name) SELECT id, upper(name) FROM raw.events WHERE id > 1;",
    ]);
    assert!(
        out.contains("created table raw.events (4 columns, change feed on)"),
        "{out}"
    );
    assert!(out.contains("inserted 2 rows into raw.events"), "{out}");
    assert!(out.contains("inserted 1 rows into raw.copy"), "{out}");
    let rows = p.query("SELECT id, name FROM raw.copy");
    assert_eq!(rows, vec![serde_json::json!({"id": 2, "name": "B"})]);
    let text = p.ok(&["sql", "SELECT id, amount FROM raw.events ORDER BY id"]);
    assert!(text.contains("| 1  | 1.50   |"), "{text}");
    assert!(text.contains("(2 rows)"), "{text}");

    p.ok(&["sql", "TRUNCATE TABLE raw.events"]);
    assert!(p.query("SELECT * FROM raw.events").is_empty());

    let (_, err) = p.fails(&["sql", "CREATE TABLE raw.copy (id BIGINT)"], 1);
    insta::assert_snapshot!("create_existing_table", pinned(&p, &err));
    p.ok(&[
        "sql",
        "CREATE OR REPLACE TABLE raw.copy (id BIGINT, extra STRING)",
    ]);
    assert!(p.query("SELECT * FROM raw.copy").is_empty());
}

#[test]
fn a_failing_statement_names_its_number_and_keeps_earlier_ones() {
    let p = Project::product2();
    let (out, err) = p.fails(
        &[
            "sql",
            "CREATE TABLE a.t (x STRING); INSERT INTO a.missing VALUES ('x')",
        ],
        1,
    );
    assert!(out.contains("created table a.t"), "{out}");
    insta::assert_snapshot!("second_statement_fails", pinned(&p, &err));
}

/// A `catalog.namespace.table` is read from the pipeline file's catalogs
/// (`iceberg::iceberg_sql`); one that names no catalog of the file says where catalogs are
/// defined.
#[test]
fn a_table_of_an_undefined_catalog_is_refused_by_name() {
    let p = Project::product2();
    let (_, err) = p.fails(&["sql", "SELECT * FROM ice.raw.orders"], 1);
    insta::assert_snapshot!("undefined_catalog", pinned(&p, &err));
}

/// `VERSION AS OF`, `TIMESTAMP AS OF` and `FOR SYSTEM_TIME AS OF` read the table as it was
/// (DataFusion alone ignores the clause and reads the current rows); what smelt cannot
/// resolve is refused by name.
#[test]
fn time_travel_reads_the_version_asked_for() {
    let p = Project::product2();
    p.ok(&["sql", "CREATE TABLE raw.t (id BIGINT, name STRING)"]);
    p.ok(&["sql", "INSERT INTO raw.t VALUES (1, 'a')"]);
    // Version 1's time from the log (the oracle): Delta's commit time, the log file's
    // modification time, later than version 0's (commits without in-commit timestamps).
    let times = log_times(&p, "raw/t", 2);
    assert!(times[1] > times[0], "{times:?}");
    let at_v1 = chrono::DateTime::from_timestamp_millis(times[1]).unwrap();
    p.ok(&["sql", "INSERT INTO raw.t VALUES (2, 'b')"]);
    let ids = |sql: &str| -> Vec<i64> {
        p.query(sql)
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids("SELECT id FROM raw.t ORDER BY id"), [1, 2]);
    assert_eq!(ids("SELECT id FROM raw.t VERSION AS OF 1 ORDER BY id"), [1]);
    assert!(ids("SELECT id FROM raw.t VERSION AS OF 0").is_empty());
    let when = at_v1.format("%Y-%m-%d %H:%M:%S%.3f").to_string();
    assert_eq!(
        ids(&format!(
            "SELECT t.id FROM raw.t TIMESTAMP AS OF '{when}' ORDER BY t.id"
        )),
        [1]
    );
    assert_eq!(
        ids(&format!(
            "SELECT id FROM `raw.t` FOR SYSTEM_TIME AS OF TIMESTAMP '{}'",
            at_v1.to_rfc3339()
        )),
        [1]
    );
    // The same table twice, at two versions.
    let both = p.query(
        "SELECT a.id AS a, b.id AS b FROM raw.t VERSION AS OF 1 a JOIN raw.t b ON a.id = b.id",
    );
    assert_eq!(both, vec![serde_json::json!({"a": 1, "b": 1})]);

    let (_, err) = p.fails(&["sql", "SELECT * FROM raw.t VERSION AS OF 7"], 1);
    insta::assert_snapshot!("no_such_version", pinned(&p, &err));
    let (_, err) = p.fails(
        &[
            "sql",
            "SELECT * FROM raw.t TIMESTAMP AS OF current_timestamp()",
        ],
        1,
    );
    insta::assert_snapshot!("time_travel_needs_a_literal", pinned(&p, &err));
}

/// Delta's commit times of versions `0..n` of the table at `lake/<table>` (the oracle of
/// every commit time smelt reads): each log file's modification time in ms, made later
/// than the one before by 1 ms where it is not (Delta's history), as the protocol defines
/// them for tables without in-commit timestamps.
fn log_times(p: &Project, table: &str, n: u32) -> Vec<i64> {
    let mut times: Vec<i64> = (0..n)
        .map(|v| {
            let log = p.file(&format!("lake/{table}/_delta_log/{v:020}.json"));
            let modified = std::fs::metadata(log).unwrap().modified().unwrap();
            chrono::DateTime::<chrono::Utc>::from(modified).timestamp_millis()
        })
        .collect();
    for i in 1..times.len() {
        times[i] = times[i].max(times[i - 1] + 1);
    }
    times
}

/// The milliseconds of a timestamp as `smelt sql --json` prints it.
fn millis(v: &serde_json::Value) -> i64 {
    let text = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
                .map(|t| t.and_utc().timestamp_millis())
        })
        .unwrap_or_else(|e| panic!("`{text}`: {e}"))
}

/// A commit's time is Delta's, whoever wrote the table: its log file's modification time,
/// made monotonic across versions, where the table has no in-commit timestamps; a commit
/// without `commitInfo` reads as well. The change feed's `_commit_timestamp`, `DESCRIBE
/// HISTORY` and `TIMESTAMP AS OF` all go by it.
#[test]
fn commit_times_are_the_log_files_times_made_monotonic() {
    let p = Project::product2();
    p.ok(&[
        "sql",
        "CREATE TABLE raw.t (id BIGINT) TBLPROPERTIES (delta.enableChangeDataFeed = true)",
    ]);
    p.ok(&["sql", "INSERT INTO raw.t VALUES (1)"]);
    p.ok(&["sql", "INSERT INTO raw.t VALUES (2)"]);
    // As a writer that omits `commitInfo` and a copy that did not keep modification times
    // leave it: no `commitInfo`, versions 1 and 2 both 10 s before version 0.
    let t0 =
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_780_000_000_500);
    for (v, at) in [
        (0, t0),
        (1, t0 - std::time::Duration::from_secs(10)),
        (2, t0 - std::time::Duration::from_secs(10)),
    ] {
        let log = p.file(&format!("lake/raw/t/_delta_log/{v:020}.json"));
        let kept: Vec<String> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .filter(|l| !l.contains("\"commitInfo\""))
            .map(str::to_string)
            .collect();
        std::fs::write(&log, kept.join("\n") + "\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&log)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }
    let times = log_times(&p, "raw/t", 3);
    assert_eq!(
        times,
        [1_780_000_000_500, 1_780_000_000_501, 1_780_000_000_502]
    );
    let changes = p.query(
        "SELECT id, _commit_version, _commit_timestamp FROM table_changes('raw.t', 0) ORDER BY id",
    );
    let got: Vec<(i64, i64, i64)> = changes
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["_commit_version"].as_i64().unwrap(),
                millis(&r["_commit_timestamp"]),
            )
        })
        .collect();
    assert_eq!(got, [(1, 1, times[1]), (2, 2, times[2])]);
    let history = p.query("DESCRIBE HISTORY raw.t");
    let got: Vec<(i64, i64)> = history
        .iter()
        .map(|r| (r["version"].as_i64().unwrap(), millis(&r["timestamp"])))
        .collect();
    assert_eq!(got, [(2, times[2]), (1, times[1]), (0, times[0])]);
    let at = |ms: i64| {
        let t = chrono::DateTime::from_timestamp_millis(ms).unwrap();
        let sql = format!(
            "SELECT count(*) AS n FROM raw.t TIMESTAMP AS OF '{}'",
            t.format("%Y-%m-%d %H:%M:%S%.3f")
        );
        p.query(&sql)[0]["n"].as_i64().unwrap()
    };
    assert_eq!((at(times[1]), at(times[2])), (1, 2));
    let (_, err) = p.fails(
        &[
            "sql",
            &format!(
                "SELECT * FROM raw.t TIMESTAMP AS OF '{}'",
                chrono::DateTime::from_timestamp_millis(times[0] - 1)
                    .unwrap()
                    .format("%Y-%m-%d %H:%M:%S%.3f")
            ),
        ],
        1,
    );
    assert!(err.contains("`raw.t` has no version at"), "{err}");
}

/// `INSERT OVERWRITE [TABLE]` replaces every row in one commit (it used to append); clauses
/// smelt sql does not carry out are refused by name.
#[test]
fn insert_overwrite_replaces_the_rows_and_unsupported_clauses_are_refused() {
    let p = Project::product2();
    p.ok(&["sql", "CREATE TABLE raw.t (id BIGINT, name STRING)"]);
    p.ok(&["sql", "INSERT INTO raw.t VALUES (1, 'a'), (2, 'b')"]);
    let out = p.ok(&["sql", "INSERT OVERWRITE TABLE raw.t VALUES (3, 'c')"]);
    assert!(out.contains("overwrote raw.t with 1 rows"), "{out}");
    assert_eq!(
        p.query("SELECT id FROM raw.t"),
        vec![serde_json::json!({"id": 3})]
    );
    // The rows before are still there at the version before.
    assert_eq!(p.query("SELECT id FROM raw.t VERSION AS OF 1").len(), 2);
    p.ok(&[
        "sql",
        "INSERT OVERWRITE raw.t SELECT id, name FROM raw.t WHERE id > 5",
    ]);
    assert!(p.query("SELECT id FROM raw.t").is_empty());

    let (_, err) = p.fails(
        &[
            "sql",
            "INSERT OVERWRITE TABLE raw.t PARTITION (id = 1) SELECT 1, 'x'",
        ],
        1,
    );
    insta::assert_snapshot!("insert_with_partition", pinned(&p, &err));
}

/// Seed 003's `CREATE TABLE … USING DELTA` (it did not parse); another format still fails.
#[test]
fn create_table_using_delta_is_a_delta_table() {
    let p = Project::product2();
    let out = p.ok(&[
        "sql",
        "CREATE TABLE raw.d (id BIGINT, name STRING) USING DELTA TBLPROPERTIES (delta.enableChangeDataFeed = true); INSERT INTO raw.d VALUES (1, 'a')",
    ]);
    assert!(
        out.contains("created table raw.d (2 columns, change feed on)"),
        "{out}"
    );
    assert_eq!(p.query("SELECT id FROM raw.d").len(), 1);
    let (_, err) = p.fails(&["sql", "CREATE TABLE raw.e (id BIGINT) USING PARQUET"], 2);
    insta::assert_snapshot!("create_table_using_parquet", pinned(&p, &err));
}

/// Partitioning, clustering and table options smelt does not carry out are refused by name
/// (they were dropped: the table was created without them); seed 003's
/// `delta.feature.timestampNtz = 'supported'` is implied by its TIMESTAMP_NTZ columns.
#[test]
fn create_table_refuses_what_it_would_drop() {
    let p = Project::product2();
    for (name, sql) in [
        (
            "partitioned_by",
            "CREATE TABLE raw.p (x BIGINT) PARTITIONED BY (x)",
        ),
        (
            "partition_by",
            "CREATE TABLE raw.p (x INT64) PARTITION BY x",
        ),
        ("cluster_by", "CREATE TABLE raw.p (x BIGINT) CLUSTER BY (x)"),
        (
            "append_only",
            "CREATE TABLE raw.p (x BIGINT) TBLPROPERTIES ('delta.appendOnly' = 'true')",
        ),
        ("default", "CREATE TABLE raw.p (x BIGINT DEFAULT 1)"),
        (
            "location",
            "CREATE TABLE raw.p (x BIGINT) LOCATION '/elsewhere'",
        ),
        ("comment", "CREATE TABLE raw.p (x BIGINT) COMMENT 'a table'"),
    ] {
        let (_, err) = p.fails(&["sql", sql], 1);
        insta::assert_snapshot!(format!("create_refuses_{name}"), pinned(&p, &err), sql);
    }
    assert!(p.query("SELECT 1 AS one").len() == 1);
    let (_, err) = p.fails(&["sql", "SELECT * FROM raw.p"], 1);
    insta::assert_snapshot!("nothing_was_created", pinned(&p, &err));
    let out = p.ok(&[
        "sql",
        "CREATE OR REPLACE TABLE raw.ntz (id BIGINT, at TIMESTAMP_NTZ) USING DELTA TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported')",
    ]);
    assert!(out.contains("created table raw.ntz (2 columns)"), "{out}");
}

/// Spark's SHOW TBLPROPERTIES and DESCRIBE [DETAIL | HISTORY] as rows, from the table's log;
/// a property of Delta's smelt does not set is refused by name.
#[test]
fn show_tblproperties_and_describe_read_the_log() {
    let p = Project::product2();
    p.ok(&[
        "sql",
        "CREATE TABLE raw.t (id BIGINT NOT NULL, name STRING);
         INSERT INTO raw.t VALUES (1, 'a');
         ALTER TABLE raw.t SET TBLPROPERTIES (delta.enableChangeDataFeed = true, 'team.owner' = 'Data Eng');",
    ]);
    let props = p.query("SHOW TBLPROPERTIES raw.t");
    assert!(
        props.contains(&serde_json::json!({"key": "delta.enableChangeDataFeed", "value": "true"})),
        "{props:?}"
    );
    assert!(
        props.contains(&serde_json::json!({"key": "team.owner", "value": "Data Eng"})),
        "{props:?}"
    );
    assert_eq!(
        p.query("DESCRIBE raw.t"),
        vec![
            serde_json::json!({"col_name": "id", "data_type": "long", "nullable": false}),
            serde_json::json!({"col_name": "name", "data_type": "string", "nullable": true}),
        ]
    );
    let detail = p.query("DESCRIBE DETAIL raw.t");
    assert_eq!(detail.len(), 1);
    assert_eq!(detail[0]["format"], "delta");
    assert_eq!(detail[0]["version"], 2);
    assert_eq!(detail[0]["numFiles"], 1);
    // Newest first; the versions and operations are the log's.
    let history: Vec<(i64, String)> = p
        .query("DESCRIBE HISTORY raw.t")
        .iter()
        .map(|r| {
            (
                r["version"].as_i64().unwrap(),
                common::text(&r["operation"]),
            )
        })
        .collect();
    assert_eq!(
        history,
        vec![
            (2, "SET TBLPROPERTIES".to_string()),
            (1, "WRITE".to_string()),
            (0, "CREATE TABLE".to_string()),
        ]
    );
    assert_eq!(p.query("DESCRIBE HISTORY raw.t LIMIT 1").len(), 1);
    let (_, err) = p.fails(
        &[
            "sql",
            "ALTER TABLE raw.t SET TBLPROPERTIES ('delta.appendOnly' = 'true')",
        ],
        1,
    );
    insta::assert_snapshot!("set_append_only", pinned(&p, &err));
    // UNSET removes the user's property and the change feed's, in one commit.
    p.ok(&[
        "sql",
        "ALTER TABLE raw.t UNSET TBLPROPERTIES ('team.owner', delta.enableChangeDataFeed)",
    ]);
    assert!(p.query("SHOW TBLPROPERTIES raw.t").is_empty());
    p.ok(&[
        "sql",
        "ALTER TABLE raw.t UNSET TBLPROPERTIES IF EXISTS ('team.owner')",
    ]);
    let (_, err) = p.fails(
        &[
            "sql",
            "ALTER TABLE raw.t UNSET TBLPROPERTIES ('team.owner')",
        ],
        1,
    );
    insta::assert_snapshot!("unset_a_missing_property", pinned(&p, &err));
    let (_, err) = p.fails(
        &[
            "sql",
            "ALTER TABLE raw.t SET OPTIONS (expiration_timestamp = TIMESTAMP '2030-01-01')",
        ],
        1,
    );
    insta::assert_snapshot!("bigquery_expiration_option", pinned(&p, &err));
}

/// `CREATE TABLE … AS SELECT` is one commit with the query's columns and rows (OR REPLACE
/// replaces both); `ALTER TABLE … ADD COLUMN` adds a NULL column, refusing what it would drop.
#[test]
fn create_table_as_select_and_add_column() {
    let p = Project::product2();
    p.ok(&[
        "sql",
        "CREATE TABLE raw.t (x BIGINT, n STRING); INSERT INTO raw.t VALUES (1, 'a'), (2, 'b');",
    ]);
    let out = p.ok(&[
        "sql",
        "CREATE TABLE raw.c OPTIONS (enable_change_history = TRUE) AS SELECT x, upper(n) AS n FROM raw.t WHERE x > 1",
    ]);
    assert!(
        out.contains("created table raw.c (2 columns) with 1 rows"),
        "{out}"
    );
    assert_eq!(
        p.query("SELECT x, n FROM raw.c"),
        vec![serde_json::json!({"x": 2, "n": "B"})]
    );
    assert_eq!(p.query("DESCRIBE HISTORY raw.c").len(), 1, "one commit");
    assert_eq!(p.query("SELECT * FROM table_changes('raw.c', 0)").len(), 1);
    let (_, err) = p.fails(&["sql", "CREATE TABLE raw.c AS SELECT 1 AS x"], 1);
    insta::assert_snapshot!("create_as_select_existing", pinned(&p, &err));
    p.ok(&[
        "sql",
        "CREATE OR REPLACE TABLE raw.c AS SELECT 'z' AS other",
    ]);
    assert_eq!(
        p.query("SELECT * FROM raw.c"),
        vec![serde_json::json!({"other": "z"})]
    );
    // Replacing a table whose feed is off with one that asks for it turns it on.
    let out = p.ok(&[
        "sql",
        "CREATE OR REPLACE TABLE raw.t2 AS SELECT 1 AS x;
         CREATE OR REPLACE TABLE raw.t2 TBLPROPERTIES (delta.enableChangeDataFeed = true) AS SELECT 2 AS x",
    ]);
    assert!(out.contains("change feed turned on"), "{out}");
    assert_eq!(
        p.query("SHOW TBLPROPERTIES raw.t2 ('delta.enableChangeDataFeed')"),
        vec![serde_json::json!({"key": "delta.enableChangeDataFeed", "value": "true"})]
    );
    // An empty result still makes the table, with its columns.
    p.ok(&[
        "sql",
        "CREATE TABLE raw.empty AS SELECT x FROM raw.t WHERE x > 9",
    ]);
    assert_eq!(p.query("DESCRIBE raw.empty").len(), 1);

    let out = p.ok(&["sql", "ALTER TABLE raw.t ADD COLUMN note STRING"]);
    assert!(out.contains("altered table raw.t: added note"), "{out}");
    p.ok(&[
        "sql",
        "ALTER TABLE raw.t ADD COLUMN IF NOT EXISTS note STRING",
    ]);
    assert_eq!(
        p.query("SELECT x, note FROM raw.t ORDER BY x"),
        vec![serde_json::json!({"x": 1}), serde_json::json!({"x": 2})]
    );
    let (_, err) = p.fails(&["sql", "ALTER TABLE raw.t ADD COLUMN z INT64 NOT NULL"], 1);
    insta::assert_snapshot!("add_column_not_null", pinned(&p, &err));
    let (_, err) = p.fails(&["sql", "ALTER TABLE raw.t ADD COLUMN note STRING"], 1);
    insta::assert_snapshot!("add_existing_column", pinned(&p, &err));
}

/// Databricks' `INSERT INTO t REPLACE WHERE predicate query` replaces the rows the predicate
/// selects with the query's, in one commit; a new row outside the predicate fails it.
#[test]
fn insert_replace_where_replaces_the_rows_the_predicate_selects() {
    let p = Project::product2();
    p.ok(&[
        "sql",
        "CREATE TABLE raw.s (d DATE, v BIGINT) TBLPROPERTIES (delta.enableChangeDataFeed = true);
         INSERT INTO raw.s VALUES (DATE '2026-07-20', 1), (DATE '2026-07-21', 2), (DATE '2026-07-21', 3);",
    ]);
    let out = p.ok(&[
        "sql",
        "INSERT INTO raw.s REPLACE WHERE d >= DATE '2026-07-21' SELECT DATE '2026-07-21', 9",
    ]);
    assert!(out.contains("replaced the rows of raw.s where"), "{out}");
    assert_eq!(
        p.query("SELECT CAST(d AS STRING) AS d, v FROM raw.s ORDER BY d, v"),
        vec![
            serde_json::json!({"d": "2026-07-20", "v": 1}),
            serde_json::json!({"d": "2026-07-21", "v": 9}),
        ]
    );
    assert_eq!(p.query("DESCRIBE HISTORY raw.s").len(), 3, "one commit");
    let (_, err) = p.fails(
        &[
            "sql",
            "INSERT INTO raw.s REPLACE WHERE d >= DATE '2026-07-21' VALUES (DATE '2026-07-01', 5)",
        ],
        1,
    );
    insta::assert_snapshot!("replace_where_row_outside", pinned(&p, &err));
    assert_eq!(p.query("SELECT * FROM raw.s").len(), 2, "nothing written");
}

/// `--json` writes every column of every row: a NULL is `null`, never a missing key.
#[test]
fn json_rows_keep_their_null_columns() {
    let p = Project::product2();
    let out = p.ok(&["--json", "sql", "SELECT 1 AS a, CAST(NULL AS STRING) AS b"]);
    assert_eq!(out.trim(), r#"[{"a":1,"b":null}]"#);
}
