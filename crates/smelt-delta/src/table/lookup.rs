//! The guard's lookup: stored rows by key, from files probed on their key columns alone
//! (`lookup`, `lookup_aligned`, `probe`, `read_whole`), and what the lookups found
//! (`LookedUp`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::datatypes::{Schema, SchemaRef};
use deltalake::logstore::ObjectStoreRef;
use smelt_core::dedupe::KeyIndex;
use smelt_engine::ports::Aligned;

use super::DeltaLakeTable;
use super::batches::{key_columns, on_cores, read_whole};
use super::found::{Found, FoundRows};
use crate::error::{Context, Error, Result};
use crate::parquet::{self, FileRef};

/// The keys of the lookups at `version` and the files that hold any of them.
pub(super) struct LookedUp {
    pub(super) version: i64,
    pub(super) keys: Vec<KeyIndex>,
    pub(super) files: HashSet<String>,
    /// Merge-on-read: what the one lookup of this version found, so that marking those
    /// rows reads nothing again; `None` after a second lookup (each would hold its own
    /// rows).
    pub(super) found: Option<Found>,
}

/// The rows one file holds of the keys looked up.
struct Hit {
    path: String,
    /// Their numbers among the rows its deletion vector leaves (ascending).
    numbers: UInt32Array,
    /// The key row each matches.
    key_rows: UInt32Array,
    /// Their columns asked for.
    rows: RecordBatch,
}

/// What probing and reading every file found.
struct Finding {
    version: i64,
    index: KeyIndex,
    schema: SchemaRef,
    hits: Vec<Hit>,
}

impl DeltaLakeTable {
    /// `KeyedTable::lookup`: the stored rows whose key is in `keys`, in the order found.
    pub(super) async fn lookup(
        &self,
        keys: RecordBatch,
        columns: &[String],
    ) -> smelt_engine::Result<RecordBatch> {
        let index = KeyIndex::new(keys.columns())?;
        let read = self.columns_to_read(columns)?;
        let finding = self.find(&keys, index, &read).await?;
        let mut files = HashMap::with_capacity(finding.hits.len());
        let mut batches = Vec::with_capacity(finding.hits.len());
        let mut offset = 0u32;
        for hit in finding.hits {
            let len = hit.rows.num_rows() as u32;
            let at = UInt32Array::from_iter_values(offset..offset + len);
            files.insert(hit.path, (hit.numbers, at));
            batches.push(hit.rows);
            offset += len;
        }
        let rows = smelt_core::columns::concat(&finding.schema, &batches)?;
        drop(batches);
        let asked = rows.project(&(0..columns.len()).collect::<Vec<_>>())?;
        let paths = files.keys().cloned().collect();
        let found = Found {
            rows: FoundRows::Memory(rows),
            present: None,
            files,
        };
        self.remember(finding.version, finding.index, paths, Some(found));
        Ok(asked)
    }

    /// `KeyedTable::lookup_aligned`: the stored rows lined up with `keys` from the matches
    /// the probe found, without concatenating them first (keys that repeat are matched
    /// by key instead).
    pub(super) async fn lookup_aligned(
        &self,
        keys: RecordBatch,
        columns: &[String],
    ) -> smelt_engine::Result<Aligned> {
        let index = KeyIndex::new(keys.columns())?;
        // A stored row then matches several key rows.
        if index.len() != keys.num_rows() {
            drop(index);
            let found = self.lookup(keys.clone(), columns).await?;
            return Aligned::by_key(&keys, &found, columns);
        }
        let read = self.columns_to_read(columns)?;
        let finding = self.find(&keys, index, &read).await?;
        let lined = line_up(finding.hits, keys.num_rows(), &finding.schema)?;
        let (matched, rows) = (lined.matched, lined.rows);
        let paths = lined.files.keys().cloned().collect();
        // Stored rows that shared a key left some out of the lined-up rows: marking
        // reads them again.
        let asked = rows.columns()[..columns.len()].to_vec();
        let found = (!lined.shared).then(|| Found {
            rows: FoundRows::Memory(rows),
            present: Some(matched.clone()),
            files: lined.files,
        });
        self.remember(finding.version, finding.index, paths, found);
        Ok(Aligned {
            matched,
            columns: asked,
        })
    }

