//! The engine's [`Lake`] port on an Iceberg catalog: the tables named
//! `catalog.namespace.table`.

use async_trait::async_trait;
use smelt_engine::ports::{ChangeSource, EventLog, Lake, SilverTable, SourceOptions, TableRole};
use smelt_engine::report::FlowEvent;
use smelt_engine::{EngineError, Result};
use smelt_spec::TableName;

use crate::catalog::IcebergCatalog;
use crate::source::IcebergSource;

/// The tables of one Iceberg catalog.
#[derive(Debug)]
pub struct IcebergLake {
    catalog: IcebergCatalog,
}

impl IcebergLake {
    /// The tables of `catalog`.
    pub fn new(catalog: IcebergCatalog) -> Self {
        IcebergLake { catalog }
    }

    /// The catalog.
    pub fn catalog(&self) -> &IcebergCatalog {
        &self.catalog
    }

    fn not_writable(&self, name: &TableName) -> EngineError {
        EngineError::user(
            format!("`{name}`: smelt reads Iceberg tables but does not write them yet"),
            "write the flow's table to the Delta lake (`schema.table`)",
        )
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

    async fn table(&self, name: &TableName, _role: TableRole) -> Result<Box<dyn SilverTable>> {
        Err(self.not_writable(name))
    }

    async fn inspect(&self, name: &TableName) -> Result<Box<dyn SilverTable>> {
        Err(self.not_writable(name))
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
