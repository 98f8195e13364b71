//! The watermark of a Delta table: the flow's `txn` action (application id and source
//! version), committed with the data, and the commit info beside it (run id, flow, source
//! version, report, the flow's ledger entries), on the keys of
//! [`smelt_engine::ports::keys`]; read back as the watermark, the ledgers and the last
//! commit.

use async_trait::async_trait;
use deltalake::kernel::Action;
use deltalake::kernel::Transaction;
use deltalake::kernel::transaction::CommitProperties;
use smelt_engine::ports::{LastCommit, Watermark, WatermarkStore, keys};

use super::DeltaLakeTable;
use crate::error::{Context, Result};

/// How many maintenance commits `last_commit` passes over at most.
const MAINTENANCE_LOOKBACK: u64 = 100;

impl DeltaLakeTable {
    /// The commit properties of a commit carrying `watermark`.
    pub(super) fn commit_properties(watermark: &Watermark, derived: bool) -> CommitProperties {
        // One `with_metadata` call: a second one would replace the first.
        let mut metadata = vec![
            (
                keys::RUN_ID.to_string(),
                serde_json::json!(watermark.run_id),
            ),
            (keys::FLOW.to_string(), serde_json::json!(watermark.app_id)),
            (
                keys::SOURCE_VERSION.to_string(),
                serde_json::json!(watermark.version),
            ),
        ];
        if let Some(report) = &watermark.report {
            metadata.push((keys::REPORT.to_string(), serde_json::json!(report)));
        }
        if derived {
            metadata.push((keys::CHANGE_DATA.to_string(), serde_json::json!("derived")));
        }
        for (key, value) in &watermark.extra {
            metadata.push((key.clone(), serde_json::json!(value)));
        }
        // No retry over another writer's commit: this commit was planned on the version it
        // read (lookups, rewritten files, the watermark), so a commit that landed since
        // makes it wrong, not late. The run fails and a rerun starts from the new version.
        CommitProperties::default()
            .with_application_transaction(Transaction::new(&watermark.app_id, watermark.version))
            .with_metadata(metadata)
            .with_max_retries(0)
    }

    /// The latest silver commit, if any, passing over maintenance commits (optimize,
    /// vacuum, expiry, widening): the last commit that wrote data, whose run and report the
    /// event log and `smelt status` want.
    pub(super) async fn last_commit(&self) -> Result<Option<LastCommit>> {
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let Some(latest) = table.version() else {
            return Ok(None);
        };
        let mut first = None;
        for version in (latest.saturating_sub(MAINTENANCE_LOOKBACK)..=latest).rev() {
            let Some(actions) = self.actions_at(table, version).await? else {
                break;
            };
            let info = actions.into_iter().find_map(|a| match a {
                Action::CommitInfo(info) => Some(info),
                _ => None,
            });
            let Some(info) = info else {
                continue;
            };
            let text = |k: &str| {
                info.info
                    .get(k)
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
            };
            let Some(at_ms) = info.in_commit_timestamp.or(info.timestamp) else {
                continue;
            };
            let commit = LastCommit {
                at_ms,
                run_id: text(keys::RUN_ID),
                report: text(keys::REPORT),
            };
            let maintenance = info.info.contains_key(keys::OPERATION)
                || matches!(
                    info.operation.as_deref(),
                    Some("OPTIMIZE" | "VACUUM START" | "VACUUM END")
                );
            if !maintenance {
                return Ok(Some(commit));
            }
            first.get_or_insert(commit);
        }
        Ok(first)
    }
}

#[async_trait]
impl WatermarkStore for DeltaLakeTable {
    async fn watermark(&self, app_id: &str) -> smelt_engine::Result<Option<i64>> {
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        Ok(snapshot
            .transaction_version(table.log_store().as_ref(), app_id)
            .await
            .context(|| format!("reading the watermark of `{}`", self.name))?)
    }

    async fn last_commit(&self) -> smelt_engine::Result<Option<LastCommit>> {
        Ok(self.last_commit().await?)
    }

    async fn commit_values(&self, key: &str) -> smelt_engine::Result<Vec<String>> {
        let Some(table) = &self.table else {
            return Ok(Vec::new());
        };
        let place = crate::ledger::Place::of(&self.lake, &self.name, table);
        Ok(crate::ledger::values(&place, table, &self.name, key).await?)
    }
}
