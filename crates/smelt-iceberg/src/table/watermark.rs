//! The watermark of an Iceberg table: kept in the summary of the snapshot a flow commits
//! (with the source read, its snapshot id, the run id, the report and the flow's extra
//! entries) and in the table's properties, which outlive snapshot expiry.

use std::collections::HashMap;

use async_trait::async_trait;
use smelt_engine::ports::keys::{LEGACY_ICEBERG_RUN_ID, REPORT, RUN_ID};
use smelt_engine::ports::{LastCommit, Watermark, WatermarkStore};
use smelt_engine::{EngineError, Result as EngineResult};

use super::IcebergTable;
use smelt_engine::ports::keys::{EXTRA, SOURCE, SOURCE_SNAPSHOT, WATERMARK};

/// The snapshot summary entries of a commit with `watermark`.
pub(super) fn summary(watermark: &Watermark) -> HashMap<String, String> {
    let app = &watermark.app_id;
    let mut summary = HashMap::from([
        (format!("{WATERMARK}{app}"), watermark.version.to_string()),
        (RUN_ID.to_string(), watermark.run_id.clone()),
    ]);
    if let Some(report) = &watermark.report {
        summary.insert(REPORT.to_string(), report.clone());
    }
    for (key, value) in &watermark.extra {
        summary.insert(format!("{EXTRA}{key}"), value.clone());
    }
    if let Some(source) = &watermark.source {
        summary.insert(format!("{SOURCE}{app}"), source.table.clone());
        if let Some(id) = source.snapshot_id {
            summary.insert(format!("{SOURCE_SNAPSHOT}{app}"), id.to_string());
        }
    }
    summary
}

impl IcebergTable {
    /// The summaries of the main branch's snapshots, newest first.
    fn summaries(&self) -> Vec<HashMap<String, String>> {
        let Some(table) = &self.table else {
            return Vec::new();
        };
        let metadata = table.metadata_ref();
        let Some(current) = metadata.current_snapshot_id() else {
            return Vec::new();
        };
        iceberg::util::snapshot::ancestors_of(&metadata, current)
            .map(|s| s.summary().additional_properties.clone())
            .collect()
    }
}

#[async_trait]
impl WatermarkStore for IcebergTable {
    async fn watermark(&self, app_id: &str) -> EngineResult<Option<i64>> {
        let key = format!("{WATERMARK}{app_id}");
        let Some(table) = &self.table else {
            return Ok(None);
        };
        // The newest snapshot's first: the Spark engine sets the property in a commit of
        // its own after the snapshot (a run killed between leaves it behind); the property
        // outlives the snapshots expired.
        let value = self
            .summaries()
            .into_iter()
            .find_map(|s| s.get(&key).cloned())
            .or_else(|| table.metadata().properties().get(&key).cloned());
        value
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    EngineError::user(
                        format!("`{}`: watermark `{key}` is `{v}`, not a version", self.name),
                        format!(
                            "rebuild with `smelt run --full-refresh` (it writes `{key}` again)"
                        ),
                    )
                })
            })
            .transpose()
    }

    async fn commit_values(&self, key: &str) -> EngineResult<Vec<String>> {
        let Some(table) = &self.table else {
            return Ok(Vec::new());
        };
        let entries = crate::ledger::read(self.catalog.storage(), table, key).await?;
        Ok(entries.into_values().map(|e| e.value).collect())
    }

    async fn last_commit(&self) -> EngineResult<Option<LastCommit>> {
        let Some(snapshot) = self
            .table
            .as_ref()
            .and_then(|t| t.metadata().current_snapshot().cloned())
        else {
            return Ok(None);
        };
        let summary = &snapshot.summary().additional_properties;
        Ok(Some(last_commit_of(summary, snapshot.timestamp_ms())))
    }
}

/// The last commit a snapshot made at `at_ms` with `summary` records: its run (under the
/// key every adapter writes, or the one Iceberg summaries had before it) and report.
fn last_commit_of(summary: &HashMap<String, String>, at_ms: i64) -> LastCommit {
    LastCommit {
        at_ms,
        run_id: (summary.get(RUN_ID))
            .or_else(|| summary.get(LEGACY_ICEBERG_RUN_ID))
            .cloned(),
        report: summary.get(REPORT).cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_of_a_snapshot_is_read_under_todays_key_and_the_one_before() {
        let watermark = Watermark {
            app_id: "smelt/f".into(),
            version: 3,
            run_id: "r1".into(),
            report: Some("{}".into()),
            extra: Vec::new(),
            source: None,
        };
        // What a commit writes reads back as its run and report.
        let written = summary(&watermark);
        assert_eq!(written.get("smelt.run_id").map(String::as_str), Some("r1"));
        let last = last_commit_of(&written, 7);
        assert_eq!(last.run_id.as_deref(), Some("r1"));
        assert_eq!(last.report.as_deref(), Some("{}"));
        assert_eq!(last.at_ms, 7);
        // A snapshot smelt wrote before the keys were shared.
        let legacy = HashMap::from([("smelt.run-id".to_string(), "r0".to_string())]);
        assert_eq!(last_commit_of(&legacy, 1).run_id.as_deref(), Some("r0"));
        assert_eq!(last_commit_of(&HashMap::new(), 1).run_id, None);
    }
}
