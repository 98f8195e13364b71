//! `smelt status`: watermark, bronze version and lag per flow, read embedded or through the
//! Spark engine's cluster.

use smelt_engine::context::RunContext;
use smelt_ingest::Files;

use super::{load_pipeline, open_lakes, select};
use crate::args::{GlobalArgs, StatusArgs};
use crate::failure::Failure;

/// Prints the status of the selected flows.
pub async fn status(global: &GlobalArgs, args: &StatusArgs) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let flows = select(&pipeline, &args.flows)?;
    let rows = match super::spark::remote(global, &pipeline)? {
        Some(url) => {
            let engine =
                super::spark::connect(&url, &pipeline, &RunContext::new(true, false)).await?;
            let rows = engine.status(&flows).await;
            engine.close().await;
            rows
        }
        None => {
            let lakes = open_lakes(&pipeline).await?;
            let lake = lakes.ports();
            smelt_engine::status::status(&pipeline, &flows, &lake, &Files::new(pipeline.storage))
                .await?
        }
    };
    if global.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "flows": rows }))
                .expect("serialisable")
        );
        return Ok(0);
    }
    let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    println!(
        "{:<16} {:>9} {:>7} {:>6} {:>7}  {:<24} NOTE",
        "FLOW", "WATERMARK", "BRONZE", "BEHIND", "SILVER", "LAST RUN (UTC)"
    );
    for r in &rows {
        println!(
            "{:<16} {:>9} {:>7} {:>6} {:>7}  {:<24} {}",
            r.flow,
            opt(r.watermark),
            opt(r.bronze_version),
            opt(r.versions_behind.or(r.files_waiting.map(|f| f as i64))),
            opt(r.silver_version),
            r.last_run_at.clone().unwrap_or_else(|| "-".into()),
            r.problem.clone().unwrap_or_else(|| note(r))
        );
    }
    Ok(0)
}

/// The NOTE of a flow without a problem: the watermark's snapshot id, merge-on-read and
/// the share of stored rows marked deleted.
fn note(r: &smelt_engine::status::FlowStatus) -> String {
    let mut notes = Vec::new();
    if let Some(id) = r.watermark_snapshot_id {
        notes.push(format!("watermark = snapshot {id}"));
    }
    if r.write_mode.as_deref() == Some("merge_on_read") {
        notes.push("merge_on_read".to_string());
    }
    if let Some(f) = r.deleted_fraction.filter(|f| *f > 0.0) {
        notes.push(format!("{:.1}% of stored rows marked deleted", f * 100.0));
    }
    notes.join("; ")
}
