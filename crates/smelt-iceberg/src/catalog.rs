//! An Iceberg catalog of a pipeline (`catalogs:`): loads and creates tables, and commits
//! new metadata with the catalog's atomic swap.
//!
//! The `iceberg` crate's `Catalog::update_table` takes a `TableCommit` that only the crate's
//! own transactions can build, and they cannot remove files. smelt builds the new metadata
//! itself (`TableMetadataBuilder`) and swaps the table's pointer the way the catalog does:
//! for a SQL catalog, the same `UPDATE … WHERE metadata_location = <the one read>` as
//! `SqlCatalog::update_table` and pyiceberg's `SqlCatalog`; for a REST catalog, the
//! protocol's commit request with the table's UUID and main branch as requirements
//! (`rest.rs`).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{CatalogBuilder, MetadataLocation, NamespaceIdent, TableCreation, TableIdent};
use iceberg::{TableRequirement, TableUpdate};
use iceberg_catalog_rest::{RestCatalog, RestCatalogBuilder};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalog, SqlCatalogBuilder};
use smelt_spec::{Catalog, CatalogKind, StoreSettings, TableName};
use sqlx::AnyPool;

use crate::error::{Context, Error, Result};
use crate::rest::{Committed, RestCommits};
use crate::storage::{ObjectStorageFactory, to_url};

/// An opened catalog.
#[derive(Debug)]
pub struct IcebergCatalog {
    name: String,
    backend: Backend,
    factory: Arc<ObjectStorageFactory>,
}

/// The kinds of catalog, and how each commits.
#[derive(Debug)]
enum Backend {
    Sql {
        catalog: SqlCatalog,
        /// Our own connection to the catalog's database, for the pointer swap.
        pool: AnyPool,
    },
    Rest {
        catalog: Box<RestCatalog>,
        commits: RestCommits,
    },
}

