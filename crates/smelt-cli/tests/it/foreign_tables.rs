//! Delta tables written by Spark and Databricks (`testdata/delta`, from delta-rs' test data;
//! see its README) as apply sources and through `smelt sql`: deletion vectors, column
//! mapping, checkpoints (classic and v2 with sidecars), vacuumed logs, change data feeds.
//!
//! Expected rows come from the fixture, never from smelt's change reader: the table's
//! snapshot at each version as delta-rs' own DataFusion scan reads it, and values checked by
//! hand against the fixture's log (noted where used).

use std::path::{Path, PathBuf};

use crate::common::{self, Project, pinned, rows};

/// A fixture table.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/delta")
        .join(name)
}

/// Copies the table at `from` into `to` as it was at version `up_to` (every data file, the
/// log up to that version), or whole.
fn copy_table(from: &Path, to: &Path, up_to: Option<u64>) {
    for entry in walk(from) {
        let rel = entry.strip_prefix(from).unwrap();
        let name = rel.to_string_lossy();
        if let Some(v) = up_to
            && let Some(log) = name.strip_prefix("_delta_log/")
        {
            if log == "_last_checkpoint" {
                continue;
            }
            match log.get(..20).and_then(|d| d.parse::<u64>().ok()) {
                Some(version) if version > v => continue,
                _ => {}
            }
        }
        let target = to.join(rel);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &target).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// `sql` over the table at `dir` (as `t`), at `version` or its latest, read by delta-rs'
/// DataFusion provider: each row's values as text, `NULL` for null.
fn oracle(dir: &Path, version: Option<u64>, sql: &str) -> Vec<Vec<String>> {
    use deltalake::arrow::util::display::{ArrayFormatter, FormatOptions};
    use deltalake::datafusion::prelude::SessionContext;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let url = url::Url::from_directory_path(std::path::absolute(dir).unwrap()).unwrap();
        let table = match version {
            Some(v) => deltalake::open_table_with_version(url, v).await.unwrap(),
            None => deltalake::open_table(url).await.unwrap(),
        };
        let ctx = SessionContext::new();
        table.update_datafusion_session(&ctx.state()).unwrap();
        ctx.register_table("t", table.table_provider().await.unwrap())
            .unwrap();
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let options = FormatOptions::default().with_null("NULL");
        let mut out = Vec::new();
        for b in batches {
            let formatters: Vec<_> = b
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
                .collect();
            for row in 0..b.num_rows() {
                out.push(
                    formatters
                        .iter()
                        .map(|f| f.value(row).to_string())
                        .collect(),
                );
            }
        }
        out
    })
}

/// A project whose flow `t` applies `bronze.t` into `silver.t` (typed by `ddl`, keyed by
/// `key`, bronze deletes applied).
fn apply_project(ddl: &str, key: &str) -> Project {
    let p = Project::with_pipeline(&format!(
        "lake: ./lake\nflows:\n  t:\n    apply:\n      from: bronze.t\n      into: silver.t\n      schema: silver.sql\n      keys: [\"{key}\"]\n      source_deletes: apply\n"
    ));
    p.write("silver.sql", ddl);
    p
}

#[test]
fn change_feed_with_deletion_vectors_version_by_version_and_at_once() {
    // Databricks Runtime 16: appends, DELETEs as deletion vectors (no change data),
    // UPDATE and MERGE with change data, OPTIMIZE after each (dataChange = false).
    let src = fixture("cdf-table-with-cdc-and-dvs");
    let ddl = "CREATE TABLE silver.t (id INT, comment STRING)";
    let silver = "SELECT CAST(id AS VARCHAR) AS i, comment FROM silver.t ORDER BY id";
    let expected = |v| {
        oracle(
            &src,
            Some(v),
            "SELECT CAST(id AS VARCHAR) AS i, comment FROM t ORDER BY id",
        )
    };

    let p = apply_project(ddl, "id");
    for v in 0..=25 {
        copy_table(&src, &p.file("lake/bronze/t"), Some(v));
        p.ok(&["run"]);
        assert_eq!(
            rows(&p, silver, &["i", "comment"]),
            expected(v),
            "silver after bronze version {v}"
        );
    }
    // Hand-checked against the log's operation metrics: version 22 (MERGE) deletes one
    // matched row (11) and inserts 12, version 24 deletes the 6 rows with id < 10 (a
    // deletion vector over the OPTIMIZEd file), version 25 appends 3 rows (0, 1, 2).
    let last = rows(&p, silver, &["i", "comment"]);
    let ids: Vec<&str> = last.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(ids, ["0", "1", "2", "10", "12"], "{last:?}");

    let once = apply_project(ddl, "id");
    copy_table(&src, &once.file("lake/bronze/t"), None);
    once.ok(&["run"]);
    assert_eq!(rows(&once, silver, &["i", "comment"]), expected(25));
    // From version 1 to the end in one run: every delete read from its vector.
    let from_one = apply_project(ddl, "id");
    copy_table(&src, &from_one.file("lake/bronze/t"), Some(1));
    from_one.ok(&["run"]);
    copy_table(&src, &from_one.file("lake/bronze/t"), None);
    from_one.ok(&["run"]);
    assert_eq!(rows(&from_one, silver, &["i", "comment"]), expected(25));
}

