//! The event log: one row per flow run, appended after the run.

use async_trait::async_trait;

use crate::Result;
use crate::report::FlowEvent;

/// Where a run's events go (Delta: the `_smelt.event_log` table of the lake).
#[async_trait]
pub trait EventLog: Send + Sync {
    /// Appends `events` in one commit.
    async fn append(&self, events: &[FlowEvent]) -> Result<()>;
    /// Whether the log has a row of flow `flow` in run `run_id`.
    async fn has_run(&self, run_id: &str, flow: &str) -> Result<bool>;
}
