//! The run event log on the Spark engine: the same Delta table as embedded
//! (`_smelt.event_log`, at `<lake>/_smelt/event_log`, the same columns), written through Spark.

use smelt_engine::Result;
use smelt_engine::report::FlowEvent;
use smelt_spec::TableName;

use crate::client::Spark;
use crate::places::Places;
use crate::sql::string_literal;

/// The event log's table in Spark SQL.
pub(crate) fn table(places: &Places) -> String {
    let (schema, table) = smelt_rules::tables::EVENT_LOG;
    places.sql(&TableName::new(schema, table))
}

/// One event as a `VALUES` row.
fn row(e: &FlowEvent) -> String {
    let text = |s: &str| string_literal(s);
    let opt = |v: Option<i64>| v.map_or("NULL".to_string(), |v| format!("{v}L"));
    let n = |v: usize| format!("{v}L");
    let r = &e.report;
    let status = if e.error.is_some() {
        "failed".to_string()
    } else {
        r.status.to_string()
    };
    let values = [
        text(&r.run_id),
        text(&r.flow),
        text(&status),
        format!("timestamp_micros({}L)", e.started_at_us),
        format!("timestamp_micros({}L)", e.finished_at_us),
        text(&r.from),
        text(&r.into),
        opt(r.from_version),
        format!("{}L", r.to_version),
        opt(r.silver_version),
        n(r.changes_read),
        n(r.ignored),
        n(r.duplicates_collapsed),
        n(r.stale),
        n(r.inserted),
        n(r.updated),
        n(r.unchanged),
        n(r.deleted),
        n(r.rejected),
        n(r.cast_failures_total()),
        n(r.files_read),
        format!("{}L", r.bytes_read),
        n(r.files_written),
        format!("{}L", r.bytes_written),
        e.error.as_deref().map_or("NULL".to_string(), text),
        serde_json::to_string(r).map_or("NULL".to_string(), |j| text(&j)),
    ];
    format!("({})", values.join(", "))
}

/// Appends `events` (one commit), creating the table on first use.
pub(crate) async fn append(spark: &Spark, places: &Places, events: &[FlowEvent]) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let table = table(places);
    let cols: Vec<String> = crate::sql::side_table(&smelt_rules::tables::EVENT_LOG_COLUMNS)
        .into_iter()
        .map(|(n, t, _)| format!("{n} {t}"))
        .collect();
    spark
        .sql(
            "create the event log",
            &format!(
                "CREATE TABLE IF NOT EXISTS {table} ({}) USING DELTA",
                cols.join(", ")
            ),
        )
        .await?;
    let rows: Vec<String> = events.iter().map(row).collect();
    spark
        .sql(
            "append to the event log",
            &format!("INSERT INTO {table} VALUES {}", rows.join(", ")),
        )
        .await?;
    Ok(())
}

/// Whether the event log has a row of `flow` in run `run_id`.
pub(crate) async fn has_run(
    spark: &Spark,
    places: &Places,
    run_id: &str,
    flow: &str,
) -> Result<bool> {
    let sql = format!(
        "SELECT count(*) AS n FROM {} WHERE run_id = {} AND flow = {}",
        table(places),
        string_literal(run_id),
        string_literal(flow)
    );
    match spark.sql("read the event log", &sql).await {
        Ok(rows) => Ok(rows.ints("n").first().copied().flatten().unwrap_or(0) > 0),
        Err(e) if e.is_missing_table() => Ok(false),
        Err(e) => Err(e.into()),
    }
}
