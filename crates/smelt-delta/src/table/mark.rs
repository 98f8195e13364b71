//! Merge-on-read removal of stored rows (`write_mode: merge_on_read`): the rows replaced
//! or deleted by key are marked in each file's deletion vector (the rows it already had,
//! plus the new ones) and no data file is rewritten. One deletion vector file per commit
//! holds the vectors of every file marked; each marked file is removed and added again
//! with its new vector, as the Delta protocol has it. Pre-images go to change data as in
//! copy-on-write.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;
use arrow::datatypes::UInt32Type;
use deltalake::kernel::{Add, AddCDCFile};
use deltalake::logstore::ObjectStoreRef;
use smelt_core::dedupe::KeyIndex;

use super::batches::{on_cores, read_whole, with_change_type};
use super::found::{Found, marked_rows};
use super::lookup::probe;
use super::rewrite::{Rewrite, change_kinds};
use super::{ActiveFile, DeltaLakeTable};
use crate::dv;
use crate::error::Result;
use crate::parquet;

/// One file with rows newly marked deleted.
struct Marked {
    active: ActiveFile,
    /// Every row its new deletion vector deletes (ascending).
    deleted: Vec<u64>,
    cdc: Option<AddCDCFile>,
}

impl DeltaLakeTable {
    /// Marks the rows of `files` whose key is in `index` deleted (`deleted`: the keys
    /// deleted rather than replaced, for the change types); returns the file actions.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn mark(
        &self,
        files: Vec<ActiveFile>,
        found: Option<Found>,
        keys: &[String],
        schema: SchemaRef,
        index: Arc<KeyIndex>,
        deleted: Option<Arc<KeyIndex>>,
        change_data: bool,
    ) -> Result<Vec<Rewrite>> {
        let store = self.table()?.object_store();
        let name = self.name.to_string();
        let key_names: Arc<[String]> = keys.into();
        let key_schema: SchemaRef = {
            let idx = keys
                .iter()
                .map(|k| schema.index_of(k))
                .collect::<Result<Vec<_>, _>>()?;
            Arc::new(schema.project(&idx)?)
        };
        // What the lookup found, when it read every column or no pre-image is written: the
        // pre-images are those rows, written in one pass, and each file only has its rows
        // marked. Otherwise (several lookups, or the schema grew since) each file is probed
        // and its rows read again.
        let found = found.filter(|f| {
            if !change_data {
                return true;
            }
            let found_schema = f.rows.schema();
            schema
                .fields()
                .iter()
                .all(|field| found_schema.column_with_name(field.name()).is_some())
        });
        let mut shared_cdc = Vec::new();
        let (marked, mut found_files) = match found {
            Some(f) => {
                let (marked, before) = marked_rows(
                    f.rows,
                    f.present,
                    Arc::clone(&key_names),
                    Arc::clone(&schema),
                    Arc::clone(&index),
                    change_data,
                    &name,
                )
                .await?;
                if let Some(before) = before {
                    shared_cdc =
                        pre_images_of(&store, &name, before, keys, &schema, deleted.as_deref())
                            .await?;
                }
                (Some(Arc::new(marked)), f.files)
            }
            None => (None, Default::default()),
        };
        let tasks = files
            .into_iter()
            .map(|active| {
                let cached = found_files
                    .remove(&active.file.path)
                    .zip(marked.clone())
                    .map(|((numbers, at), marked)| Cached {
                        numbers,
                        at,
                        marked,
                    });
                let job = MarkJob {
                    store: Arc::clone(&store),
                    table: name.clone(),
                    keys: Arc::clone(&key_names),
                    key_schema: Arc::clone(&key_schema),
                    schema: Arc::clone(&schema),
                    index: Arc::clone(&index),
                    deleted: deleted.clone(),
                    change_data,
                };
                job.run(active, cached)
            })
            .collect();
        let marked: Vec<Marked> = on_cores(&name, tasks)
            .await?
            .into_iter()
            .flatten()
            .collect();
        // A file whose every row is deleted goes whole; the others get a vector.
        let (gone, kept): (Vec<Marked>, Vec<Marked>) = marked.into_iter().partition(|m| {
            m.active
                .rows
                .is_some_and(|left| m.deleted.len() >= left + m.active.deleted.len())
        });
        let vectors: Vec<&[u64]> = kept.iter().map(|m| m.deleted.as_slice()).collect();
        let descriptors = if vectors.is_empty() {
            Vec::new()
        } else {
            dv::write_vectors(&store, &name, &vectors).await?
        };
        let mut out = Vec::with_capacity(gone.len() + kept.len());
        for m in gone {
            out.push(Rewrite {
                remove: m.active.remove,
                adds: Vec::new(),
                cdc: m.cdc.into_iter().collect(),
            });
        }
        for (m, descriptor) in kept.into_iter().zip(descriptors) {
            out.push(Rewrite {
                remove: m.active.remove,
                adds: vec![with_vector(m.active.add, descriptor)],
                cdc: m.cdc.into_iter().collect(),
            });
        }
        match out.first_mut() {
            Some(first) => first.cdc.extend(shared_cdc),
            None if !shared_cdc.is_empty() => {
                return Err(crate::error::Error::internal(format!(
                    "pre-images of `{name}` written for rows no file holds"
                )));
            }
            None => {}
        }
        Ok(out)
    }
}

