//! The lake's event log: one row per flow run in the Delta table `_smelt.event_log`,
//! queryable with `smelt sql "SELECT * FROM _smelt.event_log"`.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::SchemaRef;
use deltalake::operations::optimize::OptimizeType;
use deltalake::protocol::SaveMode;
use smelt_engine::report::FlowEvent;
use smelt_spec::TableName;

use crate::Lake;
use crate::error::{Context, Result};

/// The event log's table name.
pub fn table_name() -> TableName {
    let (schema, table) = smelt_rules::tables::EVENT_LOG;
    TableName::new(schema, table)
}

fn schema() -> SchemaRef {
    smelt_engine::schema::side_table(&smelt_rules::tables::EVENT_LOG_COLUMNS)
}

/// True when the event log has a row for `flow` in run `run_id`.
pub async fn has_run(lake: &Lake, run_id: &str, flow: &str) -> Result<bool> {
    if lake.open(&table_name()).await?.is_none() {
        return Ok(false);
    }
    let ctx = lake.session().await?;
    let quote = |s: &str| s.replace('\'', "''");
    let batches = ctx
        .sql(&format!(
            "SELECT count(*) AS n FROM _smelt.event_log WHERE run_id = '{}' AND flow = '{}'",
            quote(run_id),
            quote(flow)
        ))
        .await
        .context(|| "reading `_smelt.event_log`".to_string())?
        .collect()
        .await
        .context(|| "reading `_smelt.event_log`".to_string())?;
    let n = batches
        .first()
        .and_then(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .map(|a| a.value(0))
        })
        .unwrap_or(0);
    Ok(n > 0)
}

/// Appends one row per event (a blind append: its own commit).
pub async fn append(lake: &Lake, events: &[FlowEvent]) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let text = |f: &dyn Fn(&FlowEvent) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from_iter(events.iter().map(f)))
    };
    let int = |f: &dyn Fn(&FlowEvent) -> Option<i64>| -> ArrayRef {
        Arc::new(Int64Array::from_iter(events.iter().map(f)))
    };
    let ts = |f: &dyn Fn(&FlowEvent) -> i64| -> ArrayRef {
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(events.iter().map(f)).with_timezone("UTC"),
        )
    };
    let n = |v: usize| Some(v as i64);
    let columns: Vec<ArrayRef> = vec![
        text(&|e| Some(e.report.run_id.clone())),
        text(&|e| Some(e.report.flow.clone())),
        text(&|e| {
            Some(if e.error.is_some() {
                "failed".into()
            } else {
                e.report.status.to_string()
            })
        }),
        ts(&|e| e.started_at_us),
        ts(&|e| e.finished_at_us),
        text(&|e| Some(e.report.from.clone())),
        text(&|e| Some(e.report.into.clone())),
        int(&|e| e.report.from_version),
        int(&|e| Some(e.report.to_version)),
        int(&|e| e.report.silver_version),
        int(&|e| n(e.report.changes_read)),
        int(&|e| n(e.report.ignored)),
        int(&|e| n(e.report.duplicates_collapsed)),
        int(&|e| n(e.report.stale)),
        int(&|e| n(e.report.inserted)),
        int(&|e| n(e.report.updated)),
        int(&|e| n(e.report.unchanged)),
        int(&|e| n(e.report.deleted)),
        int(&|e| n(e.report.rejected)),
        int(&|e| n(e.report.cast_failures_total())),
        int(&|e| n(e.report.files_read)),
        int(&|e| Some(e.report.bytes_read as i64)),
        int(&|e| n(e.report.files_written)),
        int(&|e| Some(e.report.bytes_written as i64)),
        text(&|e| e.error.clone()),
        text(&|e| serde_json::to_string(&e.report).ok()),
    ];
    let batch = RecordBatch::try_new(schema(), columns)?;
    let name = table_name();
    lake.prepare(&name)?;
    let table = match lake.open(&name).await? {
        Some(t) => t,
        None => lake.handle(&name).await?,
    };
    let table = table
        .write(vec![batch])
        .with_save_mode(SaveMode::Append)
        .with_table_name("event_log")
        .await
        .context(|| format!("appending to `{name}`"))?;
    // Each append adds one small file: every `COMPACT_EVERY`th compacts them (delta-rs'
    // optimize, which a concurrent append does not conflict with), so that opening the
    // log and appending to it stay as cheap after a million runs as after a hundred. The
    // rows are written by then: a compaction that fails is retried by the next one.
    if table
        .version()
        .is_some_and(|v| v > 0 && v % COMPACT_EVERY == 0)
        && let Err(e) = table.optimize().with_type(OptimizeType::Compact).await
    {
        tracing::warn!(table = %name, error = %e, "compacting the event log; the next compaction retries");
    }
    Ok(())
}

/// How many appends the event log takes between compactions.
const COMPACT_EVERY: u64 = 100;
