//! Bronze as a Databricks team has it (DESIGN §11), written by the test cluster itself:
//! partitioned by a day column, column mapping with a rename and a drop, and either deletion
//! vectors and row tracking (the log then cleaned up) or the change feed; `DELETE`s and
//! `UPDATE`s between appends, an `OPTIMIZE`. Three flows read it on both engines — an apply
//! flow that ignores bronze's deletes, one that applies them (the rows a deletion vector
//! marks, or the change data), an append flow that skips the commits rewriting rows — and
//! silver, tombstones, the append target and every report field must be equal after each
//! step.

use super::*;

const FLOWS: &str = "  r:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__silver
      schema: silver.sql
      sequence_by: [seq]
      apply_as_deletes: IsDeleted = 'true'
      cast_dialect: spark
  d:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__deletes
      schema: deletes.sql
      sequence_by: [seq]
      cast_dialect: spark
      source_deletes: apply
  a:
    append:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__appended
      schema: appended.sql
      cast_dialect: spark
      on_rewrite: skip
";

/// The tables compared after each step, and what each engine stamps its own way.
const COMPARED: &[(&str, &str, &[&str])] = &[
    ("product2__silver", "Id", &["_update_timestamp"]),
    ("product2__silver__tombstones", "Id", &["_deleted_at"]),
    ("product2__deletes", "Id", &["_update_timestamp"]),
    ("product2__appended", "Id, seq, v", &[]),
];

/// Bronze with deletion vectors (read by Delta's reader), partitioned by day, column
/// mapping, row tracking; its log cleaned up at the end.
pub(super) fn databricks_bronze(url: &str, writer: &Writer) {
    layout_steps(
        url,
        writer,
        "'delta.enableDeletionVectors' = 'true', 'delta.columnMapping.mode' = 'name', \
         'delta.enableRowTracking' = 'true'",
    );
}

/// Bronze partitioned by day, with column mapping and the change feed but no deletion
/// vectors (its files read as Parquet: partition values from the log, columns by their
/// physical names; its deletes and updates in change-data files).
pub(super) fn mapped_bronze_with_change_data(url: &str, writer: &Writer) {
    layout_steps(
        url,
        writer,
        "'delta.columnMapping.mode' = 'name', 'delta.enableChangeDataFeed' = 'true'",
    );
}

