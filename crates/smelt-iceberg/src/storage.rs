//! The `iceberg` crate's file access (`Storage`) on `object_store`: the same stores, URLs
//! and credentials (taken from the environment) as a Delta lake — local folders, `s3://`,
//! `gs://`, `az://` and `abfss://`.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use iceberg::{Error as IcebergError, ErrorKind};
use object_store::buffered::BufWriter;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use smelt_spec::StoreSettings;
use url::Url;

/// The stores opened so far, one per `scheme://authority`, with their timeouts and
/// retries.
#[derive(Debug, Default)]
struct Stores {
    opened: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
    settings: StoreSettings,
}

impl Stores {
    /// The store holding `location` (a URL or an absolute local path), and the object's
    /// path in it.
    fn resolve(&self, location: &str) -> iceberg::Result<(Arc<dyn ObjectStore>, StorePath)> {
        let url = to_url(location)?;
        let key = format!("{}://{}", url.scheme(), url.authority());
        let store = {
            let mut stores = self.opened.lock().expect("not poisoned");
            match stores.get(&key) {
                Some(s) => s.clone(),
                None => {
                    let s = open_store(&url, &self.settings)?;
                    stores.insert(key, s.clone());
                    s
                }
            }
        };
        let path = if url.scheme() == "file" {
            let file = url
                .to_file_path()
                .map_err(|()| invalid(format!("`{location}` is not a local path")))?;
            StorePath::from_absolute_path(&file).map_err(|e| invalid(e.to_string()))?
        } else {
            StorePath::from_url_path(url.path()).map_err(|e| invalid(e.to_string()))?
        };
        Ok((store, path))
    }
}

/// `location` as a URL: local paths become `file://` URLs.
pub fn to_url(location: &str) -> iceberg::Result<Url> {
    if location.starts_with('/') {
        return Url::from_file_path(location)
            .map_err(|()| invalid(format!("`{location}` is not an absolute path")));
    }
    Url::parse(location).map_err(|e| invalid(format!("`{location}` is not a URL: {e}")))
}

fn open_store(url: &Url, settings: &StoreSettings) -> iceberg::Result<Arc<dyn ObjectStore>> {
    if !matches!(
        url.scheme(),
        "file" | "s3" | "s3a" | "gs" | "az" | "abfs" | "abfss" | "azure" | "adl"
    ) {
        return Err(IcebergError::new(
            ErrorKind::FeatureUnsupported,
            format!("smelt cannot open `{}://` storage", url.scheme()),
        ));
    }
    smelt_engine::stores::open_store(url, settings)
        .map(|(store, _)| store)
        .map_err(|e| store_error(url.as_str(), e))
}

fn invalid(message: String) -> IcebergError {
    IcebergError::new(ErrorKind::DataInvalid, message)
}

fn store_error(location: &str, e: object_store::Error) -> IcebergError {
    let kind = match &e {
        object_store::Error::NotFound { .. } => ErrorKind::DataInvalid,
        _ => ErrorKind::Unexpected,
    };
    IcebergError::new(kind, format!("`{location}`: {e}")).with_source(e)
}

/// `Storage` over the stores of [`Stores`].
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ObjectStorage {
    #[serde(skip)]
    stores: Arc<Stores>,
}

