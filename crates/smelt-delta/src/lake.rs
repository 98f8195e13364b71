use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use deltalake::DeltaTable;
use deltalake::logstore::{ObjectStoreRef, StorageConfig, logstore_for};
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use smelt_spec::{StoreSettings, TableName};
use url::Url;

use crate::error::{Context, Error, Result};

/// A lake: Delta tables at `<root>/<schema>/<table>`, the root a local folder or a
/// storage URL (`s3://bucket/prefix`, `gs://…`, `az://…`, `abfss://…`), and tables placed
/// at their own folder or URL ([`Lake::with_tables`]). Stores are opened by delta-rs,
/// credentials and options from the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`), timeouts
/// and retries from the pipeline's `storage:` ([`Lake::with_store_settings`]).
#[derive(Debug, Clone)]
pub struct Lake {
    /// The root as a directory URL (ends with `/`).
    root: Url,
    /// The root folder of a local lake.
    local: Option<PathBuf>,
    /// Tables placed outside the root.
    placed: HashMap<TableName, Place>,
    /// Stores (`scheme://host`) that have shown they refuse a second create of one object.
    safe: Arc<Mutex<HashSet<String>>>,
    /// Timeouts and retries of remote stores.
    store: StoreSettings,
}

/// Where one table is.
#[derive(Debug, Clone)]
struct Place {
    /// Its folder as a directory URL.
    url: Url,
    /// Its local folder, for a local table.
    local: Option<PathBuf>,
}

impl Place {
    /// A local folder.
    fn folder(path: PathBuf) -> Result<Self> {
        let url = Url::from_directory_path(&path).map_err(|_| {
            Error::user(
                format!("cannot make a URL of `{}`", path.display()),
                "use a plain local path",
            )
        })?;
        Ok(Self {
            url,
            local: Some(path),
        })
    }

    /// A local folder or a storage URL, as written in the pipeline file.
    fn parse(location: &str) -> Result<Self> {
        if !location.contains("://") {
            let path = std::path::absolute(location).map_err(|source| Error::Io {
                context: format!("resolving path `{location}`"),
                source,
            })?;
            return Self::folder(path);
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
                    "write a local folder as `file:///absolute/folder` or as a plain path",
                )
            })?;
            return Self::folder(path);
        }
        if !url.path().ends_with('/') {
            url.set_path(&format!("{}/", url.path()));
        }
        Ok(Self { url, local: None })
    }

    /// The store of a remote place, rooted at it.
    fn store(&self, settings: &StoreSettings) -> Result<ObjectStoreRef> {
        let config = StorageConfig::parse_options(storage_options(&self.url, settings))
            .context(|| format!("the storage options of `{}`", self.url))?;
        let log_store =
            logstore_for(&self.url, config).context(|| format!("opening `{}`", self.url))?;
        Ok(log_store.object_store(None))
    }
}

/// delta-rs' storage options for the store holding `url`: the timeouts and retries of
/// `settings` (none for a local folder, which has neither).
fn storage_options(url: &Url, settings: &StoreSettings) -> HashMap<String, String> {
    if url.scheme() == "file" {
        return HashMap::new();
    }
    settings.delta_options().into_iter().collect()
}