#[test]
fn deletion_vector_rows_stay_deleted_in_snapshots_and_change_reads() {
    let src = fixture("table-with-dv-small");
    // Hand-checked: ten values 0..9; version 1 deletes `value IN (0, 9)` with a vector.
    let want: Vec<Vec<String>> = (1..=8).map(|v| vec![v.to_string()]).collect();
    assert_eq!(
        oracle(
            &src,
            None,
            "SELECT CAST(value AS VARCHAR) AS v FROM t ORDER BY value"
        ),
        want
    );
    let ddl = "CREATE TABLE silver.t (value INT)";
    let silver = "SELECT CAST(value AS VARCHAR) AS v FROM silver.t ORDER BY value";
    // The snapshot at once: 8 rows, not 10.
    let p = apply_project(ddl, "value");
    copy_table(&src, &p.file("lake/bronze/t"), None);
    p.ok(&["run"]);
    assert_eq!(rows(&p, silver, &["v"]), want);
    assert_eq!(
        rows(
            &p,
            "SELECT CAST(value AS VARCHAR) AS v FROM bronze.t ORDER BY value",
            &["v"]
        ),
        want,
        "smelt sql"
    );
    // Version 0, then the DELETE as a change: the two rows its vector deletes go.
    let p = apply_project(ddl, "value");
    copy_table(&src, &p.file("lake/bronze/t"), Some(0));
    p.ok(&["run"]);
    assert_eq!(rows(&p, silver, &["v"]).len(), 10);
    copy_table(&src, &p.file("lake/bronze/t"), None);
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["deleted"], 2, "{:?}", flows[0]);
    assert_eq!(rows(&p, silver, &["v"]), want);
}

#[test]
fn column_mapping_reads_logical_names_and_partition_values() {
    let src = fixture("table_with_column_mapping");
    let ddl = "CREATE TABLE silver.t (`Company Very Short` STRING, `Super Name` STRING)";
    let p = apply_project(ddl, "Super Name");
    copy_table(&src, &p.file("lake/bronze/t"), None);
    let flows = p.flows(&["run"]);
    let sql = "SELECT `Company Very Short` AS c, `Super Name` AS n FROM silver.t ORDER BY n";
    let want = oracle(
        &src,
        None,
        "SELECT `Company Very Short`, `Super Name` FROM t ORDER BY `Super Name`",
    );
    assert_eq!(want.len(), 5, "{want:?}");
    assert!(
        want.iter().all(|r| r.iter().all(|v| v != "NULL")),
        "{want:?}"
    );
    assert_eq!(flows[0]["inserted"], 5, "{:?}", flows[0]);
    assert_eq!(rows(&p, sql, &["c", "n"]), want);
}

/// `CREATE TABLE … AS SELECT` from a column-mapped table (issue 42): the new table is a
/// plain one — its columns under their logical names, no mapping in its log — with the
/// source's rows (the fixture's oracle); a replace of it too.
#[test]
fn a_table_made_from_a_column_mapped_one_is_plain() {
    let src = fixture("table_with_column_mapping");
    let ddl = "CREATE TABLE silver.t (`Company Very Short` STRING, `Super Name` STRING)";
    let p = apply_project(ddl, "Super Name");
    copy_table(&src, &p.file("lake/bronze/t"), None);
    let want = oracle(
        &src,
        None,
        "SELECT `Company Very Short`, `Super Name` FROM t ORDER BY `Super Name`",
    );
    let sql = "SELECT `Company Very Short` AS c, `Super Name` AS n FROM copy.t ORDER BY n";
    for statement in [
        "CREATE TABLE copy.t AS SELECT * FROM bronze.t",
        "CREATE OR REPLACE TABLE copy.t AS SELECT * FROM bronze.t",
    ] {
        p.ok(&["sql", statement]);
        assert_eq!(rows(&p, sql, &["c", "n"]), want, "{statement}");
    }
    for entry in std::fs::read_dir(p.file("lake/copy/t/_delta_log")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        assert!(!text.contains("columnMapping"), "{text}");
    }
}

