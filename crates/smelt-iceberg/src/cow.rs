//! Copy-on-write over an Iceberg table's live data files: the stored rows with some keys
//! (the guard's lookup), and the files that hold keys being replaced or deleted, rewritten
//! without those rows (and without the rows delete files had removed).

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::{concat_batches, is_not_null};
use arrow::datatypes::SchemaRef;
use futures::{StreamExt, TryStreamExt, stream};
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::scan::FileScanTask;
use iceberg::table::Table;
use smelt_core::dedupe::KeyIndex;
use smelt_spec::TableName;

use crate::bridge;
use crate::error::{Context, Error, Result};

/// The live data files of `table`'s current snapshot, as read tasks of the columns
/// `select` (all when `None`), with the delete files that apply (a read applies them: a
/// file rewritten from it keeps only its live rows).
pub(crate) async fn live_files(
    name: &TableName,
    table: &Table,
    select: Option<&[String]>,
) -> Result<Vec<FileScanTask>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(Vec::new());
    };
    crate::manifests::scan_tasks(name, table, snapshot, select).await
}

/// The rows of one data file (smelt's schema, `schema`): columns added in this run, which
/// the committed table lacks, read as NULL.
pub(crate) async fn read_file(
    name: &TableName,
    table: &Table,
    task: FileScanTask,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let path = task.data_file_path.clone();
    let runtime = iceberg::Runtime::try_current().context(|| "the tokio runtime".to_string())?;
    let reader = ArrowReaderBuilder::new(table.file_io().clone(), runtime)
        .with_data_file_concurrency_limit(1)
        .with_batch_size(64 * 1024)
        .build();
    let batches: Vec<_> = reader
        .read(stream::iter([Ok(task)]).boxed())
        .map_err(|e| data_file_error(name, &path, e))?
        .stream()
        .try_collect()
        .await
        .map_err(|e| data_file_error(name, &path, e))?;
    // The columns read, in `schema`'s order.
    let read: Vec<usize> = (0..schema.fields().len())
        .filter(|&i| committed(table, schema.field(i).name()))
        .collect();
    let read_schema: SchemaRef = Arc::new(schema.project(&read)?);
    batches
        .into_iter()
        .map(|b| {
            let b = bridge::batch_from_58(b, &read_schema)?;
            if read.len() == schema.fields().len() {
                return Ok(b);
            }
            let columns = schema
                .fields()
                .iter()
                .map(|f| match b.column_by_name(f.name()) {
                    Some(c) => c.clone(),
                    None => arrow::array::new_null_array(f.data_type(), b.num_rows()),
                })
                .collect();
            Ok(RecordBatch::try_new(schema.clone(), columns)?)
        })
        .collect()
}

/// Whether the table's committed schema has column `name`.
pub(crate) fn committed(table: &Table, name: &str) -> bool {
    table
        .metadata()
        .current_schema()
        .field_by_name(name)
        .is_some()
}

/// The key columns `keys` of `batch`.
pub(crate) fn key_columns(batch: &RecordBatch, keys: &[String]) -> Result<Vec<ArrayRef>> {
    keys.iter()
        .map(|k| {
            batch.column_by_name(k).cloned().ok_or_else(|| {
                Error::user(format!("no key column `{k}` in the table"), "check `keys`")
            })
        })
        .collect()
}

/// Which rows of `batch` have a key of `index` (true) and which do not.
pub(crate) fn matches(
    index: &KeyIndex,
    batch: &RecordBatch,
    keys: &[String],
) -> Result<BooleanArray> {
    let positions = index.positions(&key_columns(batch, keys)?).map_err(|e| {
        Error::user(
            e.to_string(),
            "the key columns' types must match the table's",
        )
    })?;
    Ok(is_not_null(&positions)?)
}

/// An index of the keys in `batches` (key columns only), `None` when there are none.
pub(crate) fn keys_of(batches: &[RecordBatch]) -> Result<Option<KeyIndex>> {
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let all = concat_batches(&first.schema(), batches)?;
    if all.num_rows() == 0 {
        return Ok(None);
    }
    let index =
        KeyIndex::new(all.columns()).map_err(|e| Error::user(e.to_string(), "check `keys`"))?;
    Ok(Some(index))
}

/// The error of reading data file `path` of `name`: gone from the store, or (the reader's
/// `DataInvalid`) not Parquet, are damage the user fixes; any other failure stays the
/// storage error it is.
fn data_file_error(name: &TableName, path: &str, e: iceberg::Error) -> Error {
    let missing = std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |c| {
        c.source()
    })
    .any(|c| {
        matches!(
            c.downcast_ref::<object_store::Error>(),
            Some(object_store::Error::NotFound { .. })
        )
    });
    let invalid = crate::manifests::data_invalid(&e).is_some();
    let restore = format!(
        "restore it from a backup (or the store's object versions), or {}; nothing was committed",
        crate::manifests::ROLL_BACK
    );
    let (message, hint) = if missing {
        (
            format!(
                "Iceberg table `{name}` lists data file `{path}`, which the store does not have"
            ),
            format!(
                "it was deleted by hand, or by an expiry or cleanup that went too far: {restore}"
            ),
        )
    } else if invalid {
        (
            format!(
                "Iceberg table `{name}`: its data file `{path}` is not a readable Parquet file"
            ),
            format!("the file its manifests list is damaged or was overwritten: {restore}"),
        )
    } else {
        return Error::Iceberg {
            context: format!("reading `{path}` of `{name}`"),
            source: Box::new(e),
        };
    };
    Error::Engine(smelt_engine::EngineError::Damaged {
        message,
        source: Some(Box::new(e)),
        hint,
    })
}
