//! Deletion vectors: the rows of a data file that a commit marked deleted. Decoding (inline
//! z85, files relative to the table or at an absolute path, checksums) and the file format
//! written (version byte, then per vector its size, magic, 64-bit roaring bitmap and CRC)
//! are delta-rs' kernel's; smelt names the file and builds the log's descriptor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use delta_kernel::actions::deletion_vector::DeletionVectorDescriptor as KernelDv;
use delta_kernel::actions::deletion_vector_writer::{
    KernelDeletionVector, StreamingDeletionVectorWriter,
};
use delta_kernel::{DeltaResult, FileMeta, FileSlice, StorageHandler};
use deltalake::DeltaTable;
use deltalake::kernel::{DeletionVectorDescriptor, StorageType};
use deltalake::logstore::ObjectStoreRef;
use object_store::ObjectStoreExt;
use url::Url;

use crate::error::{Error, Result};

/// Reads the deletion vectors of one table. A vector file is read once per reader (and its
/// clones): smelt writes one file per commit holding the vectors of every file it marked,
/// which the kernel would otherwise read whole once per vector.
#[derive(Clone)]
pub(crate) struct DvReader {
    table: String,
    storage: Arc<OnceRead>,
    /// The table root, ending in `/` (relative vectors are joined to it).
    root: Url,
}

/// The kernel's storage with whole-file reads kept (vector files are small).
struct OnceRead {
    inner: Arc<dyn StorageHandler>,
    files: Mutex<HashMap<Url, Bytes>>,
}

impl StorageHandler for OnceRead {
    fn list_from(
        &self,
        path: &Url,
    ) -> DeltaResult<Box<dyn Iterator<Item = DeltaResult<FileMeta>>>> {
        self.inner.list_from(path)
    }

    fn read_files(
        &self,
        files: Vec<FileSlice>,
    ) -> DeltaResult<Box<dyn Iterator<Item = DeltaResult<Bytes>>>> {
        let mut out = Vec::with_capacity(files.len());
        for (url, range) in files {
            if range.is_some() {
                out.extend(self.inner.read_files(vec![(url, range)])?);
                continue;
            }
            let kept = self.files.lock().expect("not poisoned").get(&url).cloned();
            let bytes = match kept {
                Some(bytes) => bytes,
                None => {
                    let read = self.inner.read_files(vec![(url.clone(), None)])?.next();
                    let bytes = read.ok_or_else(|| {
                        delta_kernel::Error::missing_data(format!("no data for {url}"))
                    })??;
                    self.files
                        .lock()
                        .expect("not poisoned")
                        .insert(url, bytes.clone());
                    bytes
                }
            };
            out.push(Ok(bytes));
        }
        Ok(Box::new(out.into_iter()))
    }

    fn copy_atomic(&self, src: &Url, dest: &Url) -> DeltaResult<()> {
        self.inner.copy_atomic(src, dest)
    }

    fn put(&self, path: &Url, data: Bytes, overwrite: bool) -> DeltaResult<()> {
        self.inner.put(path, data, overwrite)
    }

    fn head(&self, path: &Url) -> DeltaResult<FileMeta> {
        self.inner.head(path)
    }

    fn delete(&self, path: &Url) -> DeltaResult<()> {
        self.inner.delete(path)
    }
}

impl DvReader {
    /// A reader for the vectors of `table` (`name` in errors).
    pub fn new(name: &str, table: &DeltaTable) -> Self {
        Self {
            table: name.to_string(),
            storage: Arc::new(OnceRead {
                inner: table.log_store().engine(None).storage_handler(),
                files: Mutex::default(),
            }),
            root: table_root(table),
        }
    }

    /// The row numbers (ascending, 0-based in the file) that `dv` of data file `path` deletes;
    /// empty without a vector.
    pub async fn deleted(
        &self,
        path: &str,
        dv: Option<&DeletionVectorDescriptor>,
    ) -> Result<Arc<[u64]>> {
        let Some(dv) = dv else {
            return Ok(Arc::from(Vec::new()));
        };
        let damaged = |e: String| {
            Error::user(
                format!(
                    "cannot read the deletion vector of `{}/{path}` ({}): {e}",
                    self.table, dv.path_or_inline_dv
                ),
                "the table's deletion vector files are missing or damaged (vacuumed too early?); the engine that wrote the table can purge them with `REORG TABLE … APPLY (PURGE)`",
            )
        };
        let kernel_dv = KernelDv::try_from(dv.clone()).map_err(|e| damaged(e.to_string()))?;
        let storage: Arc<dyn StorageHandler> = self.storage.clone();
        let root = self.root.clone();
        let rows = tokio::task::spawn_blocking(move || kernel_dv.row_indexes(storage, &root))
            .await
            .map_err(|e| Error::internal(format!("a task reading a deletion vector failed: {e}")))?
            .map_err(|e| damaged(e.to_string()))?;
        if rows.len() as i64 != dv.cardinality {
            return Err(damaged(format!(
                "it holds {} rows where the log says {}",
                rows.len(),
                dv.cardinality
            )));
        }
        Ok(Arc::from(rows))
    }
}

