//! `smelt status`: per flow, the watermark, the source version and how far behind it is.

use smelt_spec::{Flow, Pipeline};

pub use crate::flow::status::{FlowStatus, utc_text};
use crate::flow::{LakeCx, build};
use crate::ports::{FileStores, Lake, SourceOptions};
use crate::{EngineError, Result};

/// The status of `flows`, in the order given. A table that cannot be opened fails; a
/// source that cannot be read is the row's problem.
pub async fn status(
    pipeline: &Pipeline,
    flows: &[&Flow],
    lake: &dyn Lake,
    files: &dyn FileStores,
) -> Result<Vec<FlowStatus>> {
    let cx = LakeCx {
        pipeline,
        lake,
        files,
    };
    let mut rows = Vec::new();
    for flow in flows {
        let mut row = FlowStatus::of(flow);
        // The table the flow reads (its version says how far behind the flow is).
        let mut opened = None;
        if let Some(source) = flow.reads() {
            match lake.source(source, SourceOptions::default()).await {
                Ok(source) => {
                    row.bronze_version = Some(source.version());
                    opened = Some(source);
                }
                Err(e) => row.problem = Some(e.to_string()),
            }
        }
        build(flow)
            .status(&cx, &mut row)
            .await
            .map_err(|e| EngineError::in_flow(&flow.name, e))?;
        if let (Some(source), Some(watermark)) = (&opened, row.watermark) {
            row.watermark_snapshot_id = source.snapshot_id(watermark);
        }
        rows.push(row.with_lag());
    }
    Ok(rows)
}