/// What the lookup found in one file: the numbers of its rows found, where each is among
/// the rows found (those of every file), and which of those this commit marks (their
/// pre-images are written already).
struct Cached {
    numbers: UInt32Array,
    at: UInt32Array,
    marked: Arc<BooleanArray>,
}

/// Writes `before`, the pre-images of the rows marked (found by the lookup, with every
/// column of `schema`), as change data, a file per core written at once; `deleted` keys
/// are deletes, the others replaced.
async fn pre_images_of(
    store: &ObjectStoreRef,
    table: &str,
    before: RecordBatch,
    keys: &[String],
    schema: &SchemaRef,
    deleted: Option<&KeyIndex>,
) -> Result<Vec<AddCDCFile>> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            before.column_by_name(f.name()).cloned().ok_or_else(|| {
                crate::error::Error::internal(format!(
                    "the lookup of `{table}` lost `{}`",
                    f.name()
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let before = RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(before.num_rows())),
    )?;
    let kinds = change_kinds(&before, keys, schema, deleted)?;
    let batch = with_change_type(&before, kinds)?;
    drop(before);
    let per_file = batch.num_rows().div_ceil(parquet::cores());
    let tasks = (0..batch.num_rows())
        .step_by(per_file.max(1))
        .map(|offset| {
            let part = batch.slice(offset, per_file.min(batch.num_rows() - offset));
            let (store, table, keys) = (Arc::clone(store), table.to_string(), keys.to_vec());
            async move { parquet::write_change_data(store, &table, &part, &keys).await }
        })
        .collect();
    on_cores(table, tasks).await
}

/// What marking one file needs (owned, for a task of its own).
struct MarkJob {
    store: ObjectStoreRef,
    table: String,
    keys: Arc<[String]>,
    key_schema: SchemaRef,
    schema: SchemaRef,
    index: Arc<KeyIndex>,
    deleted: Option<Arc<KeyIndex>>,
    change_data: bool,
}

impl MarkJob {
    /// The file's rows (not yet deleted) whose key is in the index, marked; `None` when it
    /// holds none. Unless the lookup found them (`cached`), only the key columns are read
    /// to find them, and only those rows whole (for the change data).
    async fn run(self, active: ActiveFile, cached: Option<Cached>) -> Result<Option<Marked>> {
        let pre_imaged = cached.is_some();
        let found = match cached {
            // The lookup may have found rows of keys this commit neither replaces nor
            // deletes.
            Some(Cached {
                numbers,
                at,
                marked,
            }) => {
                let hit = arrow::compute::take(marked.as_ref(), &at, None)?;
                arrow::compute::filter(&numbers, hit.as_boolean())?
                    .as_primitive::<UInt32Type>()
                    .clone()
            }
            None => {
                probe(
                    Arc::clone(&self.store),
                    &self.table,
                    &active.file,
                    &self.keys,
                    &self.key_schema,
                    &self.index,
                )
                .await?
                .0
            }
        };
        if found.is_empty() {
            return Ok(None);
        }
        let cdc = if self.change_data && !pre_imaged {
            let before = read_whole(
                Arc::clone(&self.store),
                &self.table,
                &active.file,
                None,
                Some(found.values()),
                &self.schema,
            )
            .await?;
            let kinds: ArrayRef =
                change_kinds(&before, &self.keys, &self.schema, self.deleted.as_deref())?;
            Some(
                parquet::write_change_data(
                    Arc::clone(&self.store),
                    &self.table,
                    &with_change_type(&before, kinds)?,
                    &self.keys,
                )
                .await?,
            )
        } else {
            None
        };
        let relative: Vec<u64> = found.values().iter().map(|&r| r as u64).collect();
        let rows = dv::absolute(&relative, &active.deleted);
        let deleted = dv::union(&active.deleted, &rows);
        debug_assert_eq!(deleted.len(), active.deleted.len() + found.len());
        Ok(Some(Marked {
            active,
            deleted,
            cdc,
        }))
    }
}

/// `add` again, with the deletion vector `descriptor`: a data change, and statistics no
/// longer tight (their bounds may be those of deleted rows), as the protocol asks.
fn with_vector(mut add: Add, descriptor: deltalake::kernel::DeletionVectorDescriptor) -> Add {
    add.deletion_vector = Some(descriptor);
    add.data_change = true;
    add.modification_time = chrono::Utc::now().timestamp_millis();
    if let Some(stats) = &add.stats
        && let Ok(serde_json::Value::Object(mut map)) = serde_json::from_str(stats)
    {
        map.insert("tightBounds".to_string(), serde_json::Value::Bool(false));
        add.stats = Some(serde_json::Value::Object(map).to_string());
    }
    add
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use deltalake::kernel::{Add, DeletionVectorDescriptor, StorageType};
    use deltalake::logstore::ObjectStoreRef;
    use object_store::ObjectStoreExt;
    use smelt_core::dedupe::KeyIndex;

    use super::{pre_images_of, with_vector};
    use crate::parquet::CHANGE_DATA_ROW_GROUP;
    use crate::table::found::{FoundRows, marked_rows};

    /// The pre-images of more found rows than a row group holds, split over cores, are
    /// the marked rows, each once, in the table's columns, with their change type (read
    /// back with Parquet's own reader) — whether the found rows waited in memory or in a
    /// temporary file.
    #[tokio::test]
    async fn pre_images_are_the_marked_rows_whole_across_row_groups() {
        for in_memory in [usize::MAX, 0] {
            pre_images_of_found_rows(in_memory).await;
        }
    }

    async fn pre_images_of_found_rows(in_memory: usize) {
        let n = 2 * CHANGE_DATA_ROW_GROUP + 7;
        let store: ObjectStoreRef = Arc::new(object_store::memory::InMemory::new());
        // The lookup read an extra column first; the table's columns are `id`, `val`.
        let rows = RecordBatch::try_from_iter([
            ("extra", Arc::new(Int64Array::from(vec![0; n])) as ArrayRef),
            (
                "val",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("v{i}")),
                )),
            ),
            ("id", Arc::new(Int64Array::from_iter_values(0..n as i64))),
        ])
        .unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("val", DataType::Utf8, true),
        ]));
        // Keys `i % 3 != 0` are replaced or deleted; the lined-up row of key 1 is no
        // stored row.
        let index: ArrayRef = Arc::new(Int64Array::from_iter_values(
            (0..n as i64).filter(|i| i % 3 != 0),
        ));
        let index = Arc::new(KeyIndex::new(&[index]).unwrap());
        let present = BooleanArray::from_iter((0..n).map(|i| Some(i != 1)));
        let deleted: ArrayRef = Arc::new(Int64Array::from_iter_values(0..100));
        let deleted = Arc::new(KeyIndex::new(&[deleted]).unwrap());
        let keys = ["id".to_string()];
        let found = FoundRows::keep(rows, in_memory, "t");
        assert_eq!(
            matches!(found, FoundRows::Spilling { .. }),
            in_memory == 0,
            "spilled past the size kept in memory"
        );
        let (marked, before) = marked_rows(
            found,
            Some(present),
            keys.as_slice().into(),
            Arc::clone(&schema) as _,
            index,
            true,
            "t",
        )
        .await
        .unwrap();
        let want_marked = BooleanArray::from_iter((0..n).map(|i| Some(i % 3 != 0 && i != 1)));
        assert_eq!(marked, want_marked);
        let cdc = pre_images_of(
            &store,
            "t",
            before.unwrap(),
            &keys,
            &(schema as _),
            Some(&deleted),
        )
        .await
        .unwrap();
        assert_eq!(cdc.len(), crate::parquet::cores(), "a file per core");
        let mut got: Vec<(i64, String, String)> = Vec::new();
        for file in &cdc {
            let location = object_store::path::Path::from(file.path.as_str());
            let bytes = store.get(&location).await.unwrap().bytes().await.unwrap();
            let reader =
                deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(
                    bytes,
                    1 << 20,
                )
                .unwrap();
            for batch in reader {
                let batch = batch.unwrap();
                let schema = batch.schema();
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                assert_eq!(names, ["id", "val", "_change_type"]);
                let ids = batch.column(0).as_primitive::<Int64Type>();
                let vals = batch.column(1).as_string::<i32>();
                let kinds = batch.column(2).as_string::<i32>();
                for i in 0..batch.num_rows() {
                    got.push((ids.value(i), vals.value(i).into(), kinds.value(i).into()));
                }
            }
        }
        got.sort();
        let want: Vec<(i64, String, String)> = (0..n as i64)
            .filter(|i| i % 3 != 0 && *i != 1)
            .map(|i| {
                let kind = if i < 100 { "delete" } else { "update_preimage" };
                (i, format!("v{i}"), kind.to_string())
            })
            .collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the pre-images differ from the marked rows");
    }

    #[test]
    fn a_file_added_again_with_a_vector_keeps_its_stats_but_not_their_tightness() {
        let add = Add {
            path: "part-0.parquet".into(),
            size: 10,
            data_change: false,
            stats: Some(r#"{"numRecords":5,"minValues":{"id":1}}"#.into()),
            ..Default::default()
        };
        let dv = DeletionVectorDescriptor {
            storage_type: StorageType::UuidRelativePath,
            path_or_inline_dv: "ab".into(),
            offset: Some(1),
            size_in_bytes: 20,
            cardinality: 2,
        };
        let again = with_vector(add, dv.clone());
        assert_eq!(again.deletion_vector, Some(dv));
        assert!(again.data_change);
        let stats: serde_json::Value =
            serde_json::from_str(again.stats.as_deref().unwrap()).unwrap();
        assert_eq!(stats["numRecords"], 5);
        assert_eq!(stats["tightBounds"], false);
    }
}