    /// The columns a lookup asking for `columns` reads: those first, then, merge-on-read
    /// writing change data, every other column of the table, so that marking takes the
    /// pre-images from the rows found instead of reading them again.
    fn columns_to_read(&self, columns: &[String]) -> Result<Vec<String>> {
        let mut read = columns.to_vec();
        if self.merge_on_read && self.writes_change_data() {
            let schema = self.current_schema(self.table()?)?;
            for f in schema.fields() {
                if !read.contains(f.name()) {
                    read.push(f.name().clone());
                }
            }
        }
        Ok(read)
    }

    /// Probes every file on the key columns for the keys of `index` (built over `keys`)
    /// and reads the `columns` of the rows found.
    async fn find(
        &self,
        keys: &RecordBatch,
        index: KeyIndex,
        columns: &[String],
    ) -> Result<Finding> {
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
        let index = Arc::new(index);
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
                    let (numbers, key_rows) = probe(
                        Arc::clone(&store),
                        &name,
                        &file,
                        &key_names,
                        &key_schema,
                        &index,
                    )
                    .await?;
                    if numbers.is_empty() {
                        return Ok(None);
                    }
                    let rows = read_whole(
                        store,
                        &name,
                        &file,
                        Some(&columns),
                        Some(numbers.values()),
                        &out_schema,
                    )
                    .await?;
                    if rows.num_rows() != numbers.len() {
                        return Err(Error::internal(format!(
                            "`{name}/{}`: {} rows found, {} read",
                            file.path,
                            numbers.len(),
                            rows.num_rows()
                        )));
                    }
                    Ok::<_, Error>(Some(Hit {
                        path: file.path,
                        numbers,
                        key_rows,
                        rows,
                    }))
                }
            })
            .collect();
        tracing::debug!(table = %name, files = total, probed = tasks.len(), "lookup");
        let hits = on_cores(&name, tasks)
            .await?
            .into_iter()
            .flatten()
            .collect();
        let version = table.version().map(|v| v as i64).unwrap_or_default();
        let index = Arc::try_unwrap(index)
            .map_err(|_| Error::internal(format!("a lookup task of `{name}` outlived it")))?;
        Ok(Finding {
            version,
            index,
            schema: out_schema,
            hits,
        })
    }

    /// Records a lookup at `version` of the keys of `index` for the commit: the `files`
    /// that hold any, and, merge-on-read, what it found (kept for marking: in memory up to
    /// [`DeltaLakeTable::with_found_in_memory`] bytes, else in a temporary file).
    fn remember(
        &self,
        version: i64,
        index: KeyIndex,
        files: HashSet<String>,
        found: Option<Found>,
    ) {
        let mut looked_up = self.looked_up.lock().expect("not poisoned");
        match looked_up.as_mut() {
            Some(seen) if seen.version == version => {
                seen.keys.push(index);
                seen.files.extend(files);
                seen.found = None;
            }
            _ => {
                let found = found.filter(|_| self.merge_on_read).map(|mut f| {
                    if let FoundRows::Memory(rows) = f.rows {
                        f.rows =
                            FoundRows::keep(rows, self.found_in_memory, &self.name.to_string());
                    }
                    f
                });
                *looked_up = Some(LookedUp {
                    version,
                    keys: vec![index],
                    files,
                    found,
                })
            }
        }
    }
}

/// Stored rows lined up with the key rows they matched.
struct LinedUp {
    /// Per key row: a stored row matched it.
    matched: BooleanArray,
    /// Per key row, the matched row's columns (NULL where none did).
    rows: RecordBatch,
    /// Per file, its rows' numbers and the key row each is lined up with.
    files: HashMap<String, (UInt32Array, UInt32Array)>,
    /// Stored rows shared a key: only the later one is lined up.
    shared: bool,
}