impl Lake {
    /// A lake in the local folder `root` (it need not exist yet).
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let root = std::path::absolute(root.as_ref()).map_err(|source| Error::Io {
            context: format!("resolving lake path `{}`", root.as_ref().display()),
            source,
        })?;
        Self::from_place(Place::folder(root)?)
    }

    /// The lake at `location`: a local folder, or a storage URL (`file://` URLs are local
    /// folders).
    pub fn at(location: &str) -> Result<Self> {
        Self::from_place(Place::parse(location)?)
    }

    fn from_place(place: Place) -> Result<Self> {
        Ok(Self {
            root: place.url,
            local: place.local,
            placed: HashMap::new(),
            safe: Arc::default(),
            store: StoreSettings::default(),
        })
    }

    /// The lake whose remote stores time out and retry as `settings` say (`storage:`).
    pub fn with_store_settings(mut self, settings: StoreSettings) -> Self {
        self.store = settings;
        self
    }

    /// delta-rs' storage options for table `name`'s store (see [`StoreSettings`]).
    pub fn storage_options(&self, name: &TableName) -> Result<HashMap<String, String>> {
        Ok(storage_options(&self.table_url(name)?, &self.store))
    }

    /// Table `name` as delta-rs opens it: loaded when it exists, else a handle to create it
    /// with; its store opened with the lake's [`StoreSettings`].
    pub async fn handle(&self, name: &TableName) -> Result<DeltaTable> {
        let url = self.table_url(name)?;
        let options = storage_options(&url, &self.store);
        DeltaTable::try_from_url_with_storage_options(url, options)
            .await
            .context(|| format!("opening `{name}`"))
    }

    /// Places `tables` at their own folders or URLs (the pipeline's `tables:`), instead of
    /// `<root>/<schema>/<table>`.
    pub fn with_tables(mut self, tables: &[(TableName, String)]) -> Result<Self> {
        for (name, location) in tables {
            self.placed.insert(name.clone(), Place::parse(location)?);
        }
        Ok(self)
    }

    /// The lake root, as a directory URL.
    pub fn root_url(&self) -> &Url {
        &self.root
    }

    /// Where table `name` is.
    fn place(&self, name: &TableName) -> Result<Place> {
        if let Some(catalog) = &name.catalog {
            return Err(Error::user(
                format!(
                    "`{name}` is a table of Iceberg catalog `{catalog}`, not of the Delta lake"
                ),
                "this command reads Delta tables only; name the Delta table as `schema.table`",
            ));
        }
        if let Some(place) = self.placed.get(name) {
            return Ok(place.clone());
        }
        match &self.local {
            Some(root) => Place::folder(root.join(&name.schema).join(&name.table)),
            None => {
                let url = self
                    .root
                    .join(&format!("{}/{}/", name.schema, name.table))
                    .map_err(|e| {
                        Error::user(
                            format!(
                                "cannot make a URL of table `{name}` under `{}`: {e}",
                                self.root
                            ),
                            "use plain schema and table names",
                        )
                    })?;
                Ok(Place { url, local: None })
            }
        }
    }

    /// The local folder of a table, `None` for a table on an object store.
    pub fn local_path(&self, name: &TableName) -> Option<PathBuf> {
        self.place(name).ok().and_then(|p| p.local)
    }

    /// The local folder of a local lake's root (schemas are folders there).
    pub fn local_root(&self) -> Option<&Path> {
        self.local.as_deref()
    }

    /// Where a table is, for messages: its folder (local) or URL.
    pub fn location(&self, name: &TableName) -> String {
        match self.place(name) {
            Ok(Place {
                local: Some(path), ..
            }) => path.display().to_string(),
            Ok(Place { url, .. }) => url.to_string(),
            Err(_) => format!("{}{}/{}", self.root, name.schema, name.table),
        }
    }

    /// URL of a table (a directory URL).
    pub fn table_url(&self, name: &TableName) -> Result<Url> {
        Ok(self.place(name)?.url)
    }

    /// Makes the folder of a local table (delta-rs writes a new local table only into an
    /// existing folder); nothing to do on an object store.
    pub fn prepare(&self, name: &TableName) -> Result<()> {
        if let Some(path) = self.place(name)?.local {
            std::fs::create_dir_all(&path).map_err(|source| Error::Io {
                context: format!("creating `{}`", path.display()),
                source,
            })?;
        }
        Ok(())
    }

    /// Checks, once per store, that the store of `table` (of the lake root and every placed
    /// table when `None`) refuses to create an object that exists: the conditional put (`If-None-Match` on
    /// S3, preconditions on GCS and Azure) that delta-rs commits with, so that two writers
    /// can never both commit one version. A store that ignores it (some S3-compatible
    /// servers) is refused before anything is written. Local tables commit by an atomic
    /// create-if-absent of the file system; S3 commits through a DynamoDB lock
    /// (`AWS_S3_LOCKING_PROVIDER=dynamodb`) need no probe. The probe is an object created
    /// twice, then deleted, under `_smelt/probe/` of the table's folder (the root's).
    pub async fn check_safe_commits(&self, table: Option<&TableName>) -> Result<()> {
        let places = match table {
            Some(name) => vec![self.place(name)?],
            // The root's store and those of the placed tables.
            None => std::iter::once(Place {
                url: self.root.clone(),
                local: self.local.clone(),
            })
            .chain(self.placed.values().cloned())
            .collect(),
        };
        for place in places {
            self.probe(place).await?;
        }
        Ok(())
    }

    /// The probe of [`Lake::check_safe_commits`] for one place, once per store.
    async fn probe(&self, place: Place) -> Result<()> {
        if place.local.is_some()
            || std::env::var("AWS_S3_LOCKING_PROVIDER").is_ok_and(|p| p == "dynamodb")
        {
            return Ok(());
        }
        let key = format!(
            "{}://{}",
            place.url.scheme(),
            place.url.host_str().unwrap_or("")
        );
        if self.safe.lock().expect("not poisoned").contains(&key) {
            return Ok(());
        }
        use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
        let store = place.store(&self.store)?;
        let probe = ObjectPath::from(format!("_smelt/probe/{}.json", uuid::Uuid::new_v4()));
        let create = || PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let failed = |e: object_store::Error| Error::Store {
            context: format!("checking that `{}` supports conditional writes", place.url),
            source: e,
        };
        let unsafe_store = |why: &str| {
            Error::user(
                format!(
                    "`{}` is on a store that {why}: two writers could both commit the same table version, so smelt does not write there",
                    place.url
                ),
                "use a store with conditional writes (AWS S3, GCS, Azure Blob, MinIO, Cloudflare R2 support them), or on S3 set AWS_S3_LOCKING_PROVIDER=dynamodb with a DynamoDB lock table (see docs/storage.md)",
            )
        };
        match store
            .put_opts(&probe, PutPayload::from_static(b"{}"), create())
            .await
        {
            Ok(_) => {}
            Err(object_store::Error::NotImplemented { .. }) => {
                return Err(unsafe_store("does not support conditional writes"));
            }
            Err(e) => return Err(failed(e)),
        }
        let second = store
            .put_opts(&probe, PutPayload::from_static(b"{}"), create())
            .await;
        let _ = store.delete(&probe).await;
        match second {
            Err(object_store::Error::AlreadyExists { .. }) => {
                self.safe.lock().expect("not poisoned").insert(key);
                Ok(())
            }
            Ok(_) => Err(unsafe_store(
                "ignores conditional writes (a second create of one object succeeded)",
            )),
            Err(object_store::Error::NotImplemented { .. }) => {
                Err(unsafe_store("does not support conditional writes"))
            }
            Err(e) => Err(failed(e)),
        }
    }

    /// True when a Delta table exists at the table's place.
    pub async fn exists(&self, name: &TableName) -> Result<bool> {
        let place = self.place(name)?;
        if let Some(path) = &place.local {
            return Ok(path.join("_delta_log").is_dir());
        }
        let store = place.store(&self.store)?;
        let first = store
            .list(Some(&ObjectPath::from("_delta_log")))
            .next()
            .await;
        match first {
            None => Ok(false),
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(Error::Store {
                context: format!("looking for table `{name}` at {}", place.url),
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
        let options = storage_options(&url, &self.store);
        match deltalake::open_table_with_storage_options(url, options).await {
            Ok(t) => Ok(Some(t)),
            Err(deltalake::DeltaTableError::NotATable(_)) => Ok(None),
            Err(e) => {
                let damaged = match self.place(name)?.store(&self.store) {
                    Ok(store) => crate::damage::damaged_log(&store).await,
                    Err(_) => None,
                };
                match damaged {
                    Some((file, what)) => {
                        Err(crate::damage::log_error(&name.to_string(), &file, &what).into())
                    }
                    None => Err(e).context(|| format!("opening table `{name}`")),
                }
            }
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

    /// Every table in the lake (placed ones included), sorted.
    pub async fn tables(&self) -> Result<Vec<TableName>> {
        let mut out = Vec::new();
        if let Some(root) = &self.local {
            if let Ok(schemas) = std::fs::read_dir(root) {
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
            }
        } else {
            let store = Place {
                url: self.root.clone(),
                local: None,
            }
            .store(&self.store)?;
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
                    let log = ObjectPath::from(format!("{s}/{t}/_delta_log"));
                    let has_log = match store.list(Some(&log)).next().await {
                        None => false,
                        Some(Ok(_)) => true,
                        Some(Err(e)) => return Err(listing(e)),
                    };
                    if has_log && let Some(name) = TableName::parse(&format!("{s}.{t}")) {
                        out.push(name);
                    }
                }
            }
        }
        // A placed table is where it is placed, not where its name would put it.
        out.retain(|n| !self.placed.contains_key(n));
        for name in self.placed.keys() {
            if self.exists(name).await? {
                out.push(name.clone());
            }
        }
        out.sort();
        Ok(out)
    }
}
