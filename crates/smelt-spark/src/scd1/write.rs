//! The statements that write: each carries the flow's watermark as Delta's idempotent-write
//! session confs (`txnAppId` = `smelt/<flow>`, `txnVersion` = the bronze version read), so
//! Delta itself skips a statement a killed run already committed; silver's commit also
//! carries the run's report in its `userMetadata`. Order: tombstones, then silver, as
//! embedded; tombstone expiry after, in a commit of its own.

use smelt_engine::context::app_id;
use smelt_engine::ports::keys;
use smelt_engine::report::FlowReport;
use smelt_engine::{EngineError, Result};
use smelt_spec::{ApplyFlow, OnCastError, OnViolation};

use super::shape::{DELETED_AT, Shape, create_table, create_table_with, spark_type};
use crate::sql::{ident, string_literal};

/// The session conf naming the idempotent writer.
pub(crate) const TXN_APP_ID: &str = "spark.databricks.delta.write.txnAppId";
/// The session conf holding the idempotent write's version.
pub(crate) const TXN_VERSION: &str = "spark.databricks.delta.write.txnVersion";
/// The session conf whose text lands in the commit's `userMetadata`.
pub(crate) const USER_METADATA: &str = "spark.databricks.delta.commitInfo.userMetadata";

/// `SET key=value`, the value backquoted (Spark takes it verbatim; a backquote inside is
/// doubled).
pub(crate) fn set(key: &str, value: &str) -> String {
    format!("SET {key}=`{}`", value.replace('`', "``"))
}

/// No watermark left set by a flow run before (or a failed statement): the session confs
/// that carry one reset.
pub(crate) async fn reset_watermark(s: &crate::session::Session<'_>) -> Result<()> {
    for key in [TXN_APP_ID, TXN_VERSION, USER_METADATA] {
        s.setting(reset(key)).await?;
    }
    Ok(())
}

