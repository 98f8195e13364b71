//! Spark with Delta (the test cluster, [`SparkCluster`]) reads what the embedded engine
//! writes: a snapshot and `table_changes` of silver written copy-on-write, merge-on-read with
//! change data written (deletion vectors smelt wrote, read by an engine smelt did not
//! write), and merge-on-read with derived change data (no change data file: Spark derives
//! the changes from the deletion vectors and new files). The expected rows and changes come
//! from a model the test keeps ([`Model`]), not from smelt.

use smelt_spark::client::Spark;

use crate::cluster::SparkCluster;
use crate::common::Project;
use crate::derived_change_data::{Model, STEPS, log};

const PIPELINE: &str = "lake: ./lake
flows:
  cow:
    apply:
      from: raw.orders
      into: silver.cow
      schema: cow.sql
      keys: [id]
      sequence_by: [seq]
      apply_as_deletes: status = 'deleted'
  written:
    apply:
      from: raw.orders
      into: silver.written
      schema: written.sql
      keys: [id]
      sequence_by: [seq]
      apply_as_deletes: status = 'deleted'
      write_mode: merge_on_read
  derived:
    apply:
      from: raw.orders
      into: silver.derived
      schema: derived.sql
      keys: [id]
      sequence_by: [seq]
      apply_as_deletes: status = 'deleted'
      write_mode: merge_on_read
      change_data: derived
";

/// A connection to the cluster and a runtime to drive it.
struct Reader {
    runtime: tokio::runtime::Runtime,
    spark: Spark,
}

impl Reader {
    /// The rows of `sql`, the columns `columns` as text (`NULL` for NULL), sorted.
    fn rows(&self, sql: &str, columns: &[&str]) -> Vec<Vec<String>> {
        let rows = self
            .runtime
            .block_on(self.spark.sql("reading smelt's silver", sql))
            .unwrap_or_else(|e| panic!("{e}\n{sql}"));
        let cols: Vec<Vec<Option<String>>> = columns.iter().map(|c| rows.strings(c)).collect();
        let mut out: Vec<Vec<String>> = (0..rows.len())
            .map(|i| {
                cols.iter()
                    .map(|c| c[i].clone().unwrap_or_else(|| "NULL".into()))
                    .collect()
            })
            .collect();
        out.sort();
        out
    }
}

#[test]
fn spark_reads_smelt_silver_and_its_change_feed_in_every_write_mode() {
    let cluster = SparkCluster::start();
    let (runtime, spark) = cluster.connect();
    let reader = Reader { runtime, spark };
    let p = Project::with_pipeline(PIPELINE);
    // No flow reads the silvers: their DDL asks for the change feed Spark reads.
    for table in ["cow", "written", "derived"] {
        p.write(
            &format!("{table}.sql"),
            &format!(
                "CREATE TABLE silver.{table} (id STRING NOT NULL, status STRING, seq STRING) OPTIONS (enable_change_history = TRUE)"
            ),
        );
    }
    p.ok(&[
        "sql",
        "CREATE TABLE raw.orders (id STRING, status STRING, seq STRING)",
    ]);
    let mut model = Model::default();
    for rows in STEPS {
        let step = model.step(rows);
        p.ok(&[
            "sql",
            &format!("INSERT INTO raw.orders VALUES {}", step.values),
        ]);
        p.ok(&["run"]);
        for table in ["cow", "written", "derived"] {
            let dir = std::fs::canonicalize(p.file(&format!("lake/silver/{table}"))).unwrap();
            let path = dir.display().to_string();
            let snapshot = reader.rows(
                &format!("SELECT id, status FROM delta.`{path}`"),
                &["id", "status"],
            );
            assert_eq!(snapshot, model.rows(), "Spark's snapshot of silver.{table}");
            let version = versions(&p, table) - 1;
            let changes = reader.rows(
                &format!(
                    "SELECT _change_type, id, status, seq FROM table_changes_by_path('{path}', {version}, {version})"
                ),
                &["_change_type", "id", "status", "seq"],
            );
            let expected = match table {
                "derived" => &step.derived,
                _ => &step.written,
            };
            let expected: Vec<Vec<String>> = expected.iter().map(|c| c.to_vec()).collect();
            assert_eq!(
                changes, expected,
                "Spark's change feed of silver.{table} at version {version}"
            );
        }
    }
}

/// How many versions a silver of the test has.
fn versions(p: &Project, table: &str) -> usize {
    log(p, &format!("silver.{table}")).len()
}