#[test]
fn checkpoints_and_v2_checkpoints_with_sidecars() {
    for (name, ddl, key) in [
        (
            "checkpoint-v2-table",
            "CREATE TABLE silver.t (id BIGINT, name STRING, created_at TIMESTAMP)",
            "id",
        ),
        (
            "checkpoint-cdf-table",
            "CREATE TABLE silver.t (id INT, name STRING, birthday DATE)",
            "id",
        ),
        (
            "cdf-table",
            "CREATE TABLE silver.t (id INT, name STRING, birthday DATE)",
            "id",
        ),
    ] {
        let src = fixture(name);
        let p = apply_project(ddl, key);
        copy_table(&src, &p.file("lake/bronze/t"), None);
        p.ok(&["run"]);
        let cols = ddl_columns(ddl);
        let select = |from: &str| {
            format!(
                "SELECT {} FROM {from} ORDER BY `{key}`",
                cols.iter()
                    .map(|c| format!("CAST(`{c}` AS VARCHAR) AS `{c}_text`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let want = oracle(&src, None, &select("t"));
        assert!(!want.is_empty(), "{name}");
        let texts: Vec<String> = cols.iter().map(|c| format!("{c}_text")).collect();
        let names: Vec<&str> = texts.iter().map(String::as_str).collect();
        assert_eq!(
            rows(&p, &select("silver.t"), &names),
            want,
            "{name}: silver"
        );
        assert_eq!(
            rows(&p, &select("bronze.t"), &names),
            want,
            "{name}: smelt sql"
        );
    }
}

/// The column names of a one-table DDL.
fn ddl_columns(ddl: &str) -> Vec<String> {
    let inner = &ddl[ddl.find('(').unwrap() + 1..ddl.rfind(')').unwrap()];
    inner
        .split(',')
        .map(|c| {
            c.split_whitespace()
                .next()
                .unwrap()
                .trim_matches('`')
                .to_string()
        })
        .collect()
}

#[test]
fn a_vacuumed_log_is_read_from_its_checkpoint() {
    // `checkpoints_vacuumed` keeps its log from version 5 (checkpoints at 5 and 10) and none
    // of its data files: the snapshot is built from the checkpoint at 10 and versions 11
    // and 12, and the first data file it needs is one the checkpoint lists (hand-checked
    // against the checkpoint's add actions), not a missing version 0.
    let src = fixture("checkpoints_vacuumed");
    let p = apply_project(
        "CREATE TABLE silver.t (value STRING, ts TIMESTAMP, date STRING)",
        "value",
    );
    copy_table(&src, &p.file("lake/bronze/t"), None);
    let (_, err) = p.fails(&["run"], 1);
    assert!(!err.contains("version 0"), "{err}");
    assert!(
        err.contains("data file `date=2020-06-0")
            && err.contains(".c000.snappy.parquet` of `bronze.t` is missing"),
        "{err}"
    );
}

#[test]
fn a_table_changed_after_a_cleaned_up_log_names_the_oldest_version_and_the_fix() {
    // The log of `checkpoint-cdf-table` starts at its checkpoint, version 3: a flow whose
    // watermark is older cannot read the changes in between.
    let src = fixture("checkpoint-cdf-table");
    let p = apply_project(
        "CREATE TABLE silver.t (id INT, name STRING, birthday DATE)",
        "id",
    );
    copy_table(&src, &p.file("lake/bronze/t"), None);
    p.ok(&["run"]);
    // Forge a watermark older than the log: version 1 of bronze applied.
    let newest = p.file("lake/silver/t/_delta_log/00000000000000000000.json");
    let text = std::fs::read_to_string(&newest).unwrap();
    let forged = text.replace("\"version\":5", "\"version\":1");
    assert_ne!(text, forged, "the watermark is a txn action: {text}");
    std::fs::write(&newest, forged).unwrap();
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("log_cleaned_past_the_watermark", common::pinned(&p, &err));
    p.ok(&["run", "--full-refresh"]);
    let select = "SELECT CAST(id AS VARCHAR) AS i FROM {} ORDER BY id";
    assert_eq!(
        rows(&p, &select.replace("{}", "silver.t"), &["i"]),
        oracle(&src, None, &select.replace("{}", "t"))
    );
}

#[test]
fn a_reader_feature_smelt_does_not_read_is_refused_by_name() {
    let src = fixture("table-with-dv-small");
    let p = apply_project("CREATE TABLE silver.t (value INT)", "value");
    copy_table(&src, &p.file("lake/bronze/t"), None);
    let v0 = p.file("lake/bronze/t/_delta_log/00000000000000000000.json");
    let text = std::fs::read_to_string(&v0).unwrap();
    std::fs::write(
        &v0,
        text.replace(
            "\"readerFeatures\":[\"deletionVectors\"]",
            "\"readerFeatures\":[\"deletionVectors\",\"variantType\"]",
        )
        .replace(
            "\"writerFeatures\":[\"deletionVectors\"]",
            "\"writerFeatures\":[\"deletionVectors\",\"variantType\"]",
        ),
    )
    .unwrap();
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("reader_feature_variant_type", pinned(&p, &err));
}

#[test]
fn a_silver_table_with_writer_features_smelt_would_break_is_refused_by_name() {
    // `checkpoint-v2-table` has an identity column (Databricks): smelt would not fill it.
    let src = fixture("checkpoint-v2-table");
    let p = apply_project(
        "CREATE TABLE silver.t (id BIGINT, name STRING, created_at TIMESTAMP)",
        "id",
    );
    copy_table(&src, &p.file("lake/bronze/t"), None);
    copy_table(&src, &p.file("lake/silver/t"), None);
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("writer_feature_refused", common::pinned(&p, &err));
}

#[test]
fn a_snapshot_takes_its_order_and_stamps_from_the_log_even_past_a_checkpoint() {
    // Key 1 is written twice, 'old' then 'new', in two commits; the first file's
    // modification time is made the later one, and a checkpoint follows. The log (still
    // whole) says which commit came last and when: a first run keeps 'new' (sequenced by
    // commit time), where stamps from the checkpoint alone would keep 'old'.
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  t:\n    apply:\n      from: bronze.t\n      into: silver.t\n      schema: silver.sql\n      keys: [id]\n",
    );
    p.write("silver.sql", "CREATE TABLE silver.t (id BIGINT, v STRING)");
    p.ok(&[
        "sql",
        "CREATE TABLE bronze.t (id STRING, v STRING); INSERT INTO bronze.t VALUES ('1', 'old'); INSERT INTO bronze.t VALUES ('1', 'new')",
    ]);
    let dir = p.file("lake/bronze/t");
    // The first file's modification time (in its add action, which the checkpoint copies)
    // an hour later than the second's.
    let v1 = dir.join("_delta_log/00000000000000000001.json");
    let text = std::fs::read_to_string(&v1).unwrap();
    let at = text.find("\"modificationTime\":").unwrap() + "\"modificationTime\":".len();
    let digits: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let later = digits.parse::<i64>().unwrap() + 3_600_000;
    let edited = format!("{}{later}{}", &text[..at], &text[at + digits.len()..]);
    std::fs::write(&v1, edited).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let url = url::Url::from_directory_path(std::path::absolute(&dir).unwrap()).unwrap();
        let table = deltalake::open_table(url).await.unwrap();
        deltalake::checkpoints::create_checkpoint(&table, None)
            .await
            .unwrap();
    });
    p.ok(&["run"]);
    assert_eq!(
        rows(
            &p,
            "SELECT CAST(id AS VARCHAR) AS i, v FROM silver.t",
            &["i", "v"]
        ),
        [["1", "new"]]
    );
}

#[test]
fn status_shows_the_share_of_stored_rows_deletion_vectors_mark() {
    // Hand-checked: ten rows in the data files, two of them deleted by a vector.
    let src = fixture("table-with-dv-small");
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  copy:\n    append:\n      from: bronze.other\n      into: bronze.t\n",
    );
    copy_table(&src, &p.file("lake/bronze/t"), None);
    copy_table(&src, &p.file("lake/bronze/other"), None);
    let status = serde_json::Value::from(common::status_rows(&p.ok(&["--json", "status"])));
    assert_eq!(status[0]["deleted_fraction"], 0.2, "{status}");
    assert_eq!(status[0]["write_mode"], serde_json::Value::Null, "{status}");
    let text = p.ok(&["status"]);
    assert!(
        text.contains("20.0% of stored rows marked deleted"),
        "{text}"
    );
}

