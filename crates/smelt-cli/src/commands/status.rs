//! `smelt status`: watermark, bronze version and lag per flow.

use serde::Serialize;
use smelt_delta::silver::DeltaSilver;
use smelt_delta::source::DeltaSource;
use smelt_engine::apply::app_id;
use smelt_engine::ports::{ChangeSource, SilverTable};
use smelt_ingest::export::export_state;
use smelt_ingest::files::Landing;
use smelt_ingest::flow::{loaded_files, plan_files};
use smelt_spec::{FlowKind, ReplaceSource};

use super::{load_pipeline, open_lake, select};
use crate::args::{GlobalArgs, StatusArgs};
use crate::failure::Failure;

#[derive(Debug, Serialize)]
struct FlowStatus {
    flow: String,
    from: String,
    into: String,
    watermark: Option<i64>,
    bronze_version: Option<i64>,
    versions_behind: Option<i64>,
    /// Ingest flows: files in the folder not loaded yet.
    files_waiting: Option<usize>,
    silver_version: Option<i64>,
    last_run_at: Option<String>,
    last_run_id: Option<String>,
    problem: Option<String>,
}

/// Prints the status of the selected flows.
pub async fn status(global: &GlobalArgs, args: &StatusArgs) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let flows = select(&pipeline, &args.flows)?;
    let lake = open_lake(&pipeline.lake)?;
    let mut rows = Vec::new();
    for flow in flows {
        let mut row = FlowStatus {
            flow: flow.name.clone(),
            from: flow.source(),
            into: flow.target(),
            watermark: None,
            bronze_version: None,
            versions_behind: None,
            files_waiting: None,
            silver_version: None,
            last_run_at: None,
            last_run_id: None,
            problem: None,
        };
        // The table the flow reads (its version says how far behind the flow is).
        if let Some(source) = flow.reads() {
            match DeltaSource::open(&lake, source).await {
                Ok(source) => row.bronze_version = Some(source.version()),
                Err(e) => row.problem = Some(e.to_string()),
            }
        }
        if let FlowKind::Export(export) = &flow.kind {
            if export.url.is_none() && !export.folder.exists() {
                row.problem = Some("not exported yet: run `smelt run`".into());
            } else {
                match export_state(&flow.name, export).await {
                    Ok(state) => row.watermark = state.version,
                    Err(e) => row.problem = Some(e.to_string()),
                }
            }
            rows.push(behind(row));
            continue;
        }
        let Some(table) = flow.writes() else {
            continue;
        };
        let output = DeltaSilver::open(&lake, table).await?;
        let files = match &flow.kind {
            FlowKind::Ingest(ingest) => Some(ingest),
            FlowKind::ReplaceWhere(r) => match &r.from {
                ReplaceSource::Files(f) => Some(f.as_ref()),
                ReplaceSource::Table(_) => None,
            },
            _ => None,
        };
        if let Some(files) = files.filter(|f| f.url.is_none() && !f.folder.exists()) {
            row.problem = Some(format!(
                "no files yet: `{}` does not exist",
                files.folder.display()
            ));
        } else if let Some(files) = files {
            let waiting = async {
                let landing = Landing::of(files)
                    .map_err(|e| smelt_engine::EngineError::user(e.to_string(), "fix `from:`"))?;
                let loaded = loaded_files(&output).await?;
                plan_files(&flow.name, files, &landing, &loaded, false).await
            };
            match waiting.await {
                Ok(l) => row.files_waiting = Some(l.to_load.len() + l.pending),
                Err(e) => row.problem = Some(e.to_string()),
            }
        }
        if output.schema().is_some() {
            row.silver_version = output.version();
            row.watermark = output
                .watermark(&app_id(&flow.name))
                .await
                .map_err(Failure::from)?;
            if let Some(last) = output.last_commit().await? {
                row.last_run_at = chrono_like(last.at_ms);
                row.last_run_id = last.run_id;
            }
        } else if row.problem.is_none() {
            row.problem = Some(format!("`{table}` not created yet: run `smelt run`"));
        }
        rows.push(behind(row));
    }
    if global.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("serialisable")
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
            r.problem.clone().unwrap_or_default()
        );
    }
    Ok(0)
}

/// `row` with how many source versions it is behind.
fn behind(mut row: FlowStatus) -> FlowStatus {
    row.versions_behind = match (row.bronze_version, row.watermark) {
        (Some(b), Some(w)) => Some(b - w),
        (Some(b), None) => Some(b + 1),
        _ => None,
    };
    row
}

fn chrono_like(ms: i64) -> Option<String> {
    let secs = ms.div_euclid(1000);
    let nanos = (ms.rem_euclid(1000) * 1_000_000) as u32;
    chrono::DateTime::from_timestamp(secs, nanos).map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
}
