//! The engine's [`Lake`] port on an Iceberg catalog: the tables named
//! `catalog.namespace.table`.

use std::sync::Arc;

use async_trait::async_trait;
use smelt_engine::ports::{
    ChangeSource, EventLog, Lake, LakeTable, SourceOptions, TableRole, TableView,
};
use smelt_engine::report::FlowEvent;
use smelt_engine::{EngineError, Result};
use smelt_spec::TableName;

use crate::catalog::IcebergCatalog;
use crate::source::IcebergSource;
use crate::table::IcebergTable;

/// The tables of one Iceberg catalog.
#[derive(Debug)]
pub struct IcebergLake {
    catalog: Arc<IcebergCatalog>,
}

impl IcebergLake {
    /// The tables of `catalog`.
    pub fn new(catalog: IcebergCatalog) -> Self {
        IcebergLake {
            catalog: Arc::new(catalog),
        }
    }

    /// The catalog.
    pub fn catalog(&self) -> &IcebergCatalog {
        &self.catalog
    }

    /// Table `name`, opened to write or inspect.
    async fn open(&self, name: &TableName) -> Result<IcebergTable> {
        let table = self.catalog.load(name).await?;
        Ok(IcebergTable::new(
            name.clone(),
            self.catalog.clone(),
            table,
        )?)
    }
}

#[async_trait]
impl Lake for IcebergLake {
    async fn source(
        &self,
        name: &TableName,
        options: SourceOptions,
    ) -> Result<Box<dyn ChangeSource>> {
        let Some(table) = self.catalog.load(name).await? else {
            return Err(EngineError::TableNotFound {
                table: name.to_string(),
                location: format!("Iceberg catalog `{}`", self.catalog.name()),
                hint: "create it first, or check the namespace and table name".into(),
            });
        };
        Ok(Box::new(IcebergSource::new(
            name.clone(),
            table,
            options.removed_rows,
        )?))
    }

    async fn table(&self, name: &TableName, _role: TableRole) -> Result<Box<dyn LakeTable>> {
        // Every role, bronze included: an ingest flow's file ledger is kept beside the
        // table (`ledger`), where snapshot expiry cannot lose it.
        Ok(Box::new(self.open(name).await?))
    }

    async fn inspect(&self, name: &TableName) -> Result<Box<dyn TableView>> {
        Ok(Box::new(self.open(name).await?))
    }

    fn event_log(&self) -> &dyn EventLog {
        self
    }
}

/// The event log stays in the Delta lake; a catalog has none.
#[async_trait]
impl EventLog for IcebergLake {
    async fn append(&self, _events: &[FlowEvent]) -> Result<()> {
        Err(EngineError::Internal(format!(
            "the event log is kept in the Delta lake, not in catalog `{}`",
            self.catalog.name()
        )))
    }

    async fn has_run(&self, _run_id: &str, _flow: &str) -> Result<bool> {
        Ok(false)
    }
}
