//! The lake: where a pipeline's tables live.

use async_trait::async_trait;
use smelt_spec::TableName;

use super::{ChangeSource, EventLog, LakeTable, TableView};
use crate::Result;

/// What a flow writes a table as: the adapter picks its write policy from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableRole {
    /// An apply flow's silver table.
    Silver,
    /// An apply flow's tombstones.
    Tombstones,
    /// A flow's rejects (quarantined rows).
    Rejects,
    /// An ingest flow's bronze table: append-only, its files never compacted (their order is
    /// the row order downstream flows read).
    Bronze,
    /// An append or replace_where flow's target.
    Target,
}

/// How a flow reads a source.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceOptions {
    /// Also read the rows deleted without change data as `delete` changes
    /// (`source_deletes: apply`).
    pub removed_rows: bool,
}

/// A lake of tables. One per run; the engine gets every table through it.
#[async_trait]
pub trait Lake: Send + Sync {
    /// The changes of table `name`, pinned at its latest version. Fails when it does not
    /// exist or cannot be read right.
    async fn source(
        &self,
        name: &TableName,
        options: SourceOptions,
    ) -> Result<Box<dyn ChangeSource>>;
    /// Table `name`, to write as `role` (it may not exist yet). Fails when the table has
    /// features a write would break.
    async fn table(&self, name: &TableName, role: TableRole) -> Result<Box<dyn LakeTable>>;
    /// Table `name`, to inspect (`smelt status`, a check): read-only.
    async fn inspect(&self, name: &TableName) -> Result<Box<dyn TableView>>;
    /// The run event log.
    fn event_log(&self) -> &dyn EventLog;
}