impl IcebergCatalog {
    /// Opens the catalog `spec` (for a SQL catalog, creating its database file and tables
    /// when missing).
    pub async fn open(spec: &Catalog, settings: &StoreSettings) -> Result<Self> {
        let factory = Arc::new(ObjectStorageFactory::new(*settings));
        let uri = match &spec.kind {
            CatalogKind::Sql { uri } => uri.clone(),
            CatalogKind::Rest { uri } => return Self::open_rest(spec, uri, factory).await,
        };
        for (key, value) in &spec.properties {
            let numeric = matches!(key.as_str(), "pool.max-connections" | "pool.idle-timeout");
            let boolean = key == "pool.test-before-acquire";
            if (numeric && value.parse::<u64>().is_err())
                || (boolean && value.parse::<bool>().is_err())
            {
                return Err(Error::user(
                    format!(
                        "catalog `{}`: `{key}: {value}` is not a valid value",
                        spec.name
                    ),
                    if numeric {
                        "give a whole number"
                    } else {
                        "give `true` or `false`"
                    },
                ));
            }
        }
        // sqlx opens SQLite files read-write, creating them when missing, with `mode=rwc`.
        let uri = if uri.contains('?') {
            uri
        } else {
            format!("{uri}?mode=rwc")
        };
        if let Some(path) = uri
            .strip_prefix("sqlite://")
            .and_then(|p| p.split('?').next())
            && let Some(dir) = std::path::Path::new(path).parent()
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::user(
                    format!(
                        "catalog `{}`: cannot create the folder of `{path}`: {e}",
                        spec.name
                    ),
                    "check the `uri` of the catalog and the folder's permissions",
                )
            })?;
        }
        let warehouse = spec.warehouse.clone().unwrap_or_default();
        let warehouse = to_url(&warehouse).map(|u| u.to_string()).map_err(|e| {
            Error::user(format!("catalog `{}`: {e}", spec.name), "check `warehouse`")
        })?;
        let props: HashMap<String, String> = spec.properties.iter().cloned().collect();
        let catalog = SqlCatalogBuilder::default()
            .uri(&uri)
            .warehouse_location(warehouse.trim_end_matches('/'))
            .sql_bind_style(SqlBindStyle::QMark)
            .with_storage_factory(factory.clone())
            .load(&spec.name, props)
            .await
            .context(|| format!("opening catalog `{}` ({uri})", spec.name))?;
        sqlx::any::install_default_drivers();
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect(&uri)
            .await
            .context(|| format!("opening catalog `{}` ({uri})", spec.name))?;
        Ok(IcebergCatalog {
            name: spec.name.clone(),
            backend: Backend::Sql { catalog, pool },
            factory,
        })
    }

    /// Opens REST catalog `spec` at `uri`.
    async fn open_rest(
        spec: &Catalog,
        uri: &str,
        factory: Arc<ObjectStorageFactory>,
    ) -> Result<Self> {
        let mut props: HashMap<String, String> = spec.properties.iter().cloned().collect();
        props.insert("uri".into(), uri.to_string());
        if let Some(w) = &spec.warehouse {
            props.insert("warehouse".into(), w.clone());
        }
        // Requests to the catalog time out as the stores' do (`storage:`); a commit is
        // never retried (its outcome is read back by the next run).
        let settings = factory.settings();
        let http = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.connect_timeout)
            .build()
            .map_err(|e| Error::internal(format!("the REST catalog's HTTP client: {e}")))?;
        let catalog = RestCatalogBuilder::default()
            .with_client(http.clone())
            .with_storage_factory(factory.clone())
            .load(&spec.name, props.clone())
            .await
            .context(|| format!("opening REST catalog `{}` ({uri})", spec.name))?;
        let commits = RestCommits::new(uri, props, http).await?;
        Ok(IcebergCatalog {
            name: spec.name.clone(),
            backend: Backend::Rest {
                catalog: Box::new(catalog),
                commits,
            },
            factory,
        })
    }

    fn catalog(&self) -> &dyn iceberg::Catalog {
        match &self.backend {
            Backend::Sql { catalog, .. } => catalog,
            Backend::Rest { catalog, .. } => catalog.as_ref(),
        }
    }

    /// The catalog's name (`catalogs:` key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The storage the catalog's tables are read and written through.
    pub fn storage(&self) -> &Arc<ObjectStorageFactory> {
        &self.factory
    }

    /// Table `name`, `None` when the catalog has no such table.
    pub async fn load(&self, name: &TableName) -> Result<Option<Table>> {
        let ident = ident(name);
        let exists = self
            .catalog()
            .table_exists(&ident)
            .await
            .context(|| format!("looking up `{name}` in catalog `{}`", self.name))?;
        if !exists {
            return Ok(None);
        }
        match self.catalog().load_table(&ident).await {
            Ok(table) => Ok(Some(table)),
            Err(e) => Err(self.unreadable(name, e).await),
        }
    }

    /// The error of table `name`, which the catalog lists but cannot load (`e`): for a SQL
    /// catalog whose metadata file (the one its pointer names) is missing or does not parse
    /// (`DataInvalid`), that file, named (the `iceberg` crate's error, which repeats the
    /// location, left out); any other failure as it came.
    async fn unreadable(&self, name: &TableName, e: iceberg::Error) -> Error {
        // A store that fails (credentials, the network) is not a damaged file.
        let Backend::Sql { pool, .. } = &self.backend else {
            return loading(name, e);
        };
        if e.kind() != iceberg::ErrorKind::DataInvalid {
            return loading(name, e);
        }
        let pointer: Option<(Option<String>,)> = sqlx::query_as(
            "SELECT metadata_location FROM iceberg_tables \
             WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
        )
        .bind(&self.name)
        .bind(&name.schema)
        .bind(&name.table)
        .fetch_optional(pool)
        .await
        .ok()
        .flatten();
        let Some((Some(location),)) = pointer else {
            return loading(name, e);
        };
        Error::Engine(smelt_engine::EngineError::Damaged {
            message: format!(
                "Iceberg table `{name}` cannot be read: its metadata file `{location}` (the one catalog `{}` points to) is missing or damaged",
                self.name
            ),
            source: None,
            hint: "restore the file from a backup, or point the catalog at the table's previous metadata file (`previous_metadata_location`); nothing was committed".into(),
        })
    }

    /// Creates table `name` (format version 2) with `schema`, and its namespace when missing.
    pub async fn create(&self, name: &TableName, schema: iceberg::spec::Schema) -> Result<Table> {
        let ns = NamespaceIdent::new(name.schema.clone());
        let has_ns = self.catalog().namespace_exists(&ns).await.context(|| {
            format!(
                "looking up namespace `{}` in catalog `{}`",
                name.schema, self.name
            )
        })?;
        if !has_ns {
            // Another writer may create it at the same moment: only its absence afterwards
            // is an error.
            if let Err(e) = self.catalog().create_namespace(&ns, HashMap::new()).await {
                let now = self.catalog().namespace_exists(&ns).await.unwrap_or(false);
                if !now {
                    return Err(Error::Iceberg {
                        context: format!(
                            "creating namespace `{}` in catalog `{}`",
                            name.schema, self.name
                        ),
                        source: Box::new(e),
                    });
                }
            }
        }
        let creation = TableCreation::builder()
            .name(name.table.clone())
            .schema(schema)
            .build();
        match self.catalog().create_table(&ns, creation).await {
            Ok(table) => Ok(table),
            // Another run created it at the same moment: as a lost commit.
            Err(_)
                if self
                    .catalog()
                    .table_exists(&ident(name))
                    .await
                    .unwrap_or(false) =>
            {
                Err(lost_race(name, "it created the table while this run did"))
            }
            Err(e) => Err(Error::Iceberg {
                context: format!("creating `{name}`"),
                source: Box::new(e),
            }),
        }
    }

    /// Commits `updates` to `table` if the table is still at the metadata `table` was
    /// loaded from; returns the table at the new metadata. Losing the race to another
    /// writer is a user error naming the table.
    pub async fn commit(
        &self,
        name: &TableName,
        table: &Table,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let (location, metadata) = match &self.backend {
            Backend::Sql { pool, .. } => self.commit_sql(pool, name, table, updates).await?,
            Backend::Rest { commits, .. } => {
                let metadata = table.metadata();
                let mut requirements = vec![
                    TableRequirement::UuidMatch {
                        uuid: metadata.uuid(),
                    },
                    TableRequirement::RefSnapshotIdMatch {
                        r#ref: iceberg::spec::MAIN_BRANCH.to_string(),
                        snapshot_id: metadata.current_snapshot_id(),
                    },
                ];
                // A schema change must not race another writer's (which moves no branch).
                if updates
                    .iter()
                    .any(|u| matches!(u, TableUpdate::AddSchema { .. }))
                {
                    requirements.push(TableRequirement::CurrentSchemaIdMatch {
                        current_schema_id: metadata.current_schema_id(),
                    });
                    requirements.push(TableRequirement::LastAssignedFieldIdMatch {
                        last_assigned_field_id: metadata.last_column_id(),
                    });
                }
                match commits
                    .commit(name, table.identifier(), requirements, updates)
                    .await?
                {
                    Committed::Done(done) => (done.metadata_location, done.metadata),
                    Committed::Conflict => {
                        return Err(lost_race(name, "the catalog refused this run's commit"));
                    }
                }
            }
        };
        Table::builder()
            .identifier(table.identifier().clone())
            .metadata_location(location)
            .metadata(metadata)
            .file_io(table.file_io().clone())
            .runtime(iceberg::Runtime::try_current().context(|| "the tokio runtime".to_string())?)
            .build()
            .context(|| format!("opening `{name}` after the commit"))
    }

    /// The SQL catalog's commit: the new metadata written, then the pointer swapped if it
    /// still points where this run read.
    async fn commit_sql(
        &self,
        pool: &AnyPool,
        name: &TableName,
        table: &Table,
        updates: Vec<TableUpdate>,
    ) -> Result<(String, TableMetadata)> {
        let current = table
            .metadata_location_result()
            .context(|| format!("committing to `{name}`"))?
            .to_string();
        let mut builder = table.metadata().clone().into_builder(Some(current.clone()));
        for update in updates {
            builder = update
                .apply(builder)
                .context(|| format!("building the new metadata of `{name}`"))?;
        }
        let metadata: TableMetadata = builder
            .build()
            .context(|| format!("building the new metadata of `{name}`"))?
            .metadata;
        let location = MetadataLocation::from_str(&current)
            .context(|| format!("reading the metadata location of `{name}`"))?
            .with_next_version()
            .with_new_metadata(&metadata);
        metadata
            .write_to(table.file_io(), &location)
            .await
            .context(|| format!("writing the new metadata of `{name}`"))?;
        let location = location.to_string();
        let swapped = sqlx::query(
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
             WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? \
             AND metadata_location = ?",
        )
        .bind(&location)
        .bind(&current)
        .bind(&self.name)
        .bind(&name.schema)
        .bind(&name.table)
        .bind(&current)
        .execute(pool)
        .await
        .context(|| format!("committing to `{name}` in catalog `{}`", self.name))?;
        if swapped.rows_affected() == 0 {
            // The metadata file written is never referenced; it is harmless.
            return Err(lost_race(
                name,
                "its pointer in the catalog moved while this run wrote",
            ));
        }
        Ok((location, metadata))
    }
}

/// A commit (or table creation) that lost to another writer: refused, never retried over
/// the other writer's changes.
fn lost_race(name: &TableName, what: &str) -> Error {
    Error::user(
        format!("`{name}`: another writer committed first ({what})"),
        "run again: the next run starts from what the other writer committed",
    )
}

/// The catalog identifier of `name` (namespace = its schema).
pub fn ident(name: &TableName) -> TableIdent {
    TableIdent::new(NamespaceIdent::new(name.schema.clone()), name.table.clone())
}

/// The error of loading table `name`.
fn loading(name: &TableName, e: iceberg::Error) -> Error {
    Error::Iceberg {
        context: format!("loading `{name}`"),
        source: Box::new(e),
    }
}
