//! Merge-on-read deletes as changes: the position-delete files a snapshot adds (Spark, Flink
//! and Trino write them for `DELETE`, `UPDATE` and `MERGE` in merge-on-read mode) name rows
//! of live data files by position; those rows are the snapshot's deletes. And the delete
//! files live at a snapshot, so that a data file removed later is read without the rows
//! they had already deleted.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{BooleanArray, BooleanBufferBuilder};
use arrow58_array::cast::AsArray;
use arrow58_array::types::Int64Type;
use futures::{StreamExt, TryStreamExt, stream};
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::scan::{FileScanTask, FileScanTaskDeleteFile};
use iceberg::spec::{
    DataFileFormat, ManifestContentType, NestedField, PrimitiveType, Schema, SnapshotRef, Type,
};
use iceberg::table::Table;
use smelt_spec::TableName;

use crate::error::{Context, Error, Result};
use crate::manifests;

/// Reserved field ids of a position-delete file's columns (Iceberg spec).
const FILE_PATH_ID: i32 = 2_147_483_546;
const POS_ID: i32 = 2_147_483_545;

/// A position-delete file a snapshot added.
#[derive(Debug, Clone)]
pub(crate) struct PositionDeleteFile {
    pub path: String,
    pub size: u64,
    pub format: DataFileFormat,
}

/// The rows `files` delete: per data file path (in the order first named), its deleted
/// positions, sorted and distinct.
pub(crate) async fn read(
    name: &TableName,
    table: &Table,
    files: &[PositionDeleteFile],
) -> Result<Vec<(String, Arc<Vec<u64>>)>> {
    let schema = Arc::new(
        Schema::builder()
            .with_fields([
                Arc::new(NestedField::required(
                    FILE_PATH_ID,
                    "file_path",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::required(
                    POS_ID,
                    "pos",
                    Type::Primitive(PrimitiveType::Long),
                )),
            ])
            .build()
            .context(|| "the position-delete schema".to_string())?,
    );
    let mut order: Vec<String> = Vec::new();
    let mut positions: HashMap<String, Vec<u64>> = HashMap::new();
    for file in files {
        let task = FileScanTask {
            file_size_in_bytes: file.size,
            start: 0,
            length: file.size,
            record_count: None,
            data_file_path: file.path.clone(),
            data_file_format: file.format,
            schema: schema.clone(),
            project_field_ids: vec![FILE_PATH_ID, POS_ID],
            predicate: None,
            deletes: Vec::new(),
            partition: None,
            partition_spec: None,
            name_mapping: None,
            case_sensitive: true,
        };
        let what = || format!("reading position-delete file `{}` of `{name}`", file.path);
        let runtime = iceberg::Runtime::try_current().context(what)?;
        let batches: Vec<_> = ArrowReaderBuilder::new(table.file_io().clone(), runtime)
            .with_data_file_concurrency_limit(1)
            .build()
            .read(stream::iter([Ok(task)]).boxed())
            .context(what)?
            .stream()
            .try_collect()
            .await
            .context(what)?;
        for batch in batches {
            let bad = || {
                Error::user(
                    format!(
                        "`{name}`: position-delete file `{}` does not hold (file_path string, pos long)",
                        file.path
                    ),
                    "the table's writer broke the Iceberg spec; rewrite the table's deletes (Spark: `CALL system.rewrite_position_delete_files(...)`)",
                )
            };
            let paths = batch.column(0).as_string_opt::<i32>().ok_or_else(bad)?;
            let pos = batch
                .column(1)
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(bad)?;
            for (path, pos) in paths.iter().zip(pos.iter()) {
                let (Some(path), Some(pos)) = (path, pos) else {
                    return Err(bad());
                };
                let entry = positions.entry(path.to_string()).or_insert_with(|| {
                    order.push(path.to_string());
                    Vec::new()
                });
                entry.push(u64::try_from(pos).map_err(|_| bad())?);
            }
        }
    }
    Ok(order
        .into_iter()
        .map(|path| {
            let mut p = positions.remove(&path).unwrap_or_default();
            p.sort_unstable();
            p.dedup();
            (path, Arc::new(p))
        })
        .collect())
}

/// Which rows of a batch holding a file's rows `offset..offset + rows` are at `positions`
/// (sorted).
pub(crate) fn at_positions(positions: &[u64], offset: u64, rows: usize) -> BooleanArray {
    let mut mask = BooleanBufferBuilder::new(rows);
    mask.append_n(rows, false);
    let end = offset + rows as u64;
    let first = positions.partition_point(|&p| p < offset);
    for &p in positions[first..].iter().take_while(|&&p| p < end) {
        mask.set_bit((p - offset) as usize, true);
    }
    BooleanArray::new(mask.finish(), None)
}

/// The delete files that apply to each live data file of `snapshot`, when it has any
/// (empty otherwise, without planning a scan).
pub(crate) async fn live_deletes(
    name: &TableName,
    table: &Table,
    snapshot: &SnapshotRef,
) -> Result<HashMap<String, Vec<FileScanTaskDeleteFile>>> {
    let list = manifests::list(name, table, snapshot).await?;
    let any = list.entries().iter().any(|m| {
        m.content == ManifestContentType::Deletes
            && (m.has_added_files() || m.has_existing_files())
    });
    if !any {
        return Ok(HashMap::new());
    }
    let id = snapshot.snapshot_id();
    let what = || format!("planning a read of `{name}` at snapshot {id}");
    let tasks: Vec<FileScanTask> = table
        .scan()
        .snapshot_id(id)
        .build()
        .context(what)?
        .plan_files()
        .await
        .context(what)?
        .try_collect()
        .await
        .context(what)?;
    let mut deletes: HashMap<String, Vec<FileScanTaskDeleteFile>> = HashMap::new();
    for task in tasks {
        if !task.deletes.is_empty() {
            deletes
                .entry(task.data_file_path)
                .or_insert(task.deletes);
        }
    }
    Ok(deletes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_select_the_rows_of_each_batch() {
        let positions = [0, 3, 4, 9, 10];
        let mask = |offset, rows| {
            at_positions(&positions, offset, rows)
                .iter()
                .map(|v| v.unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(mask(0, 5), [true, false, false, true, true]);
        assert_eq!(mask(5, 5), [false, false, false, false, true]);
        assert_eq!(mask(10, 3), [true, false, false]);
        assert_eq!(mask(11, 2), [false, false]);
    }
}
