//! The guard's lookup: stored rows by key, from files probed on their key columns alone
//! (`lookup`, `probe`, `read_whole`), and what the lookups found (`LookedUp`).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;
use deltalake::logstore::ObjectStoreRef;
use smelt_core::dedupe::KeyIndex;

use super::DeltaSilver;
use super::rewrite::key_columns;
use super::write::on_cores;
use crate::error::{Context, Error, Result};
use crate::parquet::{self, FileRef};

/// The keys of the lookups at `version` and the files that hold any of them.
pub(super) struct LookedUp {
    pub(super) version: i64,
    pub(super) keys: Vec<KeyIndex>,
    pub(super) files: HashSet<String>,
    /// Merge-on-read: what the one lookup of this version found, by file, so that marking
    /// those rows reads nothing again; `None` after a second lookup (each would hold its
    /// own rows) or past [`FOUND_BUDGET`] bytes.
    pub(super) found: Option<Found>,
}

/// What a lookup found: per file, its rows (numbered among those its deletion vector
/// leaves, ascending) and those rows' `columns`.
pub(super) struct Found {
    pub(super) columns: Vec<String>,
    pub(super) files: std::collections::HashMap<String, (UInt32Array, RecordBatch)>,
}

/// The most bytes of found rows kept for marking; beyond, marking reads them again.
const FOUND_BUDGET: usize = 512 << 20;

impl DeltaSilver {
    /// `KeyedTable::lookup_matched`: probes every file on the key columns, reads the rows
    /// found, and records the keys and files for the commit. With each row found, the row
    /// of `keys` it matches, when `keys` are distinct.
    pub(super) async fn lookup(
        &self,
        keys: RecordBatch,
        columns: &[String],
    ) -> smelt_engine::Result<(RecordBatch, Option<UInt32Array>)> {
        let table = self.table()?;
        // With columns being added, stored rows read them as NULL.
        let silver = self.current_schema(table)?;
        let key_names: Arc<[String]> = keys
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let project = |names: &[String]| -> Result<SchemaRef> {
            let idx = names
                .iter()
                .map(|n| silver.index_of(n))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(silver.project(&idx)?))
        };
        let key_schema = project(&key_names)?;
        let out_schema = project(columns)?;
        let index = Arc::new(KeyIndex::new(keys.columns())?);
        let store = table.object_store();
        let name = self.name.to_string();
        let columns: Arc<[String]> = columns.into();
        let state = table.snapshot().context(|| format!("reading `{name}`"))?;
        let to_probe = super::prune::files_to_probe(state, &key_names[0], keys.column(0))?;
        let active = self.active_files(table).await?;
        let total = active.len();
        let tasks: Vec<_> = active
            .into_iter()
            .filter(|a| {
                to_probe
                    .as_ref()
                    .is_none_or(|p| p.get(a.index) != Some(&false))
            })
            .map(|active| {
                let (store, name, index) = (Arc::clone(&store), name.clone(), Arc::clone(&index));
                let (key_names, key_schema) = (Arc::clone(&key_names), Arc::clone(&key_schema));
                let (columns, out_schema) = (Arc::clone(&columns), Arc::clone(&out_schema));
                async move {
                    let file = active.file;
                    let (rows, key_rows) = probe(
                        Arc::clone(&store),
                        &name,
                        &file,
                        &key_names,
                        &key_schema,
                        &index,
                    )
                    .await?;
                    if rows.is_empty() {
                        return Ok((file.path, None));
                    }
                    let hits = read_whole(
                        store,
                        &name,
                        &file,
                        Some(&columns),
                        Some(rows.values()),
                        &out_schema,
                    )
                    .await?;
                    if hits.num_rows() != rows.len() {
                        return Err(Error::Internal(format!(
                            "`{name}/{}`: {} rows found, {} read",
                            file.path,
                            rows.len(),
                            hits.num_rows()
                        )));
                    }
                    Ok::<_, Error>((file.path, Some((rows, key_rows, hits))))
                }
            })
            .collect();
        tracing::debug!(table = %name, files = total, probed = tasks.len(), "lookup");
        let found = on_cores(&name, tasks).await?;
        let mut files = HashSet::new();
        let mut batches = Vec::new();
        let mut bytes = 0;
        // A stored row matches one row of `keys` only when no key repeats (the port's rule).
        let distinct = index.len() == keys.num_rows();
        let mut key_rows = Vec::new();
        // Each file's rows as (path, row numbers, offset, length) in the concatenation.
        let mut spans = Vec::new();
        let mut offset = 0;
        for (path, hits) in found {
            if let Some((rows, matched, hits)) = hits {
                files.insert(path.clone());
                if distinct {
                    key_rows.extend_from_slice(matched.values());
                }
                if self.merge_on_read {
                    bytes += hits.get_array_memory_size();
                    spans.push((path, rows, offset, hits.num_rows()));
                }
                offset += hits.num_rows();
                batches.push(hits);
            }
        }
        let version = table.version().map(|v| v as i64).unwrap_or_default();
        let rows = smelt_core::columns::concat(&out_schema, &batches)?;
        drop(batches);
        // The rows kept for marking are slices of the one batch returned, not a second copy.
        let found = (self.merge_on_read && bytes <= FOUND_BUDGET).then(|| Found {
            columns: columns.to_vec(),
            files: spans
                .into_iter()
                .map(|(path, numbers, offset, len)| (path, (numbers, rows.slice(offset, len))))
                .collect(),
        });
        let mut looked_up = self.looked_up.lock().expect("not poisoned");
        match (Arc::try_unwrap(index), looked_up.as_mut()) {
            (Ok(index), Some(seen)) if seen.version == version => {
                seen.keys.push(index);
                seen.files.extend(files);
                seen.found = None;
            }
            (Ok(index), _) => {
                *looked_up = Some(LookedUp {
                    version,
                    keys: vec![index],
                    files,
                    found,
                })
            }
            // Cannot happen (every task is done), and only costs probing every file.
            (Err(_), _) => *looked_up = None,
        }
        Ok((rows, distinct.then(|| UInt32Array::from(key_rows))))
    }
}

/// The rows of a file (ascending) whose key is in `index`, read from the key columns alone,
/// and the row of the index each matches.
pub(super) async fn probe(
    store: ObjectStoreRef,
    table: &str,
    file: &FileRef,
    keys: &[String],
    key_schema: &SchemaRef,
    index: &KeyIndex,
) -> Result<(UInt32Array, UInt32Array)> {
    let batches = parquet::read(store, table, file, Some(keys), None, false).await?;
    let (mut rows, mut matched) = (Vec::new(), Vec::new());
    let mut offset = 0u32;
    for batch in &batches {
        let batch = parquet::conform(batch, file, key_schema)?;
        let positions = index.positions(&key_columns(&batch, keys, key_schema)?)?;
        for (i, p) in positions.iter().enumerate() {
            if let Some(p) = p {
                rows.push(offset + i as u32);
                matched.push(p);
            }
        }
        offset += batch.num_rows() as u32;
    }
    Ok((UInt32Array::from(rows), UInt32Array::from(matched)))
}

/// Reads a file (or the rows `rows` of it) lined up with `schema`, as one batch.
pub(super) async fn read_whole(
    store: ObjectStoreRef,
    table: &str,
    file: &FileRef,
    columns: Option<&[String]>,
    rows: Option<&[u32]>,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let batches = parquet::read(store, table, file, columns, rows, false).await?;
    let batches = batches
        .iter()
        .map(|b| parquet::conform(b, file, schema))
        .collect::<Result<Vec<_>>>()?;
    Ok(arrow::compute::concat_batches(schema, &batches)?)
}
