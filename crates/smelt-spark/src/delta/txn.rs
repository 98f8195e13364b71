//! Delta's idempotent writes over Spark SQL: each write statement carries the flow's
//! watermark as the session confs `txnAppId` = `smelt/<flow>` and `txnVersion` = the source
//! version read, so Delta itself skips a statement a killed run already committed; a commit
//! also carries the run's report in its `userMetadata`. A flow's watermark is read back from
//! the table's `txn` action.

use smelt_engine::context::app_id;
use smelt_engine::ports::keys;
use smelt_engine::report::FlowReport;
use smelt_engine::{EngineError, Result};

use crate::session::Session;
use crate::sql::{ident, reset, set, settable_json, string_literal};

/// The session conf naming the idempotent writer.
pub(crate) const TXN_APP_ID: &str = "spark.databricks.delta.write.txnAppId";

/// The session conf holding the idempotent write's version.
pub(crate) const TXN_VERSION: &str = "spark.databricks.delta.write.txnVersion";

/// The session conf whose text lands in the commit's `userMetadata`.
pub(crate) const USER_METADATA: &str = "spark.databricks.delta.commitInfo.userMetadata";

/// No watermark left set by a flow run before (or a failed statement): the session confs
/// that carry one reset.
pub(crate) async fn reset_watermark(s: &crate::session::Session<'_>) -> Result<()> {
    for key in [TXN_APP_ID, TXN_VERSION, USER_METADATA] {
        s.setting(reset(key)).await?;
    }
    Ok(())
}

/// The watermark of flow `name` — source version `v` — set for the writes that follow,
/// unless `rebuild` of a version the target already has (`stored`): Delta would skip a
/// write whose txn version is not newer, and such a rebuild moves no watermark.
pub(crate) async fn set_watermark(
    s: &crate::session::Session<'_>,
    name: &str,
    v: i64,
    rebuild: bool,
    stored: Option<i64>,
) -> Result<()> {
    if !(rebuild && stored.is_some_and(|w| w >= v)) {
        s.write_setting(set(TXN_APP_ID, &app_id(name))).await?;
        s.write_setting(set(TXN_VERSION, &v.to_string())).await?;
    }
    Ok(())
}

/// The watermark and commit metadata of the writes done, reset.
pub(crate) async fn clear_watermark(s: &crate::session::Session<'_>) -> Result<()> {
    for key in [USER_METADATA, TXN_APP_ID, TXN_VERSION] {
        s.write_setting(reset(key)).await?;
    }
    Ok(())
}

/// The one statement of a flow run that writes its target (`sql`, after failpoint
/// `point`), carrying flow `name`'s watermark (source version `v`, see [`set_watermark`])
/// and `metadata` in its commit; the confs reset after, whatever happened.
pub(crate) async fn write_target(
    s: &crate::session::Session<'_>,
    (point, what, sql): (&str, &str, String),
    (name, v, rebuild, stored): (&str, i64, bool, Option<i64>),
    metadata: &str,
) -> Result<()> {
    set_watermark(s, name, v, rebuild, stored).await?;
    s.write_setting(set(USER_METADATA, metadata)).await?;
    let written = s.write(Some(point), what, sql).await;
    clear_watermark(s).await?;
    written.map(|_| ())
}

/// The `userMetadata` of a commit that carries flow `flow`'s watermark: the run id, the flow,
/// the source version read and the run's report (what `smelt status` and a rerun read back).
pub(crate) fn commit_metadata(
    run_id: &str,
    flow: &str,
    source_version: i64,
    report: &FlowReport,
) -> Result<String> {
    commit_metadata_with(run_id, flow, source_version, report, &[])
}

/// [`commit_metadata`] with `extra` entries (an ingest's loaded files, under the key the
/// embedded engine also reads from a commit).
pub(crate) fn commit_metadata_with(
    run_id: &str,
    flow: &str,
    source_version: i64,
    report: &FlowReport,
    extra: &[(&str, &str)],
) -> Result<String> {
    let report = serde_json::to_string(report).map_err(|e| EngineError::Internal(e.to_string()))?;
    let mut meta = serde_json::json!({});
    meta[keys::RUN_ID] = run_id.into();
    meta[keys::FLOW] = app_id(flow).into();
    meta[keys::SOURCE_VERSION] = source_version.into();
    meta[keys::REPORT] = report.into();
    for (key, value) in extra {
        meta[*key] = serde_json::Value::from(*value);
    }
    Ok(settable_json(&meta.to_string()))
}

