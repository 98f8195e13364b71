//! The ingest rejects table (`<bronze>__rejects`): the lines of a load that do not parse,
//! committed before bronze, tagged with the load (watermark) they belong to, so a rerun
//! after a crash between the two commits replaces an unfinished attempt's rows.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use smelt_core::change::timestamp_utc;

use crate::context::{RunContext, app_id};
use crate::ports::{LakeTable, Malformed, Watermark};
use crate::rejects::rejects_table;
use crate::{EngineError, Result};

/// Column of the ingest rejects table holding the load (watermark) a row belongs to.
pub const INGEST_BATCH: &str = "ingest_batch";

/// The ingest rejects table's columns.
pub fn rejects_schema() -> SchemaRef {
    let text = |n: &str, null| Field::new(n, DataType::Utf8, null);
    Arc::new(Schema::new(vec![
        text("run_id", false),
        text("flow", false),
        Field::new(INGEST_BATCH, DataType::Int64, false),
        text("file", false),
        Field::new("line", DataType::Int64, false),
        text("reason", false),
        text("raw_line", false),
        Field::new("rejected_at", timestamp_utc(), false),
    ]))
}

/// Writes the malformed rows of load `batch`, replacing those an unfinished attempt at the
/// same load left behind.
pub(super) async fn write_rejects(
    flow_name: &str,
    bronze: &smelt_spec::TableName,
    rejects: &mut dyn LakeTable,
    batch: i64,
    malformed: &[(String, Malformed)],
    ctx: &RunContext,
) -> Result<()> {
    let schema = rejects_schema();
    match rejects.schema() {
        None => rejects.create(Arc::clone(&schema)).await?,
        Some(s) if s.fields() != schema.fields() => {
            return Err(EngineError::user(
                format!(
                    "`{}` exists but is not an ingest rejects table",
                    rejects_table(bronze)
                ),
                "rename or drop that table; smelt keeps the rows of files that do not parse there",
            ));
        }
        Some(_) => {
            let app = app_id(flow_name);
            if ctx.full_refresh {
                rejects.stage_overwrite().await?;
            } else if rejects.watermark(&app).await?.is_some_and(|w| w >= batch) {
                let key = RecordBatch::try_new(
                    Arc::new(Schema::new(vec![Field::new(
                        INGEST_BATCH,
                        DataType::Int64,
                        false,
                    )])),
                    vec![Arc::new(Int64Array::from(vec![batch]))],
                )?;
                rejects.stage_deletes(key).await?;
            }
        }
    }
    let n = malformed.len();
    if n > 0 {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![ctx.run_id.as_str(); n])),
            Arc::new(StringArray::from(vec![flow_name; n])),
            Arc::new(Int64Array::from(vec![batch; n])),
            Arc::new(StringArray::from_iter_values(
                malformed.iter().map(|(f, _)| f),
            )),
            Arc::new(Int64Array::from_iter_values(
                malformed.iter().map(|(_, m)| m.line),
            )),
            Arc::new(StringArray::from_iter_values(
                malformed.iter().map(|(_, m)| &m.reason),
            )),
            Arc::new(StringArray::from_iter_values(
                malformed.iter().map(|(_, m)| &m.raw),
            )),
            Arc::new(
                TimestampMicrosecondArray::from(vec![ctx.run_timestamp_us; n]).with_timezone("UTC"),
            ),
        ];
        let rows = RecordBatch::try_new(schema, columns)?;
        let replaces = BooleanArray::from(vec![false; n]);
        rejects.stage(rows, &replaces, &[]).await?;
    }
    let watermark = Watermark {
        app_id: app_id(flow_name),
        version: batch,
        run_id: ctx.run_id.clone(),
        report: None,
        extra: Vec::new(),
        source: None,
    };
    rejects
        .commit(&[INGEST_BATCH.to_string()], &watermark)
        .await?;
    Ok(())
}
