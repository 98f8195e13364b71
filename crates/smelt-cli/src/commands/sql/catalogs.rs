//! The pipeline's Iceberg catalogs as `smelt sql` reads them: each opened when a statement
//! first names one of its tables, so that a catalog out of reach does not stop queries
//! over the lake.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use async_trait::async_trait;
use smelt_delta::sql::catalogs::{AsOf, CatalogTables, Describe};
use smelt_engine::EngineError;
use smelt_engine::ports::ChangeSource;
use smelt_iceberg::IcebergLake;
use smelt_spec::{Catalog, TableName, did_you_mean};

/// The catalogs of a pipeline file.
pub struct PipelineCatalogs {
    file: String,
    specs: Vec<Catalog>,
    opened: tokio::sync::Mutex<HashMap<String, Arc<IcebergLake>>>,
    /// Their stores' timeouts and retries.
    storage: smelt_spec::StoreSettings,
}

impl PipelineCatalogs {
    /// The catalogs defined in `file`.
    pub fn new(file: String, specs: Vec<Catalog>, storage: smelt_spec::StoreSettings) -> Self {
        PipelineCatalogs {
            file,
            specs,
            opened: Default::default(),
            storage,
        }
    }

    /// The catalog holding `name`, opened.
    async fn lake(&self, name: &TableName) -> smelt_engine::Result<Arc<IcebergLake>> {
        let catalog = name.catalog.as_deref().unwrap_or_default();
        let mut opened = self.opened.lock().await;
        if let Some(lake) = opened.get(catalog) {
            return Ok(Arc::clone(lake));
        }
        let Some(spec) = self.specs.iter().find(|c| c.name == catalog) else {
            let names = self.specs.iter().map(|c| c.name.as_str());
            let hint = match did_you_mean(catalog, names.clone()) {
                Some(near) => format!("did you mean `{near}`?"),
                None if self.specs.is_empty() => format!(
                    "define it under `catalogs:` in {} (or name the pipeline file with --pipeline)",
                    self.file
                ),
                None => format!(
                    "catalogs in {}: {}",
                    self.file,
                    names.collect::<Vec<_>>().join(", ")
                ),
            };
            return Err(EngineError::user(
                format!(
                    "`{name}` names catalog `{catalog}`, which {} does not define",
                    self.file
                ),
                hint,
            ));
        };
        let lake = Arc::new(IcebergLake::new(
            smelt_iceberg::IcebergCatalog::open(spec, &self.storage).await?,
        ));
        opened.insert(catalog.to_string(), Arc::clone(&lake));
        Ok(lake)
    }
}

#[async_trait]
impl CatalogTables for PipelineCatalogs {
    async fn rows(
        &self,
        name: &TableName,
        at: Option<&AsOf>,
    ) -> smelt_engine::Result<Box<dyn ChangeSource>> {
        use smelt_iceberg::inspect::AsOf as Snapshot;
        let at = at.map(|a| match a {
            AsOf::Version(id) => Snapshot::Snapshot(*id),
            AsOf::Time(t) => Snapshot::Time(t.timestamp_millis()),
        });
        Ok(Box::new(self.lake(name).await?.rows(name, at).await?))
    }

    async fn describe(
        &self,
        name: &TableName,
        what: Describe,
    ) -> smelt_engine::Result<RecordBatch> {
        let lake = self.lake(name).await?;
        Ok(match what {
            Describe::Columns => lake.columns(name).await?,
            Describe::History(limit) => lake.history(name, limit).await?,
            Describe::Properties => lake.properties(name).await?,
        })
    }
}
