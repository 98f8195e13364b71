//! What every step of a table's reads and writes uses: key columns, rows lined up with the
//! table's schema, change-data rows, whole-file reads, data-file writes, and file tasks
//! run on all cores.

use std::future::Future;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use deltalake::kernel::Add;
use deltalake::logstore::ObjectStoreRef;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use futures::{StreamExt, TryStreamExt};
use smelt_core::change::CHANGE_TYPE;

use crate::error::{Context, Error, Result};
use crate::parquet::{self, FileRef};

/// The key columns of `batch`, in `keys` order, cast to their type in `schema` where
/// they differ. `batch` is lined up with the table's schema, so every key is there.
pub(super) fn key_columns(
    batch: &RecordBatch,
    keys: &[String],
    schema: &Schema,
) -> Result<Vec<ArrayRef>> {
    keys.iter()
        .map(|k| {
            let t = schema.field_with_name(k)?.data_type();
            let c = batch.column_by_name(k).ok_or_else(|| {
                Error::user(
                    format!("key column `{k}` is missing from the silver rows"),
                    "the silver table does not match the flow; rebuild it with `smelt run --full-refresh`",
                )
            })?;
            Ok(if c.data_type() == t {
                Arc::clone(c)
            } else {
                arrow::compute::cast(c, t)?
            })
        })
        .collect()
}

/// `batch` with a `_change_type` column of `kinds` appended (a change data file's rows).
pub(super) fn with_change_type(batch: &RecordBatch, kinds: ArrayRef) -> Result<RecordBatch> {
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(CHANGE_TYPE, DataType::Utf8, true));
    let mut columns = batch.columns().to_vec();
    columns.push(kinds);
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// `rows` with the table's schema (same columns; field metadata and nullability as the
/// table declares them).
pub(super) fn align_to(rows: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            let c = rows.column_by_name(f.name()).ok_or_else(|| {
                Error::user(
                    format!("silver column `{}` is missing from the rows to write", f.name()),
                    "the silver table does not match the flow; rebuild it with `smelt run --full-refresh`",
                )
            })?;
            Ok(if c.data_type() == f.data_type() {
                Arc::clone(c)
            } else {
                arrow::compute::cast(c, f.data_type())?
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
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

/// Writes one chunk as data file(s) and returns their `add` actions.
/// The order that sorts `rows` by `keys` (ascending, NULLs first), `None` without keys or
/// when they are in order already. Written in it, a table's files hold key ranges that do
/// not overlap, which the guard's lookup skips by their statistics (`prune`) when the keys
/// an increment writes are clustered (new keys above the stored ones, recent keys changing).
pub(super) fn key_order(rows: &RecordBatch, keys: &[String]) -> Result<Option<UInt32Array>> {
    if keys.is_empty() || rows.num_rows() < 2 {
        return Ok(None);
    }
    let columns = keys
        .iter()
        .map(|k| {
            let values = rows
                .column_by_name(k)
                .cloned()
                .ok_or_else(|| Error::internal(format!("rows to write lack key `{k}`")))?;
            Ok(arrow::compute::SortColumn {
                values,
                options: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let order = arrow::compute::lexsort_to_indices(&columns, None)?;
    let in_order = order
        .values()
        .iter()
        .enumerate()
        .all(|(i, &row)| row as usize == i);
    Ok((!in_order).then_some(order))
}

pub(super) async fn write_file(
    mut writer: RecordBatchWriter,
    rows: RecordBatch,
    table: String,
) -> Result<Vec<Add>> {
    writer
        .write(rows)
        .await
        .context(|| format!("writing a data file of `{table}`"))?;
    writer
        .flush()
        .await
        .context(|| format!("writing a data file of `{table}`"))
}

/// Runs file tasks of `table` on the runtime's threads, as many at once as there are
/// cores (so a few files are in memory at a time); results in task order.
pub(super) async fn on_cores<T, F>(table: &str, tasks: Vec<F>) -> Result<Vec<T>>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    futures::stream::iter(tasks)
        .map(|task| async move {
            tokio::spawn(task).await.map_err(|e| {
                Error::internal(format!("a task reading or writing `{table}` failed: {e}"))
            })?
        })
        .buffered(parquet::cores())
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};

    use super::key_order;

    #[test]
    fn rows_are_written_in_key_order_and_rows_in_order_are_left_alone() {
        let rows = RecordBatch::try_from_iter([
            (
                "k",
                Arc::new(StringArray::from(vec![
                    Some("b"),
                    None,
                    Some("a"),
                    Some("b"),
                ])) as ArrayRef,
            ),
            (
                "n",
                Arc::new(Int64Array::from(vec![2, 9, 5, 1])) as ArrayRef,
            ),
        ])
        .unwrap();
        let keys = ["k".to_string(), "n".to_string()];
        let order = key_order(&rows, &keys).unwrap().unwrap();
        assert_eq!(
            order.values(),
            &[1, 2, 3, 0],
            "NULL first, then a, then b by n"
        );
        let sorted = arrow::compute::take_record_batch(&rows, &order).unwrap();
        assert!(key_order(&sorted, &keys).unwrap().is_none());
        assert!(key_order(&rows, &[]).unwrap().is_none());
    }
}
