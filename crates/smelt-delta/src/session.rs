//! The DataFusion session over a lake (`smelt sql`, the event log): every schema of the
//! lake a provider that opens a table when a query names it. A query reads only the tables
//! it names, so a damaged table fails the queries that read it and no other, and a lake of
//! many tables does not open each one per query.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use deltalake::datafusion::catalog::{SchemaProvider, TableProvider};
use deltalake::datafusion::error::{DataFusionError, Result as DfResult};
use deltalake::datafusion::execution::SessionStateBuilder;
use deltalake::datafusion::execution::runtime_env::RuntimeEnv;
use deltalake::datafusion::prelude::{SessionConfig, SessionContext};
use smelt_engine::EngineError;
use smelt_spec::TableName;

use crate::Lake;
use crate::error::{Context, Result};

impl Lake {
    /// A DataFusion session with every lake table known as `schema.table`, each opened when
    /// a query names it.
    pub async fn session(&self) -> Result<SessionContext> {
        let config = SessionConfig::new()
            .set_str("datafusion.sql_parser.dialect", "BigQuery")
            .set_bool("datafusion.sql_parser.enable_ident_normalization", false)
            .set_bool(
                "datafusion.execution.parquet.schema_force_view_types",
                false,
            );
        let ctx = SessionContext::new_with_config(config);
        crate::sql::safe_cast::register(&ctx);
        let mut schemas: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for name in self.tables().await? {
            schemas.entry(name.schema).or_default().push(name.table);
        }
        let catalog = ctx.catalog("datafusion").expect("default catalog");
        for (schema, tables) in schemas {
            let provider = LakeSchema {
                lake: self.clone(),
                schema: schema.clone(),
                tables,
                runtime: ctx.runtime_env(),
                opened: Mutex::new(HashMap::new()),
            };
            catalog
                .register_schema(&schema, Arc::new(provider))
                .context(|| format!("registering schema `{schema}`"))?;
        }
        Ok(ctx)
    }
}

/// One schema of a lake: its tables, opened when first named.
#[derive(Debug)]
struct LakeSchema {
    lake: Lake,
    schema: String,
    /// The tables the lake holds in this schema.
    tables: Vec<String>,
    /// The session's runtime, where each opened table's store is registered.
    runtime: Arc<RuntimeEnv>,
    /// Tables opened, and tables registered in this schema by the session.
    opened: Mutex<HashMap<String, Arc<dyn TableProvider>>>,
}

impl LakeSchema {
    async fn open(&self, table: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let name = TableName {
            catalog: None,
            schema: self.schema.clone(),
            table: table.to_string(),
        };
        let Some(delta) = self.lake.open(&name).await? else {
            return Ok(None);
        };
        // The table's store, where the session's scans find its files.
        let state = SessionStateBuilder::new()
            .with_runtime_env(Arc::clone(&self.runtime))
            .build();
        delta
            .update_datafusion_session(&state)
            .context(|| format!("registering `{name}`"))?;
        Ok(Some(crate::sql::snapshot::delta(&name, delta).await?))
    }

    fn opened(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<dyn TableProvider>>> {
        self.opened.lock().expect("not poisoned")
    }
}

#[async_trait]
impl SchemaProvider for LakeSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.tables.clone();
        names.extend(
            self.opened()
                .keys()
                .filter(|k| !self.tables.contains(k))
                .cloned(),
        );
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(provider) = self.opened().get(name) {
            return Ok(Some(Arc::clone(provider)));
        }
        if !self.tables.iter().any(|t| t == name) {
            return Ok(None);
        }
        let provider = self
            .open(name)
            .await
            .map_err(|e| DataFusionError::External(Box::new(EngineError::from(e))))?;
        if let Some(provider) = &provider {
            self.opened().insert(name.to_string(), Arc::clone(provider));
        }
        Ok(provider)
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(self.opened().insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(self.opened().remove(name))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.tables.iter().any(|t| t == name) || self.opened().contains_key(name)
    }
}

/// The engine error a DataFusion error carries (a table that could not be opened while a
/// query was planned: its own message and hint, not DataFusion's wrapping), or the
/// DataFusion error as it was.
pub(crate) fn into_engine(e: DataFusionError) -> std::result::Result<EngineError, DataFusionError> {
    match e {
        DataFusionError::External(inner) => match inner.downcast::<EngineError>() {
            Ok(engine) => Ok(*engine),
            Err(inner) => Err(DataFusionError::External(inner)),
        },
        DataFusionError::Context(context, inner) => {
            into_engine(*inner).map_err(|e| DataFusionError::Context(context, Box::new(e)))
        }
        DataFusionError::Diagnostic(diagnostic, inner) => {
            into_engine(*inner).map_err(|e| DataFusionError::Diagnostic(diagnostic, Box::new(e)))
        }
        other => Err(other),
    }
}
