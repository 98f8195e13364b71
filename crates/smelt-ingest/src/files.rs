//! Finding and opening the files of an ingest flow: a local folder or an object-store
//! prefix, a pattern below it, Hive-style `key=value` folders as columns.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use glob::{MatchOptions, Pattern};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::file::reader::{ChunkReader, Length};
pub use smelt_engine::ports::LandingFile;
use smelt_spec::{IngestFlow, StoreSettings};

use crate::{IngestError, Result};

/// Where an ingest flow's files are.
pub enum Landing {
    /// A local folder, read with the file system.
    Local(PathBuf),
    /// An object-store prefix.
    Store {
        /// The store.
        store: Arc<dyn ObjectStore>,
        /// The prefix files are listed under.
        prefix: ObjectPath,
        /// The folder's URL as written (file URLs are it, `/`, and their path below it).
        base: String,
    },
}

const MATCH: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: true,
};

impl Landing {
    /// The landing of `flow`: its URL's store (credentials from the environment, as the
    /// cloud SDKs read them: `AWS_*`, `GOOGLE_*`, `AZURE_*`), else its local folder.
    pub fn of(flow: &IngestFlow, settings: &StoreSettings) -> Result<Self> {
        match &flow.url {
            Some(text) => Self::store(text, settings),
            None => Ok(Self::Local(flow.folder.clone())),
        }
    }

    /// The object store and prefix of the folder URL `text`.
    pub fn store(text: &str, settings: &StoreSettings) -> Result<Self> {
        let bad = |e: &dyn std::fmt::Display| {
            IngestError::Options(format!("`{text}` cannot be opened: {e}"))
        };
        let url = url::Url::parse(text).map_err(|e| bad(&e))?;
        let (store, prefix) =
            smelt_engine::stores::open_store(&url, settings).map_err(|e| bad(&e))?;
        let base = text.trim_end_matches('/').to_string();
        Ok(Self::Store {
            store,
            prefix,
            base,
        })
    }

    /// The files whose path below the folder matches `pattern` (every file when `None`),
    /// sorted by path. Hidden files and folders (`.x`, `_x`) are skipped.
    pub async fn list(&self, pattern: Option<&str>) -> Result<Vec<LandingFile>> {
        let (store, prefix, base) = match self {
            Self::Local(folder) => return list(folder, pattern),
            Self::Store {
                store,
                prefix,
                base,
            } => (store, prefix, base),
        };
        let pattern = compile(pattern)?;
        let mut objects = store.list(Some(prefix));
        let mut files = Vec::new();
        while let Some(meta) = objects.next().await {
            let meta =
                meta.map_err(|e| IngestError::Options(format!("listing `{base}` failed: {e}")))?;
            let location = meta.location.as_ref();
            let relative = location
                .strip_prefix(prefix.as_ref())
                .unwrap_or(location)
                .trim_start_matches('/')
                .to_string();
            if relative.split('/').any(hidden)
                || pattern
                    .as_ref()
                    .is_some_and(|p| !p.matches_with(&relative, MATCH))
            {
                continue;
            }
            files.push(LandingFile {
                location: location.to_string(),
                partitions: partitions(&relative),
                url: format!("{base}/{relative}"),
                relative,
                size: meta.size,
                modified_us: meta.last_modified.timestamp_micros(),
            });
        }
        files.sort_by(|a, b| a.relative.cmp(&b.relative));
        Ok(files)
    }

