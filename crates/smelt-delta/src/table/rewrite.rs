//! Copy-on-write removal of stored rows: files rewritten without the rows replaced or
//! deleted by key (`replace`; merge-on-read marks them instead, in `mark`) or matching a replace_where predicate (`delete_where`), with
//! their change data; tombstone expiry (`expire`); and the key and change type columns
//! this needs (`key_columns`, `with_change_type`).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow::compute::{filter_record_batch, not, prep_null_mask_filter};
use arrow::datatypes::{Schema, SchemaRef};
use deltalake::DeltaTable;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::{Add, AddCDCFile, Remove};
use deltalake::logstore::ObjectStoreRef;
use deltalake::protocol::DeltaOperation;
use deltalake::writer::RecordBatchWriter;
use smelt_core::change::{DELETE, UPDATE_PREIMAGE};
use smelt_core::dedupe::KeyIndex;
use smelt_engine::ports::{expired_rows, keys};
use smelt_engine::predicate::Predicate;

use super::batches::{key_columns, on_cores, read_whole, with_change_type, write_file};
use super::{ActiveFile, DeltaLakeTable};
use crate::error::{Error, Result};
use crate::parquet;

/// What rewriting one file did.
pub(super) struct Rewrite {
    pub(super) remove: Remove,
    pub(super) adds: Vec<Add>,
    pub(super) cdc: Vec<AddCDCFile>,
}

impl DeltaLakeTable {
    /// The table, whether it keeps change data, and its schema as this run writes it: what
    /// a rewrite of its files needs.
    fn to_rewrite(&self) -> Result<(DeltaTable, bool, SchemaRef)> {
        let table = self.table()?.clone();
        let change_data = self.writes_change_data();
        let schema = self.current_schema(&table)?;
        Ok((table, change_data, schema))
    }

    /// Rewrites the files holding rows where `predicate` is true without them (`delete`
    /// change data for the rows removed); returns the rewrites and the rows removed.
    pub(super) async fn delete_where(
        &self,
        predicate: &Predicate,
    ) -> Result<(Vec<Rewrite>, usize)> {
        let name = self.name.to_string();
        let predicate = predicate.clone();
        self.delete_matching(
            |_| true,
            move |stored: &RecordBatch, path: &str| {
                predicate.evaluate(stored).map_err(|e| {
                    Error::user(
                        format!("`{name}` file `{path}`: {e}"),
                        "check the predicate against the table's columns",
                    )
                })
            },
        )
        .await
    }