/// The rows of `hits` (all of `schema`) lined up with the `m` key rows they matched, one
/// copy of each column at a time.
fn line_up(hits: Vec<Hit>, m: usize, schema: &SchemaRef) -> Result<LinedUp> {
    // Per key row, the (file, row) lined up with it; unmatched rows point at a NULL row
    // appended after the files.
    let mut at = vec![(hits.len(), 0); m];
    let mut shared = false;
    for (file, hit) in hits.iter().enumerate() {
        if hit.key_rows.len() != hit.rows.num_rows() || hit.key_rows.null_count() > 0 {
            return Err(Error::internal(format!(
                "the lookup matched {} of the {} rows it read from `{}` to keys",
                hit.key_rows.len() - hit.key_rows.null_count(),
                hit.rows.num_rows(),
                hit.path
            )));
        }
        for (row, &key) in hit.key_rows.values().iter().enumerate() {
            let slot = at.get_mut(key as usize).ok_or_else(|| {
                Error::internal(format!(
                    "the lookup matched a row of `{}` to key row {key} of {m}",
                    hit.path
                ))
            })?;
            shared |= slot.0 != hits.len();
            *slot = (file, row);
        }
    }
    let matched = BooleanArray::from(
        at.iter()
            .map(|&(file, _)| file != hits.len())
            .collect::<Vec<_>>(),
    );
    let mut columns: Vec<Vec<ArrayRef>> = (0..schema.fields().len())
        .map(|_| Vec::with_capacity(hits.len() + 1))
        .collect();
    let mut files = HashMap::with_capacity(hits.len());
    for hit in hits {
        for (pieces, column) in columns.iter_mut().zip(hit.rows.columns()) {
            pieces.push(Arc::clone(column));
        }
        files.insert(hit.path, (hit.numbers, hit.key_rows));
    }
    for (pieces, field) in columns.iter_mut().zip(schema.fields()) {
        pieces.push(arrow::array::new_null_array(field.data_type(), 1));
    }
    // The pieces' only owners now: each column's go once it is lined up.
    let columns = smelt_core::columns::interleave(columns, &at)?;
    let nullable = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let rows = RecordBatch::try_new_with_options(
        nullable,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(m)),
    )?;
    Ok(LinedUp {
        matched,
        rows,
        files,
        shared,
    })
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

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Int64Array, StringArray};
    use arrow::compute::take_record_batch;
    use arrow::datatypes::{DataType, Field, Int64Type};
    use proptest::prelude::*;

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]))
    }

    /// Files of stored `(key row, value)` pairs as the probe finds them (key `k` is key
    /// row `k`), and the `m` keys.
    fn hits(files: &[Vec<(u32, Option<String>)>]) -> Vec<Hit> {
        files
            .iter()
            .enumerate()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(i, rows)| {
                let (keys, values): (Vec<u32>, Vec<Option<String>>) = rows.iter().cloned().unzip();
                Hit {
                    path: format!("part-{i}.parquet"),
                    numbers: UInt32Array::from_iter_values(0..rows.len() as u32),
                    key_rows: UInt32Array::from(keys.clone()),
                    rows: RecordBatch::try_new(
                        schema(),
                        vec![
                            Arc::new(Int64Array::from_iter_values(keys.iter().map(|&k| k as i64))),
                            Arc::new(StringArray::from(values)),
                        ],
                    )
                    .unwrap(),
                }
            })
            .collect()
    }

    proptest! {
        /// Lining rows up from the probe's matches agrees with matching them by key (the
        /// port's default, the oracle), and says where each file's rows went.
        #[test]
        fn lining_up_agrees_with_matching_by_key(
            m in 1usize..30,
            files in proptest::collection::vec(
                proptest::collection::vec((0u32..30, proptest::option::of("[a-c]{0,2}")), 0..12),
                0..5,
            ),
        ) {
            let files: Vec<Vec<(u32, Option<String>)>> = files
                .into_iter()
                .map(|f| f.into_iter().filter(|(k, _)| (*k as usize) < m).collect())
                .collect();
            let hits = hits(&files);
            let found: Vec<RecordBatch> = hits.iter().map(|h| h.rows.clone()).collect();
            let found = arrow::compute::concat_batches(&schema(), &found).unwrap();
            let expect_files: Vec<(String, RecordBatch)> =
                hits.iter().map(|h| (h.path.clone(), h.rows.clone())).collect();
            let keys = RecordBatch::try_new(
                Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)])),
                vec![Arc::new(Int64Array::from_iter_values(0..m as i64))],
            )
            .unwrap();
            let columns = ["v".to_string(), "k".to_string()];
            let by_key = Aligned::by_key(&keys, &found, &columns).unwrap();

            let lined = line_up(hits, m, &schema()).unwrap();
            prop_assert_eq!(&lined.matched, &by_key.matched);
            prop_assert_eq!(lined.rows.column(1), &by_key.columns[0]);
            prop_assert_eq!(lined.rows.column(0), &by_key.columns[1]);
            let mut seen = std::collections::HashSet::new();
            let shared = found
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .any(|k| !seen.insert(*k));
            prop_assert_eq!(lined.shared, shared);
            if !shared {
                for (path, rows) in expect_files {
                    let (_, at) = &lined.files[&path];
                    let placed = take_record_batch(&lined.rows, at).unwrap();
                    prop_assert_eq!(placed.columns(), rows.columns());
                }
            }
        }
    }
}