/// The steps over a bronze of properties `properties`, partitioned by day.
fn layout_steps(url: &str, writer: &Writer, properties: &str) {
    let vectors = properties.contains("enableDeletionVectors");
    let p = Project::with_pipeline("flows: {}\n");
    p.write(
        "silver.sql",
        "CREATE TABLE medallion_demo.product2__silver (Id STRING NOT NULL, seq INT, v INT, \
         IsDeleted BOOLEAN, day DATE, PRIMARY KEY (Id))",
    );
    p.write(
        "deletes.sql",
        "CREATE TABLE medallion_demo.product2__deletes (Id STRING NOT NULL, seq INT, v INT, \
         day DATE, PRIMARY KEY (Id))",
    );
    p.write(
        "appended.sql",
        "CREATE TABLE medallion_demo.product2__appended (Id STRING, seq INT, v INT, day DATE)",
    );
    let pair = Pair::new(p, FLOWS, url);
    let dir = pair.p.file("bronze");
    let table = format!("delta.`{}`", dir.display());
    writer.sql(&format!(
        "CREATE TABLE {table} (Id STRING, seq STRING, v STRING, IsDeleted STRING, note STRING, \
         junk STRING, day DATE) USING DELTA PARTITIONED BY (day) TBLPROPERTIES ({properties})"
    ));
    let insert = |rows: &str| {
        writer.sql(&format!(
            "INSERT INTO {table} SELECT /*+ REPARTITION(2) */ Id, seq, v, IsDeleted, note, junk, \
             CAST(day AS DATE) FROM VALUES {rows} AS t(Id, seq, v, IsDeleted, note, junk, day)"
        ))
    };
    let step = |name: &str| {
        let reports = pair.run(&[]);
        same_append_reports(name, &reports);
        same_layout_tables(&pair, name);
        reports
    };
    insert(
        "('a', '1', '10', 'false', 'n1', 'j', '2026-07-01'), ('b', '1', '11', 'false', 'n2', 'j', '2026-07-01'), \
         ('c', '1', '12', 'false', 'n3', 'j', '2026-07-02'), ('a', '2', '13', 'false', 'n4', 'j', '2026-07-02'), \
         ('d', '1', '14', 'false', NULL, 'j', '2026-07-01')",
    );
    step("first run");

    // Rows marked deleted in deletion vectors (no file rewritten; or written as change
    // data), then new rows.
    writer.sql(&format!("DELETE FROM {table} WHERE Id IN ('b', 'c')"));
    insert(
        "('e', '1', '15', 'false', 'n5', 'j', '2026-07-02'), ('a', '3', '16', 'false', 'n6', 'j', '2026-07-01')",
    );
    let reports = step("deletes by deletion vector");
    // The flow that applies deletes read the two marked rows (stale: they carry the
    // sequence silver holds) besides the two new ones.
    if vectors {
        assert_eq!(reports.1[1]["changes_read"], 4, "{:?}", reports.1);
    }

    // An update: its old rows marked deleted, its new rows in a new file.
    writer.sql(&format!(
        "UPDATE {table} SET v = '20', seq = '4' WHERE Id = 'd'"
    ));
    step("update by deletion vector");

    // Column mapping: a rename and a drop, then rows under the new names.
    writer.sql(&format!("ALTER TABLE {table} RENAME COLUMN note TO memo"));
    writer.sql(&format!("ALTER TABLE {table} DROP COLUMN junk"));
    writer.sql(&format!(
        "INSERT INTO {table} VALUES ('f', '1', '17', 'false', 'm1', DATE'2026-07-03'), \
         ('a', '5', '18', 'true', 'm2', DATE'2026-07-03')"
    ));
    step("renamed and dropped columns");

    // Compaction moves rows and changes none; a delete in the same range.
    writer.sql(&format!("OPTIMIZE {table}"));
    writer.sql(&format!("DELETE FROM {table} WHERE Id = 'e'"));
    insert_mapped(
        writer,
        &table,
        "('g', '1', '19', 'false', 'm3', DATE'2026-07-03')",
    );
    step("compaction and a delete");

    let reports = pair.run(&["--full-refresh"]);
    same_append_reports("rebuild", &reports);
    same_layout_tables(&pair, "rebuild");
    if !vectors {
        // Without deletion vectors the Spark engine reads a snapshot from the whole log.
        return;
    }

    // Log cleanup: bronze's entries before a checkpoint removed. A rebuild reads the
    // snapshot (files older than the log stamped as embedded), later runs the new commits.
    checkpoint_and_clean_up(url, &dir);
    insert_mapped(
        writer,
        &table,
        "('h', '1', '21', 'false', 'm4', DATE'2026-07-04')",
    );
    let reports = pair.run(&["--full-refresh"]);
    same_append_reports("rebuild after log cleanup", &reports);
    same_layout_tables(&pair, "rebuild after log cleanup");
    writer.sql(&format!("DELETE FROM {table} WHERE Id = 'h'"));
    insert_mapped(
        writer,
        &table,
        "('i', '1', '22', 'false', 'm5', DATE'2026-07-04')",
    );
    step("after log cleanup");
}

/// Rows inserted after the rename and the drop.
fn insert_mapped(writer: &Writer, table: &str, rows: &str) {
    writer.sql(&format!("INSERT INTO {table} VALUES {rows}"));
}

/// Every table of [`COMPARED`] equal in both lakes (absent in both, or equal).
fn same_layout_tables(pair: &Pair, step: &str) {
    for (table, order, drop) in COMPARED {
        if !pair
            .p
            .file(&format!("lake_e/medallion_demo/{table}"))
            .exists()
        {
            continue;
        }
        let sql = format!("SELECT * FROM medallion_demo.{table} ORDER BY {order}");
        let (e, s) = pair.rows(&sql, drop);
        assert_eq!(e, s, "{step}: {table} differs (left embedded, right Spark)");
    }
}