    /// Rewrites the files holding rows `hit` marks (NULL: not hit) without them (`delete`
    /// change data for the rows removed); returns the rewrites and the rows removed.
    /// Only files `may_hold` says may hold such rows are read.
    async fn delete_matching(
        &self,
        may_hold: impl Fn(&ActiveFile) -> bool,
        hit: impl Fn(&RecordBatch, &str) -> Result<BooleanArray> + Clone + Send + Sync + 'static,
    ) -> Result<(Vec<Rewrite>, usize)> {
        let (table, change_data, schema) = self.to_rewrite()?;
        let store = table.object_store();
        let name = self.name.to_string();
        let tasks = self
            .active_files(&table)
            .await?
            .into_iter()
            .filter(|f| may_hold(f))
            .map(|active| {
                let writer = self.writer(&schema, &[])?;
                let (store, name, schema, hit) = (
                    Arc::clone(&store),
                    name.clone(),
                    Arc::clone(&schema),
                    hit.clone(),
                );
                Ok(async move {
                    let stored =
                        read_whole(Arc::clone(&store), &name, &active.file, None, None, &schema)
                            .await?;
                    let hit = hit(&stored, &active.file.path)?;
                    let hit = if hit.null_count() > 0 {
                        prep_null_mask_filter(&hit)
                    } else {
                        hit
                    };
                    let n = hit.true_count();
                    if n == 0 {
                        return Ok(None);
                    }
                    let kinds = change_data.then(|| {
                        let kinds: ArrayRef = Arc::new(StringArray::from(vec![DELETE; n]));
                        (kinds, &[][..])
                    });
                    let rewrite =
                        rewrite_without(store, name, active, &stored, &hit, kinds, writer).await?;
                    Ok(Some((rewrite, n)))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let done = on_cores(&name, tasks).await?;
        let rows = done.iter().flatten().map(|(_, n)| n).sum();
        Ok((done.into_iter().flatten().map(|(r, _)| r).collect(), rows))
    }

    /// Rewrites the files holding any of the keys `replaced` or `deleted` (key columns,
    /// `keys` order) without those rows: every file on a first write, else only the files
    /// the lookups of this version found the keys in.
    pub(super) async fn replace(
        &self,
        replaced: &[Vec<ArrayRef>],
        deleted: &[Vec<ArrayRef>],
        keys: &[String],
    ) -> Result<Vec<Rewrite>> {
        let (table, change_data, schema) = self.to_rewrite()?;
        let version = table.version().map(|v| v as i64).unwrap_or_default();
        let concat_keys = |sets: &mut dyn Iterator<Item = &Vec<ArrayRef>>| {
            let sets: Vec<&Vec<ArrayRef>> = sets.collect();
            (0..keys.len())
                .map(|i| {
                    let parts: Vec<&dyn Array> = sets.iter().map(|r| r[i].as_ref()).collect();
                    arrow::compute::concat(&parts)
                })
                .collect::<Result<Vec<ArrayRef>, _>>()
        };
        let columns = concat_keys(&mut replaced.iter().chain(deleted))?;
        let index = Arc::new(KeyIndex::new(&columns)?);
        let deleted_index = if deleted.is_empty() {
            None
        } else {
            Some(Arc::new(KeyIndex::new(&concat_keys(&mut deleted.iter())?)?))
        };

        let mut files = self.active_files(&table).await?;
        let mut found = None;
        if let Some(seen) = self.looked_up.lock().expect("not poisoned").take()
            && seen.version == version
        {
            // Every replaced key must have been looked up; then only the files the
            // lookups found keys in can hold it.
            let mut covered = BooleanArray::from(vec![false; columns[0].len()]);
            for looked in &seen.keys {
                let found = arrow::compute::is_not_null(&looked.positions(&columns)?)?;
                covered = arrow::compute::or(&covered, &found)?;
            }
            if covered.true_count() == covered.len() {
                files.retain(|f| seen.files.contains(&f.file.path));
                found = seen.found;
            }
        }
        if self.merge_on_read {
            return self
                .mark(
                    files,
                    found,
                    keys,
                    schema,
                    index,
                    deleted_index,
                    change_data,
                )
                .await;
        }
        let store = table.object_store();
        let name = self.name.to_string();
        let key_names: Arc<[String]> = keys.into();
        let tasks = files
            .into_iter()
            .map(|active| {
                Ok(rewrite(
                    Arc::clone(&store),
                    name.clone(),
                    active,
                    Arc::clone(&key_names),
                    Arc::clone(&schema),
                    Arc::clone(&index),
                    deleted_index.clone(),
                    self.writer(&schema, keys)?,
                    change_data,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let rewrites = on_cores(&name, tasks).await?;
        Ok(rewrites.into_iter().flatten().collect())
    }

    /// `TableSink::expire`: rewrites the files holding rows whose `column` is before
    /// `before_us` without them, in a commit of its own (no watermark: expiring again is
    /// harmless). Deletion vectors are applied, so rows deleted already stay deleted.
    pub(super) async fn expire(
        &mut self,
        column: &str,
        before_us: i64,
    ) -> smelt_engine::Result<usize> {
        if self.table.is_none() {
            return Ok(0);
        }
        let (name, col) = (self.name.clone(), column.to_string());
        // A file whose least value of the column (its statistics) is not before the bound
        // holds no row to expire.
        let (stats_column, bound_ms) = (column.to_string(), before_us.div_euclid(1000));
        let may_hold = move |f: &ActiveFile| {
            let least = f
                .add
                .stats
                .as_deref()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
                .and_then(|s| s["minValues"][&stats_column].as_str().map(str::to_string))
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok());
            least.is_none_or(|t| t.timestamp_millis() < bound_ms + 1)
        };
        let (rewrites, rows) = self
            .delete_matching(may_hold, move |stored: &RecordBatch, _| {
                Ok(expired_rows(stored, &name, &col, before_us)?)
            })
            .await?;
        if rows == 0 {
            return Ok(0);
        }
        let mut actions = Vec::new();
        for r in rewrites {
            actions.push(Action::Remove(r.remove));
            actions.extend(r.adds.into_iter().map(Action::Add));
            actions.extend(r.cdc.into_iter().map(Action::Cdc));
        }
        let before = chrono::DateTime::from_timestamp_micros(before_us)
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|| before_us.to_string());
        let props = CommitProperties::default()
            .with_metadata([(
                keys::OPERATION.to_string(),
                serde_json::json!("expire rows"),
            )])
            .with_max_retries(0);
        let operation = DeltaOperation::Delete {
            predicate: Some(format!("{column} < '{before}'")),
        };
        self.commit_actions(actions, operation, props).await?;
        Ok(rows)
    }
}

/// Rewrites `file` without the rows whose key is in `index`; `None` when it holds none.
#[allow(clippy::too_many_arguments)]
async fn rewrite(
    store: ObjectStoreRef,
    table: String,
    active: ActiveFile,
    keys: Arc<[String]>,
    schema: SchemaRef,
    index: Arc<KeyIndex>,
    deleted: Option<Arc<KeyIndex>>,
    writer: RecordBatchWriter,
    change_data: bool,
) -> Result<Option<Rewrite>> {
    let stored = read_whole(
        Arc::clone(&store),
        &table,
        &active.file,
        None,
        None,
        &schema,
    )
    .await?;
    let positions = index.positions(&key_columns(&stored, &keys, &schema)?)?;
    if positions.null_count() == positions.len() {
        return Ok(None);
    }
    let hit = arrow::compute::is_not_null(&positions)?;
    let kinds = if change_data {
        let before = filter_record_batch(&stored, &hit)?;
        Some((
            change_kinds(&before, &keys, &schema, deleted.as_deref())?,
            &keys[..],
        ))
    } else {
        None
    };
    Ok(Some(
        rewrite_without(store, table, active, &stored, &hit, kinds, writer).await?,
    ))
}

/// The change types of stored rows `before` that leave: `delete` for keys in `deleted`,
/// `update_preimage` for the others.
pub(super) fn change_kinds(
    before: &RecordBatch,
    keys: &[String],
    schema: &Schema,
    deleted: Option<&KeyIndex>,
) -> Result<ArrayRef> {
    Ok(match deleted {
        Some(deleted) => {
            let gone = deleted.positions(&key_columns(before, keys, schema)?)?;
            Arc::new(StringArray::from_iter_values(
                gone.iter()
                    .map(|p| if p.is_some() { DELETE } else { UPDATE_PREIMAGE }),
            ))
        }
        None => Arc::new(StringArray::from(vec![UPDATE_PREIMAGE; before.num_rows()])),
    })
}

/// Rewrites `active` (whose rows are `stored`) without the rows `hit` marks; with `kinds`
/// (their change types, and the table's key columns), writes them as change data too.
async fn rewrite_without(
    store: ObjectStoreRef,
    table: String,
    active: ActiveFile,
    stored: &RecordBatch,
    hit: &BooleanArray,
    kinds: Option<(ArrayRef, &[String])>,
    writer: RecordBatchWriter,
) -> Result<Rewrite> {
    let survivors = filter_record_batch(stored, &not(hit)?)?;
    let adds = if survivors.num_rows() > 0 {
        write_file(writer, survivors, table.clone()).await?
    } else {
        Vec::new()
    };
    let cdc = match kinds {
        Some((kinds, keys)) => {
            let before = filter_record_batch(stored, hit)?;
            let batch = with_change_type(&before, kinds)?;
            vec![parquet::write_change_data(store, &table, &batch, keys).await?]
        }
        None => Vec::new(),
    };
    Ok(Rewrite {
        remove: active.remove,
        adds,
        cdc,
    })
}