    /// The size and modification time (µs) of `file` now, `None` when it is gone.
    pub async fn stat(&self, file: &LandingFile) -> Result<Option<(u64, i64)>> {
        match self {
            Self::Store { store, .. } => match store.head(&object(file)).await {
                Ok(meta) => Ok(Some((meta.size, meta.last_modified.timestamp_micros()))),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(IngestError::Io {
                    file: file.url.clone(),
                    source: std::io::Error::other(e),
                }),
            },
            Self::Local(_) => match std::fs::metadata(&file.location) {
                Ok(meta) => Ok(Some((meta.len(), modified_us(&meta)))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(IngestError::Io {
                    file: file.url.clone(),
                    source,
                }),
            },
        }
    }

    /// The first `file.size` bytes of `file`, streamed. Store reads block on `handle`: call
    /// from a blocking context.
    pub fn open(
        &self,
        file: &LandingFile,
        handle: &tokio::runtime::Handle,
    ) -> Result<Box<dyn Read + Send>> {
        let io = |source| IngestError::Io {
            file: file.url.clone(),
            source,
        };
        match self {
            Self::Store { store, .. } => {
                let get = handle
                    .block_on(store.get(&object(file)))
                    .map_err(|e| io(std::io::Error::other(e)))?;
                let stream = get.into_stream();
                Ok(Box::new(
                    StoreRead {
                        handle: handle.clone(),
                        stream,
                        chunk: Bytes::new(),
                    }
                    .take(file.size),
                ))
            }
            Self::Local(_) => {
                let f = std::fs::File::open(&file.location).map_err(io)?;
                Ok(Box::new(f.take(file.size)))
            }
        }
    }

    /// Ranged reads of `file` for a Parquet reader, for a file in an object store (`None`
    /// for a local file: read it with `std::fs::File`).
    pub fn store_chunks(
        &self,
        file: &LandingFile,
        handle: &tokio::runtime::Handle,
    ) -> Option<StoreChunks> {
        match self {
            Self::Store { store, .. } => Some(StoreChunks {
                store: Arc::clone(store),
                object: object(file),
                size: file.size,
                handle: handle.clone(),
            }),
            Self::Local(_) => None,
        }
    }
}

/// The object-store path of a file listed from a store.
fn object(file: &LandingFile) -> ObjectPath {
    ObjectPath::parse(&file.location).unwrap_or_else(|_| ObjectPath::from(file.location.as_str()))
}

/// A byte stream from an object store as a blocking reader.
struct StoreRead {
    handle: tokio::runtime::Handle,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
}

impl Read for StoreRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.handle.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// A Parquet file in an object store, read in ranges (the footer, then column chunks).
pub struct StoreChunks {
    store: Arc<dyn ObjectStore>,
    object: ObjectPath,
    size: u64,
    handle: tokio::runtime::Handle,
}

impl Length for StoreChunks {
    fn len(&self) -> u64 {
        self.size
    }
}

impl ChunkReader for StoreChunks {
    type T = RangeRead;

