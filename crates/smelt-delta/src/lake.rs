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
    /// Set once the store has shown it refuses a second create of one object.
    safe: Arc<tokio::sync::OnceCell<()>>,
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
            safe: Arc::default(),
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
            safe: Arc::default(),
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

    /// Checks, once per lake, that its store refuses to create an object that exists: the
    /// conditional put (`If-None-Match` on S3, preconditions on GCS and Azure) that delta-rs
    /// commits with, so that two writers can never both commit one version. A store that
    /// ignores it (some S3-compatible servers) is refused before anything is written. Local
    /// lakes commit by an atomic create-if-absent of the file system; a lake whose S3 commits
    /// go through a DynamoDB lock (`AWS_S3_LOCKING_PROVIDER=dynamodb`) needs no probe.
    pub async fn check_safe_commits(&self) -> Result<()> {
        if self.local.is_some()
            || std::env::var("AWS_S3_LOCKING_PROVIDER").is_ok_and(|p| p == "dynamodb")
        {
            return Ok(());
        }
        self.safe
            .get_or_try_init(|| async {
                use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
                let store = self.store()?;
                let probe = ObjectPath::from(format!(
                    "_smelt/probe/{}.json",
                    uuid::Uuid::new_v4()
                ));
                let create = || PutOptions {
                    mode: PutMode::Create,
                    ..PutOptions::default()
                };
                let failed = |e: object_store::Error| Error::Store {
                    context: format!("checking that `{}` supports conditional writes", self.root),
                    source: e,
                };
                let unsafe_store = |why: String| {
                    Error::user(
                        format!(
                            "the lake `{}` is on a store that {why}: two writers could both commit the same table version, so smelt does not write there",
                            self.root
                        ),
                        "use a store with conditional writes (AWS S3, GCS, Azure Blob, MinIO, Cloudflare R2 support them), or on S3 set AWS_S3_LOCKING_PROVIDER=dynamodb with a DynamoDB lock table (see docs/storage.md)",
                    )
                };
                match store.put_opts(&probe, PutPayload::from_static(b"{}"), create()).await {
                    Ok(_) => {}
                    Err(object_store::Error::NotImplemented { .. }) => {
                        return Err(unsafe_store("does not support conditional writes".into()));
                    }
                    Err(e) => return Err(failed(e)),
                }
                let second = store
                    .put_opts(&probe, PutPayload::from_static(b"{}"), create())
                    .await;
                let _ = store.delete(&probe).await;
                match second {
                    Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
                    Ok(_) => Err(unsafe_store(
                        "ignores conditional writes (a second create of one object succeeded)"
                            .into(),
                    )),
                    Err(object_store::Error::NotImplemented { .. }) => {
                        Err(unsafe_store("does not support conditional writes".into()))
                    }
                    Err(e) => Err(failed(e)),
                }
            })
            .await?;
        Ok(())
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