#[async_trait]
#[typetag::serde]
impl Storage for ObjectStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        let (store, at) = self.stores.resolve(path)?;
        match store.head(&at).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_error(path, e)),
        }
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        let (store, at) = self.stores.resolve(path)?;
        let meta = store.head(&at).await.map_err(|e| store_error(path, e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        let (store, at) = self.stores.resolve(path)?;
        let got = store.get(&at).await.map_err(|e| store_error(path, e))?;
        got.bytes().await.map_err(|e| store_error(path, e))
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        let (store, at) = self.stores.resolve(path)?;
        Ok(Box::new(ObjectRead {
            store,
            at,
            location: path.to_string(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        let (store, at) = self.stores.resolve(path)?;
        store
            .put(&at, PutPayload::from(bs))
            .await
            .map_err(|e| store_error(path, e))?;
        Ok(())
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        let (store, at) = self.stores.resolve(path)?;
        Ok(Box::new(ObjectWrite {
            writer: Some(BufWriter::new(store, at)),
            location: path.to_string(),
        }))
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        let (store, at) = self.stores.resolve(path)?;
        match store.delete(&at).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error(path, e)),
        }
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        let (store, at) = self.stores.resolve(path)?;
        let listed = store.list(Some(&at)).map(|m| m.map(|m| m.location)).boxed();
        let mut gone = store.delete_stream(listed);
        while let Some(r) = gone.next().await {
            r.map_err(|e| store_error(path, e))?;
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        while let Some(p) = paths.next().await {
            self.delete(&p).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

struct ObjectRead {
    store: Arc<dyn ObjectStore>,
    at: StorePath,
    location: String,
}

#[async_trait]
impl FileRead for ObjectRead {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        self.store
            .get_range(&self.at, range)
            .await
            .map_err(|e| store_error(&self.location, e))
    }
}

struct ObjectWrite {
    writer: Option<BufWriter>,
    location: String,
}

#[async_trait]
impl FileWrite for ObjectWrite {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| invalid(format!("`{}` is already closed", self.location)))?;
        writer
            .put(bs)
            .await
            .map_err(|e| store_error(&self.location, e))
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        let mut writer = self
            .writer
            .take()
            .ok_or_else(|| invalid(format!("`{}` is already closed", self.location)))?;
        std::future::poll_fn(|cx| {
            tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(&mut writer), cx)
        })
        .await
        .map_err(|e| {
            IcebergError::new(
                ErrorKind::Unexpected,
                format!("writing `{}`: {e}", self.location),
            )
        })
    }
}

/// Builds [`ObjectStorage`]; every storage it builds shares one set of stores.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ObjectStorageFactory {
    #[serde(skip)]
    storage: ObjectStorage,
}

#[typetag::serde]
impl StorageFactory for ObjectStorageFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.storage.clone()))
    }
}

impl ObjectStorageFactory {
    /// The timeouts and retries of its stores.
    pub fn settings(&self) -> StoreSettings {
        self.storage.stores.settings
    }

    /// A factory whose stores time out and retry as `settings` say (`storage:`).
    pub fn new(settings: StoreSettings) -> Self {
        ObjectStorageFactory {
            storage: ObjectStorage {
                stores: Arc::new(Stores {
                    opened: Mutex::default(),
                    settings,
                }),
            },
        }
    }

    /// The store holding `location` (a URL or an absolute local path), and the path in it:
    /// for what smelt keeps beside a table, outside Iceberg's metadata (its ledgers).
    pub fn store(&self, location: &str) -> iceberg::Result<(Arc<dyn ObjectStore>, StorePath)> {
        self.storage.stores.resolve(location)
    }
}

/// A `FileIO` on `object_store`.
pub fn file_io(factory: &Arc<ObjectStorageFactory>) -> FileIO {
    FileIOBuilder::new(factory.clone()).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_reads_ranges_and_deletes_local_files() {
        let dir = tempfile::tempdir().unwrap();
        let io = file_io(&Arc::new(ObjectStorageFactory::default()));
        let path = format!("{}/a/b/file.bin", dir.path().display());
        let mut w = io.new_output(&path).unwrap().writer().await.unwrap();
        w.write(Bytes::from_static(b"hello ")).await.unwrap();
        w.write(Bytes::from_static(b"world")).await.unwrap();
        w.close().await.unwrap();
        let input = io.new_input(&path).unwrap();
        assert_eq!(input.metadata().await.unwrap().size, 11);
        assert_eq!(
            input.reader().await.unwrap().read(6..11).await.unwrap(),
            "world"
        );
        let url = format!("file://{path}");
        assert_eq!(
            io.new_input(&url).unwrap().read().await.unwrap(),
            "hello world"
        );
        io.delete(&path).await.unwrap();
        assert!(!io.exists(&path).await.unwrap());
        io.delete(&path).await.unwrap();
    }
}