    /// A reader from `start` that fetches 1 MiB ranges as it is read (the reader asks for
    /// one before each page, and reads only the page).
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(RangeRead {
            store: Arc::clone(&self.store),
            object: self.object.clone(),
            handle: self.handle.clone(),
            position: start,
            end: self.size,
            chunk: Bytes::new(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.handle
            .block_on(
                self.store
                    .get_range(&self.object, start..start + length as u64),
            )
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}

/// Reads an object from a position, a bounded range at a time.
pub struct RangeRead {
    store: Arc<dyn ObjectStore>,
    object: ObjectPath,
    handle: tokio::runtime::Handle,
    position: u64,
    end: u64,
    chunk: Bytes,
}

impl Read for RangeRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.chunk.is_empty() {
            if self.position >= self.end {
                return Ok(0);
            }
            let to = self.end.min(self.position + (1 << 20));
            self.chunk = self
                .handle
                .block_on(self.store.get_range(&self.object, self.position..to))
                .map_err(std::io::Error::other)?;
            self.position = to;
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// A file found at `relative` below a landing folder by a listing made elsewhere (the
/// Spark engine's), when a listing here would have taken it: not hidden, and matching
/// `pattern`. Its URL is the folder's `base` URL and the relative path (a local folder's
/// made from its path, as here).
pub fn listed(
    pattern: Option<&str>,
    base: &Base<'_>,
    relative: &str,
    size: u64,
    modified_us: i64,
) -> Result<Option<LandingFile>> {
    if relative.split('/').any(hidden)
        || compile(pattern)?.is_some_and(|p| !p.matches_with(relative, MATCH))
    {
        return Ok(None);
    }
    let (location, url) = match base {
        Base::Local(folder) => {
            let path = folder.join(relative);
            let url = url::Url::from_file_path(&path)
                .map(|u| u.to_string())
                .unwrap_or_else(|_| path.display().to_string());
            (path.to_string_lossy().into_owned(), url)
        }
        Base::Url(text) => (
            relative.to_string(),
            format!("{}/{relative}", text.trim_end_matches('/')),
        ),
    };
    Ok(Some(LandingFile {
        location,
        partitions: partitions(relative),
        relative: relative.to_string(),
        url,
        size,
        modified_us,
    }))
}

/// Where a listing made elsewhere was made: an absolute local folder, or a folder URL.
#[derive(Debug, Clone, Copy)]
pub enum Base<'a> {
    /// A local folder (absolute).
    Local(&'a Path),
    /// A folder URL, as the flow writes it.
    Url(&'a str),
}

fn compile(pattern: Option<&str>) -> Result<Option<Pattern>> {
    pattern
        .map(|p| Pattern::new(p).map_err(|e| IngestError::Options(format!("`{p}`: {e}"))))
        .transpose()
}

/// A name that writers use for files that are not complete yet (`.part-0.tmp`,
/// `_temporary/`): skipped, as Spark and Hadoop do, so a file written under a hidden name
/// and renamed when done is never read half-written.
fn hidden(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

/// The files under the local `folder` whose relative path matches `pattern` (every file
/// when `None`), sorted by path. Hidden files and folders (`.x`, `_x`) are skipped.
pub fn list(folder: &Path, pattern: Option<&str>) -> Result<Vec<LandingFile>> {
    let io = |e: std::io::Error| IngestError::Io {
        file: folder.display().to_string(),
        source: e,
    };
    let meta = std::fs::metadata(folder).map_err(|e| {
        IngestError::Options(format!(
            "the landing folder `{}` cannot be read: {e}; create it, or fix `from:`",
            folder.display()
        ))
    })?;
    if !meta.is_dir() {
        return Err(IngestError::Options(format!(
            "`{}` is not a folder; point `from:` at a folder, or a folder and a pattern (`landing/*.csv`)",
            folder.display()
        )));
    }
    let pattern = compile(pattern)?;
    let root = std::fs::canonicalize(folder).map_err(io)?;
    let mut files = Vec::new();
    let walk = walkdir::WalkDir::new(&root)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !hidden(&e.file_name().to_string_lossy()));
    for entry in walk {
        let entry = entry.map_err(|e| IngestError::Io {
            file: e
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| root.display().to_string()),
            source: e.into(),
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let relative: Vec<String> = entry
            .path()
            .strip_prefix(&root)
            .expect("walked below the root")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let relative = relative.join("/");
        if let Some(p) = &pattern
            && !p.matches_with(&relative, MATCH)
        {
            continue;
        }
        let meta = entry.metadata().map_err(|e| IngestError::Io {
            file: entry.path().display().to_string(),
            source: e.into(),
        })?;
        let modified_us = modified_us(&meta);
        let url = url::Url::from_file_path(entry.path())
            .map(|u| u.to_string())
            .unwrap_or_else(|_| entry.path().display().to_string());
        files.push(LandingFile {
            location: entry.path().to_string_lossy().into_owned(),
            partitions: partitions(&relative),
            relative,
            url,
            size: meta.len(),
            modified_us,
        });
    }
    Ok(files)
}

/// A file's modification time, µs since the epoch.
fn modified_us(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

/// `key=value` folders of a relative path, percent-decoded (Spark and BigQuery write
/// `:` as `%3A`).
fn partitions(relative: &str) -> Vec<(String, String)> {
    let mut parts: Vec<&str> = relative.split('/').collect();
    parts.pop(); // the file name
    parts
        .into_iter()
        .filter_map(|p| p.split_once('='))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| {
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_matching_files_sorted_skipping_hidden_ones() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "b.csv",
            "a.csv",
            "notes.txt",
            ".a.csv.tmp",
            "_temporary/x.csv",
            "sub/c.csv",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x\n").unwrap();
        }
        let names = |pattern| -> Vec<String> {
            list(root, pattern)
                .unwrap()
                .into_iter()
                .map(|f| f.relative)
                .collect()
        };
        assert_eq!(names(Some("*.csv")), ["a.csv", "b.csv"]);
        assert_eq!(names(Some("**/*.csv")), ["a.csv", "b.csv", "sub/c.csv"]);
        assert_eq!(names(None), ["a.csv", "b.csv", "notes.txt", "sub/c.csv"]);
        let a = &list(root, Some("a.csv")).unwrap()[0];
        assert_eq!(a.size, 2);
        assert!(a.url.starts_with("file:///") && a.url.ends_with("/a.csv"));
        assert!(a.modified_us > 0);
    }

    #[test]
    fn hive_folders_become_decoded_values() {
        assert_eq!(
            partitions("export_timestamp=2026-07-21 10%3A00%3A00+09%3A00/region=jp/part-0.parquet"),
            vec![
                (
                    "export_timestamp".into(),
                    "2026-07-21 10:00:00+09:00".into()
                ),
                ("region".into(), "jp".into())
            ]
        );
        assert!(partitions("a=b.parquet").is_empty());
    }

    #[test]
    fn a_missing_folder_names_itself() {
        let err = list(Path::new("/no/such/landing"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/no/such/landing"), "{err}");
    }
}
