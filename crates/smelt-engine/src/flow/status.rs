//! Where one flow stands ([`FlowStatus`], a row of `smelt status`), and the part of it a
//! flow that writes a table reads from that table ([`of_written_table`]).

use serde::Serialize;
use smelt_spec::{Flow, FlowKind, IngestFlow, TableName, WriteMode};

use super::LakeCx;
use super::ingest::ledger::files_waiting;
use crate::Result;
use crate::context::app_id;

/// Where one flow stands.
#[derive(Debug, Serialize)]
pub struct FlowStatus {
    /// Flow name.
    pub flow: String,
    /// What it reads.
    pub from: String,
    /// What it writes.
    pub into: String,
    /// The source version applied (export: exported) so far.
    pub watermark: Option<i64>,
    /// The source's own id of the watermark version, where it has one (Iceberg: the
    /// snapshot id; the version is its sequence number).
    pub watermark_snapshot_id: Option<i64>,
    /// The source's version now.
    pub bronze_version: Option<i64>,
    /// Source versions not applied yet.
    pub versions_behind: Option<i64>,
    /// Ingest flows: files in the folder not loaded yet.
    pub files_waiting: Option<usize>,
    /// The written table's version.
    pub silver_version: Option<i64>,
    /// When the written table last changed (UTC, `YYYY-MM-DD HH:MM:SS`).
    pub last_run_at: Option<String>,
    /// The run that changed it last.
    pub last_run_id: Option<String>,
    /// Apply flows: how replaced and deleted rows leave (`copy_on_write`, `merge_on_read`).
    pub write_mode: Option<String>,
    /// The share of the written table's stored rows that are marked deleted but still in
    /// its data files (merge-on-read), when the format says.
    pub deleted_fraction: Option<f64>,
    /// Why the flow cannot run or has not run, if so.
    pub problem: Option<String>,
}

impl FlowStatus {
    /// `flow`'s row with nothing known yet but its tables and write mode.
    pub fn of(flow: &Flow) -> Self {
        FlowStatus {
            flow: flow.name.clone(),
            from: flow.source(),
            into: flow.target(),
            watermark: None,
            watermark_snapshot_id: None,
            bronze_version: None,
            versions_behind: None,
            files_waiting: None,
            silver_version: None,
            last_run_at: None,
            last_run_id: None,
            write_mode: match &flow.kind {
                FlowKind::Apply(spec) => Some(
                    match spec.write_mode {
                        WriteMode::CopyOnWrite => "copy_on_write",
                        WriteMode::MergeOnRead => "merge_on_read",
                    }
                    .to_string(),
                ),
                _ => None,
            },
            deleted_fraction: None,
            problem: None,
        }
    }

    /// The row with how many source versions it is behind.
    pub fn with_lag(mut self) -> Self {
        self.versions_behind = match (self.bronze_version, self.watermark) {
            (Some(b), Some(w)) => Some(b - w),
            (Some(b), None) => Some(b + 1),
            _ => None,
        };
        self
    }
}

/// The status of a flow that writes `table`, reading files from `landing` if any.
pub(crate) async fn of_written_table(
    cx: &LakeCx<'_>,
    table: &TableName,
    landing: Option<&IngestFlow>,
    row: &mut FlowStatus,
) -> Result<()> {
    let output = cx.lake.inspect(table).await?;
    if let Some(landing) = landing.filter(|f| cx.files.landing_missing(f)) {
        row.problem = Some(format!(
            "no files yet: `{}` does not exist",
            landing.folder.display()
        ));
    } else if let Some(landing) = landing {
        let waiting = async {
            let files = cx.files.landing(landing)?;
            files_waiting(landing, &*files, &*output).await
        };
        match waiting.await {
            Ok(n) => row.files_waiting = Some(n),
            Err(e) => row.problem = Some(e.to_string()),
        }
    }
    if output.schema().is_some() {
        row.silver_version = output.version();
        row.watermark = output.watermark(&app_id(&row.flow)).await?;
        row.deleted_fraction = output
            .deleted_rows()
            .await?
            .map(|(deleted, rows)| match rows {
                0 => 0.0,
                _ => deleted as f64 / rows as f64,
            });
        if let Some(last) = output.last_commit().await? {
            row.last_run_at = utc_text(last.at_ms);
            row.last_run_id = last.run_id;
        }
    } else if row.problem.is_none() {
        row.problem = Some(format!("`{table}` not created yet: run `smelt run`"));
    }
    Ok(())
}

/// `ms` since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn utc_text(ms: i64) -> Option<String> {
    let secs = ms.div_euclid(1000);
    let nanos = (ms.rem_euclid(1000) * 1_000_000) as u32;
    chrono::DateTime::from_timestamp(secs, nanos).map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
}
