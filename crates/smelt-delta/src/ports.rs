//! The engine's [`Lake`](smelt_engine::ports::Lake) and
//! [`EventLog`](smelt_engine::ports::EventLog) ports on a folder of Delta tables: each role
//! decides how its table is opened (what a source reads, what a write may compact).

use async_trait::async_trait;
use smelt_engine::ports::{ChangeSource, EventLog, LakeTable, SourceOptions, TableRole, TableView};
use smelt_engine::report::FlowEvent;
use smelt_spec::TableName;

use crate::Lake;
use crate::source::DeltaSource;
use crate::table::DeltaLakeTable;

#[async_trait]
impl smelt_engine::ports::Lake for Lake {
    async fn source(
        &self,
        name: &TableName,
        options: SourceOptions,
    ) -> smelt_engine::Result<Box<dyn ChangeSource>> {
        let source = DeltaSource::open(self, name)
            .await?
            .with_removed_files(options.removed_rows);
        Ok(Box::new(source))
    }

    async fn table(
        &self,
        name: &TableName,
        role: TableRole,
    ) -> smelt_engine::Result<Box<dyn LakeTable>> {
        let table = DeltaLakeTable::open_for_write(self, name).await?;
        Ok(Box::new(match role {
            // Bronze files keep the order they were loaded in: the row order downstream
            // flows read.
            TableRole::Bronze => table.without_compaction(),
            TableRole::Silver | TableRole::Tombstones | TableRole::Rejects | TableRole::Target => {
                table
            }
        }))
    }

    async fn inspect(&self, name: &TableName) -> smelt_engine::Result<Box<dyn TableView>> {
        Ok(Box::new(DeltaLakeTable::open(self, name).await?))
    }

    fn event_log(&self) -> &dyn EventLog {
        self
    }
}

#[async_trait]
impl EventLog for Lake {
    async fn append(&self, events: &[FlowEvent]) -> smelt_engine::Result<()> {
        Ok(crate::event_log::append(self, events).await?)
    }

    async fn has_run(&self, run_id: &str, flow: &str) -> smelt_engine::Result<bool> {
        Ok(crate::event_log::has_run(self, run_id, flow).await?)
    }
}