/// `RESET key`.
pub(crate) fn reset(key: &str) -> String {
    format!("RESET {key}")
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

/// The version of `table` after a run's writes (`None` in a plan or compile, which write
/// nothing).
pub(crate) async fn version_after(
    s: &crate::session::Session<'_>,
    table: &str,
) -> Result<Option<i64>> {
    if s.mode != crate::session::Mode::Run {
        return Ok(None);
    }
    let last = s
        .read(
            "read the written table's version",
            format!("DESCRIBE HISTORY {table} LIMIT 1"),
        )
        .await?;
    Ok(last.ints("version").first().copied().flatten())
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

/// JSON `text` made safe as a backquoted `SET` value: `$` and the backquote as JSON escapes
/// (Spark would substitute `${…}` in the statement's text, and the value is backquoted).
pub(crate) fn settable_json(text: &str) -> String {
    text.replace('$', "\\u0024").replace('`', "\\u0060")
}

/// Silver's `CREATE TABLE IF NOT EXISTS` (with deletion vectors on where `mor`, the change
/// feed where `feed`).
pub(crate) fn create_silver(table: &str, shape: &Shape, mor: bool, feed: bool) -> String {
    let cols: Vec<(String, String, bool)> = shape
        .silver
        .columns
        .iter()
        .map(|c| (c.name.clone(), spark_type(c.ty), c.nullable))
        .collect();
    create_table_with(table, &cols, mor, feed)
}

/// The tombstones' `CREATE TABLE IF NOT EXISTS` (with deletion vectors on where `mor`; no
/// change feed: nothing reads them).
pub(crate) fn create_tombstones(table: &str, shape: &Shape, mor: bool) -> String {
    create_table_with(table, &shape.tombstone_columns(), mor, false)
}

/// Table property `property` turned on for an existing table (deletion vectors for
/// `write_mode: merge_on_read`, the change feed of a table a flow now reads).
pub(crate) fn turn_on(table: &str, property: &str) -> String {
    format!("ALTER TABLE {table} SET TBLPROPERTIES ('{property}' = 'true')")
}

/// The tombstone rows of the stage, as the tombstone table's columns.
fn tombstone_rows(shape: &Shape, run_us: i64) -> String {
    let mut cols: Vec<String> = shape.keys.iter().map(|&i| shape.name(i)).collect();
    for (j, s) in shape.seq.iter().enumerate() {
        if !s.is_key {
            cols.push(format!("__tomb{j} AS {}", ident(&s.stored)));
        }
    }
    cols.push(format!(
        "timestamp_micros({run_us}L) AS {}",
        ident(DELETED_AT)
    ));
    format!("SELECT {} FROM smelt_stage WHERE __tomb", cols.join(", "))
}

fn on(shape: &Shape) -> String {
    shape
        .keys
        .iter()
        .map(|&i| format!("t.{0} <=> s.{0}", shape.name(i)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The tombstones of the run's deletes merged in: one per key, the newest.
pub(crate) fn merge_tombstones(table: &str, shape: &Shape, run_us: i64) -> String {
    format!(
        "MERGE INTO {table} AS t USING ({}) AS s ON {}\n\
         WHEN MATCHED THEN UPDATE SET *\nWHEN NOT MATCHED THEN INSERT *",
        tombstone_rows(shape, run_us),
        on(shape)
    )
}

/// A rebuild's tombstones: the table replaced by the run's.
pub(crate) fn overwrite_tombstones(table: &str, shape: &Shape, run_us: i64) -> String {
    format!("INSERT OVERWRITE {table} {}", tombstone_rows(shape, run_us))
}

/// The stage merged into silver: deletes, updates (changed or not: the sequence and ingest
/// time move), inserts; keys matched null-safely.
pub(crate) fn merge_silver(table: &str, shape: &Shape) -> String {
    let cols: Vec<String> = (0..shape.silver.columns.len())
        .map(|i| shape.name(i))
        .collect();
    let set: Vec<String> = cols.iter().map(|c| format!("t.{c} = s.{c}")).collect();
    let values: Vec<String> = cols.iter().map(|c| format!("s.{c}")).collect();
    format!(
        "MERGE INTO {table} AS t\n\
         USING (SELECT * FROM smelt_stage WHERE __action IN ('insert', 'update', 'unchanged', 'delete')) AS s\n\
         ON {}\n\
         WHEN MATCHED AND s.__action = 'delete' THEN DELETE\n\
         WHEN MATCHED THEN UPDATE SET {}\n\
         WHEN NOT MATCHED AND s.__action = 'insert' THEN INSERT ({}) VALUES ({})",
        on(shape),
        set.join(", "),
        cols.join(", "),
        values.join(", ")
    )
}

/// A rebuild's silver: the table replaced by the stage's inserts.
pub(crate) fn overwrite_silver(table: &str, shape: &Shape) -> String {
    let cols: Vec<String> = (0..shape.silver.columns.len())
        .map(|i| shape.name(i))
        .collect();
    format!(
        "INSERT OVERWRITE {table} SELECT {} FROM smelt_stage WHERE __action = 'insert'",
        cols.join(", ")
    )
}

/// The rejects table's columns, as the embedded engine creates it.
pub(crate) const REJECTS_COLUMNS: [(&str, &str, bool); 12] = [
    ("run_id", "STRING", false),
    ("flow", "STRING", false),
    ("source_table", "STRING", false),
    ("source_version", "BIGINT", false),
    ("source_commit_timestamp", "TIMESTAMP", true),
    ("rule", "STRING", false),
    ("column_name", "STRING", true),
    ("raw_value", "STRING", true),
    ("target_type", "STRING", true),
    ("reason", "STRING", false),
    ("raw_row", "STRING", false),
    ("rejected_at", "TIMESTAMP", false),
];

/// The rejects table's `CREATE TABLE IF NOT EXISTS` (no change feed unless a flow reads
/// it: `feed`).
pub(crate) fn create_rejects(table: &str, feed: bool) -> String {
    let cols: Vec<(String, String, bool)> = REJECTS_COLUMNS
        .iter()
        .map(|(n, t, null)| (n.to_string(), t.to_string(), *null))
        .collect();
    create_table(table, &cols, feed)
}

/// Who the rejects rows of a run are from.
pub(crate) struct RejectsOf<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) flow: &'a str,
    pub(crate) source: &'a str,
    pub(crate) run_us: i64,
}

/// The rejects rows, with the raw row as JSON (bronze's columns, NULLs written): under
/// `on_cast_error: quarantine` one per upsert and column that does not cast, with the raw
/// value; under `on_violation: quarantine` one per change and expectation it fails (the
/// first only, as it is left out then).
pub(crate) fn insert_rejects(
    table: &str,
    spec: &ApplyFlow,
    shape: &Shape,
    bronze_columns: &[String],
    of: &RejectsOf<'_>,
) -> String {
    let fields: Vec<String> = bronze_columns
        .iter()
        .map(|c| format!("{}, {}", string_literal(c), ident(c)))
        .collect();
    let raw_row = format!(
        "to_json(named_struct({}), map('ignoreNullFields', 'false'))",
        fields.join(", ")
    );
    let from = |rule: String,
                column: String,
                raw: String,
                ty: String,
                reason: String,
                cond: String| {
        format!(
            "SELECT {}, {}, {}, _commit_version, _commit_timestamp, {rule}, {column}, {raw}, {ty}, {reason}, {raw_row}, timestamp_micros({}L) \
             FROM smelt_changes WHERE {cond}",
            string_literal(of.run_id),
            string_literal(of.flow),
            string_literal(of.source),
            of.run_us,
        )
    };
    let null = || "CAST(NULL AS STRING)".to_string();
    let casts = spec.on_cast_error == OnCastError::Quarantine;
    let mut parts: Vec<String> = shape
        .cast_columns()
        .filter(|_| casts)
        .filter(|&i| shape.silver.columns[i].ty != smelt_spec::ColumnType::String)
        .map(|i| {
            let c = &shape.silver.columns[i];
            let ty = c.ty.to_string();
            from(
                "'cast'".into(),
                string_literal(&c.name),
                format!("CAST({} AS STRING)", ident(&c.name)),
                string_literal(&ty),
                string_literal(&format!("the value cannot be cast to {ty}")),
                format!("__kind = 'upsert' AND __f{i}"),
            )
        })
        .collect();
    if spec.on_violation == OnViolation::Quarantine {
        for (j, (name, pred)) in spec.expectations.iter().enumerate() {
            parts.push(from(
                string_literal(name),
                null(),
                null(),
                null(),
                string_literal(&format!("expectation `{name}` failed: {pred}")),
                format!("__x{j}"),
            ));
        }
    }
    format!("INSERT INTO {table} {}", parts.join(" UNION ALL "))
}

/// Tombstones older than the retention, removed.
pub(crate) fn expire_tombstones(table: &str, before_us: i64) -> String {
    format!(
        "DELETE FROM {table} WHERE {} < timestamp_micros({before_us}L)",
        ident(DELETED_AT)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