/// A table of `testdata/spark` (written by the tests' Spark cluster, see its
/// `make_tables.py`) and Spark's own reading of every version of it: `{version: {columns,
/// rows}}`, values as text.
fn spark_table(name: &str) -> (PathBuf, serde_json::Value) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/spark");
    let expected = std::fs::read_to_string(dir.join(format!("{name}.expected.json"))).unwrap();
    (dir.join(name), serde_json::from_str(&expected).unwrap())
}

/// Spark's rows of one version, sorted, `NULL` for null.
fn spark_rows(version: &serde_json::Value) -> (Vec<String>, Vec<Vec<String>>) {
    let columns: Vec<String> = version["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    let mut rows: Vec<Vec<String>> = version["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(common::text).collect())
        .collect();
    rows.sort();
    (columns, rows)
}

#[test]
fn tables_with_vacuum_protocol_check_read_in_smelt_sql_as_spark_reads_them() {
    // `vacuumProtocolCheck` alone, and with column mapping in id mode, a renamed and a
    // dropped column, an INT widened to BIGINT and rows deleted by a deletion vector:
    // delta-rs' provider refuses both tables, smelt reads every version as Spark did.
    for name in ["vacuum_protocol_check", "column_mapping_id"] {
        let (src, expected) = spark_table(name);
        let p = Project::with_pipeline(
            "lake: ./lake\nflows:\n  a:\n    append:\n      from: g.t\n      into: copy.a\n",
        );
        copy_table(&src, &p.file("lake/g/t"), None);
        let versions = expected.as_object().unwrap();
        assert!(versions.len() >= 3, "{name}: {versions:?}");
        let mut latest = 0;
        for (version, spark) in versions {
            let (columns, want) = spark_rows(spark);
            let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
            let mut got = rows(
                &p,
                &format!("SELECT * FROM g.t VERSION AS OF {version}"),
                &columns,
            );
            got.sort();
            assert_eq!(got, want, "{name} version {version}");
            latest = latest.max(version.parse::<u64>().unwrap());
        }
        let (columns, want) = spark_rows(&expected[latest.to_string()]);
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        let mut got = rows(&p, "SELECT * FROM g.t", &columns);
        got.sort();
        assert_eq!(got, want, "{name} now");

        // A plain copy keeps the rows and none of the features; the table itself is not
        // written (smelt cannot keep `vacuumProtocolCheck` on a write).
        p.ok(&["sql", "CREATE TABLE copy.t AS SELECT * FROM g.t"]);
        let mut copied = rows(&p, "SELECT * FROM copy.t", &columns);
        copied.sort();
        assert_eq!(copied, want, "{name} copied");
        p.ok(&["sql", "INSERT INTO copy.t SELECT * FROM g.t"]);
        let mut twice = rows(&p, "SELECT * FROM copy.t", &columns);
        twice.sort();
        let mut want_twice: Vec<_> = want.iter().chain(&want).cloned().collect();
        want_twice.sort();
        assert_eq!(twice, want_twice, "{name} inserted");
        // MERGE reads it as a source too.
        p.ok(&[
            "sql",
            "MERGE INTO copy.t c USING g.t s ON c.id = s.id WHEN MATCHED THEN DELETE",
        ]);
        assert_eq!(
            p.query("SELECT * FROM copy.t"),
            Vec::<serde_json::Value>::new()
        );
        p.ok(&["run"]);
        let mut appended = rows(&p, "SELECT * FROM copy.a", &columns);
        appended.sort();
        assert_eq!(appended, want, "{name} appended");
        for table in ["t", "a"] {
            for entry in
                std::fs::read_dir(p.file(&format!("lake/copy/{table}/_delta_log"))).unwrap()
            {
                let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
                assert!(!text.contains("columnMapping"), "copy.{table}: {text}");
                assert!(
                    !text.contains("vacuumProtocolCheck"),
                    "copy.{table}: {text}"
                );
            }
        }
        let (_, err) = p.fails(&["sql", "DELETE FROM g.t WHERE true"], 1);
        insta::assert_snapshot!(
            format!("vacuum_protocol_check_delete_{name}"),
            pinned(&p, &err)
        );
        let (_, err) = p.fails(&["sql", "INSERT INTO g.t SELECT * FROM copy.t"], 1);
        insta::assert_snapshot!(
            format!("vacuum_protocol_check_insert_{name}"),
            pinned(&p, &err)
        );
    }
}
