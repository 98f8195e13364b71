//! The flow kinds on Spark, one folder each as in the embedded engine
//! (`smelt_engine::flow`): `apply` (SCD1 and SCD2 side by side), `append`, `replace_where`,
//! `ingest` and `export`; `tables`: where an append or replace_where flow stands.

pub(crate) mod append;
pub(crate) mod apply;
pub(crate) mod export;
pub(crate) mod ingest;
pub(crate) mod replace_where;
pub(crate) mod tables;

use smelt_engine::Result;

use crate::session::Session;

/// The session settings of a flow run that reads Delta or Iceberg tables: the flow's time
/// zone (`tz`, default UTC), Parquet schemas merged across files, and, writing an Iceberg
/// table, a rebuild's `INSERT OVERWRITE` replacing the whole table (and committing, with
/// the watermark, even when it writes no row).
pub(crate) async fn run_settings(s: &Session<'_>, tz: Option<&str>, iceberg: bool) -> Result<()> {
    let tz = tz.unwrap_or("UTC");
    s.setting(format!("SET spark.sql.session.timeZone={tz}"))
        .await?;
    s.setting("SET spark.sql.parquet.mergeSchema=true".to_string())
        .await?;
    if iceberg {
        s.setting("SET spark.sql.sources.partitionOverwriteMode=static".to_string())
            .await?;
    }
    Ok(())
}
