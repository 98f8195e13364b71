use std::path::{Path, PathBuf};
use std::sync::Arc;

use deltalake::DeltaTable;
use deltalake::datafusion::catalog::MemorySchemaProvider;
use deltalake::datafusion::common::TableReference;
use deltalake::datafusion::prelude::{SessionConfig, SessionContext};
use deltalake::logstore::{ObjectStoreRef, StorageConfig, logstore_for};
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use smelt_spec::TableName;
use url::Url;

use crate::error::{Context, Error, Result};

/// A lake: Delta tables at `<root>/<schema>/<table>`, the root a local folder or a
/// storage URL (`s3://bucket/prefix`, `gs://…`, `az://…`, `abfss://…`). Stores are opened
/// by delta-rs, credentials and options from the environment (`AWS_*`, `GOOGLE_*`,
/// `AZURE_*`).
#[derive(Debug, Clone)]
pub struct Lake {
    /// The root as a directory URL (ends with `/`).
    root: Url,
    /// The root folder of a local lake.
    local: Option<PathBuf>,
}

impl Lake {
    /// A lake in the local folder `root` (it need not exist yet).
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let root = std::path::absolute(root.as_ref()).map_err(|source| Error::Io {
            context: format!("resolving lake path `{}`", root.as_ref().display()),
            source,
        })?;
        let url = Url::from_directory_path(&root).map_err(|_| {
            Error::user(
                format!("cannot make a URL of `{}`", root.display()),
                "use a plain local path for `lake`",
            )
        })?;
        Ok(Self {
            root: url,
            local: Some(root),
        })
    }

    /// The lake at `location`: a local folder, or a storage URL (`file://` URLs are local
    /// folders).
    pub fn at(location: &str) -> Result<Self> {
        if !location.contains("://") {
            return Self::new(location);
        }
        smelt_spec::check_lake_url(location).map_err(|m| {
            Error::user(
                m,
                "use a local folder, or an `s3://`, `gs://`, `az://`, `abfss://` or `file://` URL",
            )
        })?;
        let mut url = Url::parse(location).map_err(|e| {
            Error::user(
                format!("`{location}` is not a valid URL: {e}"),
                "write it as `s3://bucket/prefix`",
            )
        })?;
        if url.scheme() == "file" {
            let path = url.to_file_path().map_err(|_| {
                Error::user(
                    format!("`{location}` is not a local path"),
                    "write a local lake as `file:///absolute/folder` or as a plain path",
                )
            })?;
            return Self::new(path);
        }
        if !url.path().ends_with('/') {
            url.set_path(&format!("{}/", url.path()));
        }
        Ok(Self {
            root: url,
            local: None,
        })
    }

    /// The lake root, as a directory URL.
    pub fn root_url(&self) -> &Url {
        &self.root
    }

    /// The root folder of a local lake, `None` for a lake on an object store.
    pub fn local_root(&self) -> Option<&Path> {
        self.local.as_deref()
    }

    /// Where a table is, for messages: its folder (local) or URL.
    pub fn location(&self, name: &TableName) -> String {
        match &self.local {
            Some(root) => root
                .join(&name.schema)
                .join(&name.table)
                .display()
                .to_string(),
            None => self
                .root
                .join(&format!("{}/{}", name.schema, name.table))
                .map(|u| u.to_string())
                .unwrap_or_default(),
        }
    }

    /// URL of a table (a directory URL).
    pub fn table_url(&self, name: &TableName) -> Result<Url> {
        self.root
            .join(&format!("{}/{}/", name.schema, name.table))
            .map_err(|e| {
                Error::user(
                    format!(
                        "cannot make a URL of table `{name}` under `{}`: {e}",
                        self.root
                    ),
                    "use plain schema and table names",
                )
            })
    }

    /// Makes the folder of a table of a local lake (delta-rs writes a new local table only
    /// into an existing folder); nothing to do on an object store.
    pub fn prepare(&self, name: &TableName) -> Result<()> {
        if let Some(root) = &self.local {
            let path = root.join(&name.schema).join(&name.table);
            std::fs::create_dir_all(&path).map_err(|source| Error::Io {
                context: format!("creating `{}`", path.display()),
                source,
            })?;
        }
        Ok(())
    }

    /// The store at the lake root.
    fn store(&self) -> Result<ObjectStoreRef> {
        let log_store = logstore_for(&self.root, StorageConfig::default())
            .context(|| format!("opening the lake `{}`", self.root))?;
        Ok(log_store.object_store(None))
    }

    /// True when a Delta table exists at the table's place.
    pub async fn exists(&self, name: &TableName) -> Result<bool> {
        if let Some(root) = &self.local {
            return Ok(root
                .join(&name.schema)
                .join(&name.table)
                .join("_delta_log")
                .is_dir());
        }
        let store = self.store()?;
        let log = ObjectPath::from(format!("{}/{}/_delta_log", name.schema, name.table));
        let first = store.list(Some(&log)).next().await;
        match first {
            None => Ok(false),
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(Error::Store {
                context: format!("looking for table `{name}` at {}", self.location(name)),
                source: e,
            }),
        }
    }

    /// Opens a table at its latest version; `None` when it does not exist.
    pub async fn open(&self, name: &TableName) -> Result<Option<DeltaTable>> {
        if !self.exists(name).await? {
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
                    self.location(name)
                ),
                hint.to_string(),
            )
        })
    }

    /// Every table in the lake, sorted.
    pub async fn tables(&self) -> Result<Vec<TableName>> {
        let mut out = Vec::new();
        if let Some(root) = &self.local {
            let Ok(schemas) = std::fs::read_dir(root) else {
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
        } else {
            let store = self.store()?;
            let listing = |e: object_store::Error| Error::Store {
                context: format!("listing the lake `{}`", self.root),
                source: e,
            };
            let schemas = store.list_with_delimiter(None).await.map_err(listing)?;
            for schema in schemas.common_prefixes {
                let tables = store
                    .list_with_delimiter(Some(&schema))
                    .await
                    .map_err(listing)?;
                for table in tables.common_prefixes {
                    let (Some(s), Some(t)) = (schema.filename(), table.filename()) else {
                        continue;
                    };
                    if let Some(name) = TableName::parse(&format!("{s}.{t}"))
                        && self.exists(&name).await?
                    {
                        out.push(name);
                    }
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
        for name in self.tables().await? {
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