/// The root of `table`, ending in `/` (relative vectors are joined to it).
pub(crate) fn table_root(table: &DeltaTable) -> Url {
    let mut root = table.log_store().root_url().clone();
    if !root.path().ends_with('/') {
        let path = format!("{}/", root.path());
        root.set_path(&path);
    }
    root
}

/// The file of a deletion vector stored in the table's folder, as a path in the table;
/// `None` inline or elsewhere.
pub(crate) fn file_of(dv: &DeletionVectorDescriptor, root: &Url) -> Option<String> {
    let url = KernelDv::try_from(dv.clone())
        .ok()?
        .absolute_path(root)
        .ok()??;
    let relative = root.make_relative(&url)?;
    (!relative.starts_with("../")).then(|| {
        object_store::path::Path::from_url_path(&relative)
            .map(|p| p.to_string())
            .unwrap_or(relative)
    })
}

/// Writes the deletion vectors of one commit (each the ascending rows one data file has
/// deleted) into one file at the table root, `deletion_vector_<uuid>.bin`; returns their
/// descriptors (storage type `u`: the uuid, z85-encoded, relative to the table), in order.
pub(crate) async fn write_vectors(
    store: &ObjectStoreRef,
    table: &str,
    vectors: &[&[u64]],
) -> Result<Vec<DeletionVectorDescriptor>> {
    let failed =
        |e: String| Error::internal(format!("writing a deletion vector of `{table}`: {e}"));
    let mut bytes = Vec::new();
    let mut writer = StreamingDeletionVectorWriter::new(&mut bytes);
    let mut written = Vec::with_capacity(vectors.len());
    for rows in vectors {
        let mut dv = KernelDeletionVector::new();
        dv.add_deleted_row_indexes(rows.iter());
        written.push(
            writer
                .write_deletion_vector(dv)
                .map_err(|e| failed(e.to_string()))?,
        );
    }
    writer.finalize().map_err(|e| failed(e.to_string()))?;
    let id = uuid::Uuid::new_v4();
    let path = object_store::path::Path::from(format!("deletion_vector_{id}.bin"));
    store
        .put(&path, bytes.into())
        .await
        .map_err(|e| Error::Store {
            context: format!("writing deletion vectors `{table}/{path}`"),
            source: e,
        })?;
    let encoded = z85::encode(id.as_bytes());
    Ok(written
        .into_iter()
        .map(|w| DeletionVectorDescriptor {
            storage_type: StorageType::UuidRelativePath,
            path_or_inline_dv: encoded.clone(),
            offset: Some(w.offset),
            size_in_bytes: w.size_in_bytes,
            cardinality: w.cardinality,
        })
        .collect())
}

/// The rows of `a` and `b` together (both ascending, result ascending, no repeats).
pub(crate) fn union(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                i += 1;
                j += 1;
                x
            }
            (Some(&x), Some(&y)) if x < y => {
                i += 1;
                x
            }
            (Some(&x), None) => {
                i += 1;
                x
            }
            (_, Some(&y)) => {
                j += 1;
                y
            }
            (None, None) => unreachable!("the loop runs while one is left"),
        };
        out.push(next);
    }
    out
}

/// The file rows (ascending) of `relative`, row numbers among the rows a deletion vector
/// leaves (ascending), given the rows it deletes (`deleted`, ascending).
pub(crate) fn absolute(relative: &[u64], deleted: &[u64]) -> Vec<u64> {
    let mut j = 0;
    relative
        .iter()
        .map(|&r| {
            while j < deleted.len() && deleted[j] <= r + j as u64 {
                j += 1;
            }
            r + j as u64
        })
        .collect()
}

/// The rows of `a` not in `b` (both ascending).
pub(crate) fn minus(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(a.len());
    let mut j = 0;
    for &x in a {
        while j < b.len() && b[j] < x {
            j += 1;
        }
        if j >= b.len() || b[j] != x {
            out.push(x);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{absolute, minus, union};

    #[test]
    fn minus_keeps_rows_only_in_the_first() {
        assert_eq!(minus(&[1, 3, 5, 9], &[0, 3, 4, 9, 10]), vec![1, 5]);
        assert_eq!(minus(&[], &[1]), Vec::<u64>::new());
        assert_eq!(minus(&[2, 4], &[]), vec![2, 4]);
    }

    #[test]
    fn union_merges_without_repeats() {
        assert_eq!(union(&[1, 3, 5], &[0, 3, 9]), vec![0, 1, 3, 5, 9]);
        assert_eq!(union(&[], &[2]), vec![2]);
        assert_eq!(union(&[2], &[]), vec![2]);
    }

    /// Checked against a plain model: the rows left, numbered in order.
    #[test]
    fn absolute_maps_rows_among_those_left_to_file_rows() {
        let total = 40u64;
        for deleted in [
            vec![],
            vec![0, 1, 2],
            vec![3, 7, 8, 20, 39],
            vec![5, 6, 7, 8, 9, 10],
        ] {
            let left: Vec<u64> = (0..total).filter(|r| !deleted.contains(r)).collect();
            let relative: Vec<u64> = (0..left.len() as u64).step_by(3).collect();
            let expected: Vec<u64> = relative.iter().map(|&r| left[r as usize]).collect();
            assert_eq!(
                absolute(&relative, &deleted),
                expected,
                "deleted {deleted:?}"
            );
        }
    }
}
