//! Deletion vectors: the rows of a data file that a commit marked deleted. Decoding (inline
//! z85, files relative to the table or at an absolute path, checksums) is delta-rs' kernel's.

use std::sync::Arc;

use delta_kernel::actions::deletion_vector::DeletionVectorDescriptor as KernelDv;
use deltalake::DeltaTable;
use deltalake::kernel::DeletionVectorDescriptor;
use url::Url;

use crate::error::{Error, Result};

/// Reads the deletion vectors of one table.
#[derive(Clone)]
pub(crate) struct DvReader {
    table: String,
    engine: Arc<dyn delta_kernel::Engine>,
    /// The table root, ending in `/` (relative vectors are joined to it).
    root: Url,
}

impl DvReader {
    /// A reader for the vectors of `table` (`name` in errors).
    pub fn new(name: &str, table: &DeltaTable) -> Self {
        let mut root = table.log_store().root_url().clone();
        if !root.path().ends_with('/') {
            let path = format!("{}/", root.path());
            root.set_path(&path);
        }
        Self {
            table: name.to_string(),
            engine: table.log_store().engine(None),
            root,
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
        let storage = self.engine.storage_handler();
        let root = self.root.clone();
        let rows = tokio::task::spawn_blocking(move || kernel_dv.row_indexes(storage, &root))
            .await
            .map_err(|e| Error::Internal(format!("a task reading a deletion vector failed: {e}")))?
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
    use super::minus;

    #[test]
    fn minus_keeps_rows_only_in_the_first() {
        assert_eq!(minus(&[1, 3, 5, 9], &[0, 3, 4, 9, 10]), vec![1, 5]);
        assert_eq!(minus(&[], &[1]), Vec::<u64>::new());
        assert_eq!(minus(&[2, 4], &[]), vec![2, 4]);
    }
}
