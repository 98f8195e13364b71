//! One lake of several table formats: the Delta tables of the lake, and the tables of named
//! catalogs (`catalog.namespace.table`), each behind its own [`Lake`].

use async_trait::async_trait;
use smelt_spec::TableName;

use super::{ChangeSource, EventLog, Lake, LakeTable, SourceOptions, TableRole, TableView};
use crate::{EngineError, Result};

/// Routes each table to the lake that holds it: a name with a catalog to that catalog's
/// lake, any other to the default lake (which also keeps the event log).
pub struct Catalogs<'a> {
    lake: &'a dyn Lake,
    catalogs: Vec<(String, &'a dyn Lake)>,
}

impl<'a> Catalogs<'a> {
    /// `lake` for tables without a catalog, and nothing else yet.
    pub fn new(lake: &'a dyn Lake) -> Self {
        Catalogs {
            lake,
            catalogs: Vec::new(),
        }
    }

    /// Adds catalog `name`, whose tables `lake` holds.
    pub fn with(mut self, name: impl Into<String>, lake: &'a dyn Lake) -> Self {
        self.catalogs.push((name.into(), lake));
        self
    }

    fn route(&self, name: &TableName) -> Result<&dyn Lake> {
        let Some(catalog) = &name.catalog else {
            return Ok(self.lake);
        };
        self.catalogs
            .iter()
            .find(|(n, _)| n == catalog)
            .map(|(_, l)| *l)
            .ok_or_else(|| {
                EngineError::user(
                    format!("`{name}` names catalog `{catalog}`, which is not open"),
                    "define it under `catalogs:` in the pipeline file",
                )
            })
    }
}

#[async_trait]
impl Lake for Catalogs<'_> {
    async fn source(
        &self,
        name: &TableName,
        options: SourceOptions,
    ) -> Result<Box<dyn ChangeSource>> {
        self.route(name)?.source(name, options).await
    }

    async fn table(&self, name: &TableName, role: TableRole) -> Result<Box<dyn LakeTable>> {
        self.route(name)?.table(name, role).await
    }

    async fn inspect(&self, name: &TableName) -> Result<Box<dyn TableView>> {
        self.route(name)?.inspect(name).await
    }

    fn event_log(&self) -> &dyn EventLog {
        self.lake.event_log()
    }
}
