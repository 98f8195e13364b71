//! A Delta table's commits as Spark reads them: the last one ([`Last`]), its schema, a
//! flow's last transaction, and the bronze layouts the engine cannot read.

use arrow::datatypes::SchemaRef;
use smelt_engine::context::app_id;
use smelt_engine::{EngineError, Result};
use smelt_spec::ddl::TableName;

use crate::session::Session;
use crate::sql::{ident, string_literal};

/// A table's last commit.
#[derive(Debug, Clone)]
pub(crate) struct Last {
    /// Its version.
    pub(crate) version: i64,
    /// Its `userMetadata` (smelt's commits: the run id, the flow and the report).
    pub(crate) metadata: Option<String>,
    /// Its time (µs).
    pub(crate) at_us: i64,
}

/// The last commit of `table`, `None` when there is no Delta table there.
pub(crate) async fn last_commit(s: &Session<'_>, what: &str, table: &str) -> Result<Option<Last>> {
    let sql = format!("DESCRIBE HISTORY {table} LIMIT 1");
    match s.spark.sql(what, &sql).await {
        Ok(rows) => {
            s.record_read(what, &sql);
            Ok(rows
                .ints("version")
                .first()
                .copied()
                .flatten()
                .map(|version| Last {
                    version,
                    metadata: rows.strings("userMetadata").first().cloned().flatten(),
                    at_us: rows
                        .micros("timestamp")
                        .first()
                        .copied()
                        .flatten()
                        .unwrap_or(0),
                }))
        }
        Err(e) if e.is_missing_table() => {
            s.record_read(what, &sql);
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// The schema of `table` as Spark reads it.
pub(crate) async fn schema_of(s: &Session<'_>, what: &str, table: &str) -> Result<SchemaRef> {
    let rows = s
        .read(what, format!("SELECT * FROM {table} LIMIT 0"))
        .await?;
    rows.schema.ok_or_else(|| {
        EngineError::Internal(format!("Spark sent no schema for `SELECT * FROM {table}`"))
    })
}

/// The version of flow `name`'s last Delta transaction in the table at `dir` (its latest,
/// as Delta keeps it, not the greatest), read from the JSON log entries.
pub(crate) async fn txn_of(
    s: &Session<'_>,
    dir: &str,
    name: &str,
    what: &str,
) -> Result<Option<i64>> {
    let sql = format!(
        "SELECT t.txn.version AS version FROM (SELECT from_json(value, 'txn STRUCT<appId: STRING, version: BIGINT>') AS t, \
         try_cast(regexp_extract(_metadata.file_name, '^([0-9]+)[.]json$', 1) AS BIGINT) AS v FROM text.{}) \
         WHERE t.txn.appId = {} AND v IS NOT NULL ORDER BY v DESC LIMIT 1",
        ident(&format!("{dir}/_delta_log/*.json")),
        string_literal(&app_id(name))
    );
    Ok(s.read(what, sql)
        .await?
        .ints("version")
        .first()
        .copied()
        .flatten())
}

/// Bronze tables whose files the engine cannot read as Parquet rows are refused by name:
/// partitioned (the values are in the paths), deletion vectors (rows marked deleted inside
/// files), column mapping (physical names in the files).
pub(crate) async fn check_bronze(s: &Session<'_>, from: &TableName, bronze: &str) -> Result<()> {
    let refuse = |what: String| {
        EngineError::user(
            format!("`{from}` {what}: not supported on the Spark engine yet"),
            "run this flow with `--engine embedded`",
        )
    };
    let detail = s
        .read("read bronze's layout", format!("DESCRIBE DETAIL {bronze}"))
        .await?;
    if detail
        .list_lens("partitionColumns")
        .first()
        .copied()
        .flatten()
        .unwrap_or(0)
        > 0
    {
        return Err(refuse("is partitioned".into()));
    }
    let props = s
        .read(
            "read bronze's properties",
            format!("SHOW TBLPROPERTIES {bronze}"),
        )
        .await?;
    for (key, value) in props.strings("key").into_iter().zip(props.strings("value")) {
        let (key, value) = (key.unwrap_or_default(), value.unwrap_or_default());
        match key.as_str() {
            "delta.feature.deletionVectors" => {
                return Err(refuse(
                    "has the deletion vectors feature (`delta.feature.deletionVectors`)".into(),
                ));
            }
            "delta.enableDeletionVectors" if value.eq_ignore_ascii_case("true") => {
                return Err(refuse(
                    "has deletion vectors (`delta.enableDeletionVectors`)".into(),
                ));
            }
            "delta.columnMapping.mode" if value != "none" => {
                return Err(refuse(format!(
                    "uses column mapping (`delta.columnMapping.mode = {value}`)"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}