/// The version of flow `name`'s last Delta transaction in the table at `dir` (its latest,
/// as Delta keeps it, not the greatest), so a watermark outlives Delta's log cleanup.
pub(crate) async fn txn_of(
    s: &Session<'_>,
    dir: &str,
    name: &str,
    what: &str,
) -> Result<Option<i64>> {
    let action = Action {
        name: "txn",
        fields: "appId: STRING, version: BIGINT",
        value: "version",
        when: &format!("appId = {}", string_literal(&app_id(name))),
    };
    Ok(latest(s, dir, what, action)
        .await?
        .ints("value")
        .first()
        .copied()
        .flatten())
}

/// An action of the log sought by [`latest`]: its name (`txn`), the fields read (Spark's
/// struct syntax), the field returned as `value`, and a condition on the fields (by their
/// bare names) it must meet.
pub(crate) struct Action<'a> {
    pub(crate) name: &'a str,
    pub(crate) fields: &'a str,
    pub(crate) value: &'a str,
    pub(crate) when: &'a str,
}

/// The latest `action` in the table at `dir` as Delta's snapshot keeps it: from the JSON log
/// entries after the latest checkpoint, else from that checkpoint (which holds the
/// snapshot's state), so it outlives Delta's log cleanup, which removes the entries a
/// checkpoint covers. One row (`value`), or none.
pub(crate) async fn latest(
    s: &Session<'_>,
    dir: &str,
    what: &str,
    action: Action<'_>,
) -> Result<crate::client::Rows> {
    let Action {
        name,
        fields,
        value,
        when,
    } = action;
    let log = format!("{dir}/_delta_log");
    let checkpoint = s
        .read(what, latest_checkpoint(&log))
        .await?
        .ints("v")
        .first()
        .copied()
        .flatten();
    let after = checkpoint.map_or(String::new(), |c| format!(" AND v > {c}"));
    let sql = format!(
        "SELECT {value} AS value FROM (SELECT a.{name}.*, v FROM (SELECT from_json(value, '{name} STRUCT<{fields}>') AS a, \
         try_cast(regexp_extract(_metadata.file_name, '^([0-9]+)[.]json$', 1) AS BIGINT) AS v FROM text.{}) \
         WHERE a.{name} IS NOT NULL AND v IS NOT NULL{after}) WHERE {when} ORDER BY v DESC LIMIT 1",
        ident(&format!("{log}/*.json")),
    );
    let logged = s.read(what, sql).await?;
    match checkpoint {
        Some(c) if logged.is_empty() => {
            let sql = format!(
                "SELECT {value} AS value FROM (SELECT {name}.* FROM parquet.{} WHERE {name} IS NOT NULL) WHERE {when}",
                ident(&format!("{log}/{c:020}.checkpoint*.parquet")),
            );
            s.read(what, sql).await
        }
        _ => Ok(logged),
    }
}

/// The version of the latest classic checkpoint (`<v>.checkpoint.parquet`, or its parts) in
/// the log folder `log`, listed without reading a file (NULL when there is none).
pub(crate) fn latest_checkpoint(log: &str) -> String {
    format!(
        "SELECT max(try_cast(regexp_extract(path, '/([0-9]+)[.]checkpoint([.][0-9]+[.][0-9]+)?[.]parquet$', 1) AS BIGINT)) AS v \
         FROM binaryFile.{}",
        ident(log)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::set;

    #[test]
    fn conf_values_are_backquoted_verbatim() {
        assert_eq!(
            set(TXN_APP_ID, "smelt/p"),
            "SET spark.databricks.delta.write.txnAppId=`smelt/p`"
        );
        assert_eq!(
            set(USER_METADATA, "{\"a\":\"`\"}"),
            "SET spark.databricks.delta.commitInfo.userMetadata=`{\"a\":\"``\"}`"
        );
    }
}
