use std::path::{Path, PathBuf};
use std::sync::Arc;

use deltalake::DeltaTable;
use deltalake::datafusion::catalog::MemorySchemaProvider;
use deltalake::datafusion::common::TableReference;
use deltalake::datafusion::prelude::{SessionConfig, SessionContext};
use smelt_spec::TableName;
use url::Url;

use crate::error::{Context, Error, Result};

/// A lake: a local folder holding Delta tables at `<root>/<schema>/<table>`.
#[derive(Debug, Clone)]
pub struct Lake {
    root: PathBuf,
}

impl Lake {
    /// A lake rooted at `root` (it need not exist yet).
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let root = std::path::absolute(root.as_ref()).map_err(|source| Error::Io {
            context: format!("resolving lake path `{}`", root.as_ref().display()),
            source,
        })?;
        Ok(Self { root })
    }

    /// The lake root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Folder of a table.
    pub fn table_path(&self, name: &TableName) -> PathBuf {
        self.root.join(&name.schema).join(&name.table)
    }

    /// URL of a table (a directory URL).
    pub fn table_url(&self, name: &TableName) -> Result<Url> {
        Url::from_directory_path(self.table_path(name)).map_err(|_| {
            Error::user(
                format!("cannot make a URL of `{}`", self.table_path(name).display()),
                "use a plain local path for `lake`",
            )
        })
    }

    /// True when a Delta table exists at the table's folder.
    pub fn exists(&self, name: &TableName) -> bool {
        self.table_path(name).join("_delta_log").is_dir()
    }

    /// Opens a table at its latest version; `None` when it does not exist.
    pub async fn open(&self, name: &TableName) -> Result<Option<DeltaTable>> {
        if !self.exists(name) {
            return Ok(None);
        }
        let url = self.table_url(name)?;
        match deltalake::open_table(url).await {
            Ok(t) => Ok(Some(t)),
            Err(deltalake::DeltaTableError::NotATable(_)) => Ok(None),
            Err(e) => Err(e).context(|| format!("opening table `{name}`")),
        }
    }

    /// Opens a table that must exist.
    pub async fn open_existing(&self, name: &TableName, hint: &str) -> Result<DeltaTable> {
        self.open(name).await?.ok_or_else(|| {
            Error::user(
                format!(
                    "table `{name}` does not exist (looked in {})",
                    self.table_path(name).display()
                ),
                hint.to_string(),
            )
        })
    }

    /// Every table in the lake, sorted.
    pub fn tables(&self) -> Result<Vec<TableName>> {
        let mut out = Vec::new();
        let Ok(schemas) = std::fs::read_dir(&self.root) else {
            return Ok(out);
        };
        for schema in schemas.flatten() {
            let Ok(tables) = std::fs::read_dir(schema.path()) else {
                continue;
            };
            for table in tables.flatten() {
                if table.path().join("_delta_log").is_dir()
                    && let (Some(s), Some(t)) =
                        (schema.file_name().to_str(), table.file_name().to_str())
                    && let Some(name) = TableName::parse(&format!("{s}.{t}"))
                {
                    out.push(name);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// A DataFusion session with every lake table registered as `schema.table`.
    pub async fn session(&self) -> Result<SessionContext> {
        let config = SessionConfig::new()
            .set_str("datafusion.sql_parser.dialect", "BigQuery")
            .set_bool("datafusion.sql_parser.enable_ident_normalization", false)
            .set_bool(
                "datafusion.execution.parquet.schema_force_view_types",
                false,
            );
        let ctx = SessionContext::new_with_config(config);
        let catalog = ctx.catalog("datafusion").expect("default catalog");
        for name in self.tables()? {
            if catalog.schema(&name.schema).is_none() {
                catalog
                    .register_schema(&name.schema, Arc::new(MemorySchemaProvider::new()))
                    .context(|| format!("registering schema `{}`", name.schema))?;
            }
            let Some(table) = self.open(&name).await? else {
                continue;
            };
            table
                .update_datafusion_session(&ctx.state())
                .context(|| format!("registering `{name}`"))?;
            let provider = table
                .table_provider()
                .await
                .context(|| format!("scanning `{name}`"))?;
            ctx.register_table(
                TableReference::partial(name.schema.as_str(), name.table.as_str()),
                provider,
            )
            .context(|| format!("registering `{name}`"))?;
        }
        Ok(ctx)
    }
}
