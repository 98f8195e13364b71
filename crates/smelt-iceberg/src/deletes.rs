//! Delete files (merge-on-read). Position-delete files — Spark, Trino and smelt's
//! `write_mode: merge_on_read` write them for deletes and updates — name rows of live data
//! files by position: read (the rows a snapshot's new ones name are its deletes; the live
//! data files with their deleted positions, each delete file read once), and written (the
//! positions of the stored rows a commit removes, in one new file). Equality-delete files
//! — Flink writes them — delete the older rows whose columns equal one of theirs: read.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{BooleanArray, BooleanBufferBuilder, RecordBatch};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::SchemaRef;
use arrow58_array::cast::AsArray;
use arrow58_array::types::Int64Type;
use futures::{StreamExt, TryStreamExt, stream};
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::scan::{FileScanTask, FileScanTaskDeleteFile};
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, ManifestContentType, NestedField, PrimitiveType,
    Schema, SnapshotRef, Type,
};
use iceberg::table::Table;
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder, ParquetWriterBuilder};
use smelt_core::dedupe::KeyIndex;
use smelt_spec::TableName;

use crate::bridge;
use crate::cow;
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

/// The schema of position-delete files (`file_path`, `pos`).
fn schema() -> Result<Arc<Schema>> {
    Ok(Arc::new(
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
    ))
}

/// An equality-delete file a snapshot added: rows written before whose columns `ids`
/// (field ids) equal one of its rows are deleted.
#[derive(Debug, Clone)]
pub(crate) struct EqualityDeleteFile {
    pub path: String,
    pub size: u64,
    pub format: DataFileFormat,
    pub ids: Vec<i32>,
}

/// The values equality-delete files delete, per set of columns.
pub(crate) struct EqualityDeletes(Vec<(Vec<String>, KeyIndex)>);

impl EqualityDeletes {
    /// Which rows of `batch` (the table's columns, by name) one of the files deletes.
    pub(crate) fn matches(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let mut hit = BooleanArray::from(vec![false; batch.num_rows()]);
        for (columns, index) in &self.0 {
            let keys = cow::key_columns(batch, columns)?;
            let found = index
                .positions(&keys)
                .map_err(|e| Error::internal(format!("matching equality deletes: {e}")))?;
            hit = arrow::compute::or(&hit, &arrow::compute::is_not_null(&found)?)?;
        }
        Ok(hit)
    }
}

/// The values `files` delete, read by field id as the table's columns of `schema` (smelt's
/// schema of the whole table).
pub(crate) async fn read_equality(
    name: &TableName,
    table: &Table,
    schema: &SchemaRef,
    files: &[EqualityDeleteFile],
) -> Result<EqualityDeletes> {
    let current = table.metadata().current_schema().clone();
    let mut groups: BTreeMap<Vec<i32>, Vec<&EqualityDeleteFile>> = BTreeMap::new();
    for file in files {
        groups.entry(file.ids.clone()).or_default().push(file);
    }
    let mut sets = Vec::new();
    for (ids, files) in groups {
        let columns: Vec<String> = ids
            .iter()
            .map(|id| {
                current.field_by_id(*id).map(|f| f.name.clone()).ok_or_else(|| {
                    Error::user(
                        format!(
                            "`{name}`: equality-delete file `{}` deletes by field id {id}, which the table's schema does not have",
                            files[0].path
                        ),
                        "rebuild what reads the table with `smelt run --full-refresh`",
                    )
                })
            })
            .collect::<Result<_>>()?;
        let at: Vec<usize> = columns
            .iter()
            .map(|c| schema.index_of(c))
            .collect::<std::result::Result<_, _>>()?;
        let projected: SchemaRef = Arc::new(schema.project(&at)?);
        let mut batches = Vec::new();
        for file in files {
            let what = format!("reading equality-delete file `{}` of `{name}`", file.path);
            let read = read_whole(
                table,
                &file.path,
                file.size,
                file.format,
                &current,
                &ids,
                &what,
            )
            .await?;
            for batch in read {
                batches.push(bridge::batch_from_58(batch, &projected)?);
            }
        }
        let all = arrow::compute::concat_batches(&projected, &batches)?;
        if all.num_rows() == 0 {
            continue;
        }
        let index = KeyIndex::new(all.columns())
            .map_err(|e| Error::internal(format!("indexing equality deletes: {e}")))?;
        sets.push((columns, index));
    }
    Ok(EqualityDeletes(sets))
}

/// The columns `ids` (of `schema`) of a whole delete file, as the `iceberg` crate reads them;
/// `what` names the read in errors.
async fn read_whole(
    table: &Table,
    path: &str,
    size: u64,
    format: DataFileFormat,
    schema: &Arc<Schema>,
    ids: &[i32],
    what: &str,
) -> Result<Vec<arrow58_array::RecordBatch>> {
    let task = FileScanTask {
        file_size_in_bytes: size,
        start: 0,
        length: size,
        record_count: None,
        data_file_path: path.to_string(),
        data_file_format: format,
        schema: schema.clone(),
        project_field_ids: ids.to_vec(),
        predicate: None,
        deletes: Vec::new(),
        partition: None,
        partition_spec: None,
        name_mapping: None,
        case_sensitive: true,
    };
    let what = || what.to_string();
    let runtime = iceberg::Runtime::try_current().context(what)?;
    ArrowReaderBuilder::new(table.file_io().clone(), runtime)
        .with_data_file_concurrency_limit(1)
        .build()
        .read(stream::iter([Ok(task)]).boxed())
        .context(what)?
        .stream()
        .try_collect()
        .await
        .context(what)
}

/// The rows `files` delete: per data file path (in the order first named), its deleted
/// positions, sorted and distinct.
pub(crate) async fn read(
    name: &TableName,
    table: &Table,
    files: &[PositionDeleteFile],
) -> Result<Vec<(String, Arc<Vec<u64>>)>> {
    let schema = schema()?;
    let mut order: Vec<String> = Vec::new();
    let mut positions: HashMap<String, Vec<u64>> = HashMap::new();
    for file in files {
        let what = format!("reading position-delete file `{}` of `{name}`", file.path);
        let ids = [FILE_PATH_ID, POS_ID];
        let batches = read_whole(
            table,
            &file.path,
            file.size,
            file.format,
            &schema,
            &ids,
            &what,
        )
        .await?;
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
                let pos = u64::try_from(pos).map_err(|_| bad())?;
                match positions.get_mut(path) {
                    Some(entry) => entry.push(pos),
                    None => {
                        order.push(path.to_string());
                        positions.insert(path.to_string(), vec![pos]);
                    }
                }
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
        m.content == ManifestContentType::Deletes && (m.has_added_files() || m.has_existing_files())
    });
    if !any {
        return Ok(HashMap::new());
    }
    let tasks = manifests::scan_tasks(name, table, snapshot, None).await?;
    let mut deletes: HashMap<String, Vec<FileScanTaskDeleteFile>> = HashMap::new();
    for task in tasks {
        if !task.deletes.is_empty() {
            deletes.entry(task.data_file_path).or_insert(task.deletes);
        }
    }
    Ok(deletes)
}

/// A live data file, read whole from its start, and the positions its position deletes
/// remove (sorted).
pub(crate) struct LiveFile {
    pub task: FileScanTask,
    pub deleted: Arc<Vec<u64>>,
}

/// The live data files of `table`'s current snapshot, each once, as whole-file reads of
/// the columns `select`, with the positions their position deletes remove: each delete
/// file is read once, however many data files it names (a merge-on-read table's one
/// delete file per commit names many). A file with equality deletes keeps them in its read
/// task (the `iceberg` crate applies them); smelt never writes such files.
pub(crate) async fn live_files(
    name: &TableName,
    table: &Table,
    select: Option<&[String]>,
) -> Result<Vec<LiveFile>> {
    let mut seen = HashSet::new();
    let mut tasks = Vec::new();
    let mut delete_files: Vec<PositionDeleteFile> = Vec::new();
    let mut delete_paths = HashSet::new();
    // Files whose read task keeps its deletes (the crate applies them all).
    let mut applied = HashSet::new();
    for mut task in cow::live_files(name, table, select).await? {
        // A large file may be planned as several splits: it is read whole, once, so that
        // row positions count from its start.
        if !seen.insert(task.data_file_path.clone()) {
            continue;
        }
        task.start = 0;
        task.length = task.file_size_in_bytes;
        if !task
            .deletes
            .iter()
            .any(|d| d.file_type == DataContentType::EqualityDeletes)
        {
            for d in std::mem::take(&mut task.deletes) {
                if delete_paths.insert(d.file_path.clone()) {
                    delete_files.push(PositionDeleteFile {
                        path: d.file_path,
                        size: d.file_size_in_bytes,
                        format: DataFileFormat::Parquet,
                    });
                }
            }
        } else {
            applied.insert(task.data_file_path.clone());
        }
        tasks.push(task);
    }
    let mut deleted: HashMap<String, Arc<Vec<u64>>> = read(name, table, &delete_files)
        .await?
        .into_iter()
        .collect();
    let none = Arc::new(Vec::new());
    Ok(tasks
        .into_iter()
        .map(|task| LiveFile {
            deleted: match applied.contains(&task.data_file_path) {
                true => none.clone(),
                false => deleted
                    .remove(&task.data_file_path)
                    .unwrap_or_else(|| none.clone()),
            },
            task,
        })
        .collect())
}

/// The rows of `file` (smelt's schema `schema`) that its position deletes leave.
pub(crate) async fn read_live(
    name: &TableName,
    table: &Table,
    file: LiveFile,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let mut offset = 0u64;
    let mut live = Vec::new();
    for batch in cow::read_file(name, table, file.task, schema).await? {
        let rows = batch.num_rows();
        let keep = if file.deleted.is_empty() {
            batch
        } else {
            let gone = at_positions(&file.deleted, offset, rows);
            arrow::compute::filter_record_batch(&batch, &arrow::compute::not(&gone)?)?
        };
        offset += rows as u64;
        if keep.num_rows() > 0 {
            live.push(keep);
        }
    }
    Ok(live)
}

/// The positions of the live rows of `table` that `removes` marks (true; never NULL), per
/// data file, read with the columns of `schema` (smelt's, a projection of the table's).
/// Rows that earlier position deletes removed are not marked again.
pub(crate) async fn mark(
    name: &TableName,
    table: &Table,
    schema: &SchemaRef,
    removes: &(dyn Fn(&RecordBatch) -> Result<BooleanArray> + Sync),
) -> Result<Vec<(String, Vec<u64>)>> {
    let columns: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let mut marks = Vec::new();
    for mut file in live_files(name, table, Some(&columns)).await? {
        // Every row is read, so that positions count; those already deleted by position
        // are skipped (a row an equality delete removed may be marked again: harmless).
        file.task.deletes.clear();
        let path = file.task.data_file_path.clone();
        let mut positions = Vec::new();
        let mut offset = 0u64;
        for batch in cow::read_file(name, table, file.task, schema).await? {
            let hit = removes(&batch)?;
            positions.extend(
                hit.values()
                    .set_indices()
                    .map(|i| offset + i as u64)
                    .filter(|p| file.deleted.binary_search(p).is_err()),
            );
            offset += batch.num_rows() as u64;
        }
        if !positions.is_empty() {
            marks.push((path, positions));
        }
    }
    Ok(marks)
}

/// Writes `marks` (per data file, its positions) as one position-delete file of `table`,
/// sorted by file and position as the spec requires; `None` when there is nothing to mark.
pub(crate) async fn write(
    name: &TableName,
    table: &Table,
    mut marks: Vec<(String, Vec<u64>)>,
) -> Result<Option<DataFile>> {
    marks.sort_by(|a, b| a.0.cmp(&b.0));
    let rows: usize = marks.iter().map(|(_, p)| p.len()).sum();
    if rows == 0 {
        return Ok(None);
    }
    let mut paths = arrow58_array::builder::StringBuilder::new();
    let mut positions = arrow58_array::builder::Int64Builder::with_capacity(rows);
    for (path, mut marked) in marks {
        marked.sort_unstable();
        for p in marked {
            paths.append_value(&path);
            positions.append_value(p as i64);
        }
    }
    let schema = schema()?;
    let what = || format!("writing a position-delete file of `{name}`");
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).context(what)?);
    let batch = arrow58_array::RecordBatch::try_new(
        arrow,
        vec![Arc::new(paths.finish()), Arc::new(positions.finish())],
    )
    .map_err(|e| Error::internal(format!("a position-delete batch: {e}")))?;
    let location = format!(
        "{}/data/smelt-{}-deletes.parquet",
        table.metadata().location().trim_end_matches('/'),
        uuid::Uuid::new_v4()
    );
    let output = table.file_io().new_output(&location).context(what)?;
    let mut writer = ParquetWriterBuilder::new(
        parquet58::file::properties::WriterProperties::builder()
            .set_compression(parquet58::basic::Compression::ZSTD(Default::default()))
            .build(),
        schema,
    )
    .build(output)
    .await
    .context(what)?;
    writer.write(&batch).await.context(what)?;
    let mut built = writer.close().await.context(what)?;
    let Some(mut file) = built.pop() else {
        return Err(Error::internal(format!(
            "`{name}`: the position-delete file of {rows} rows was not written"
        )));
    };
    file.content(DataContentType::PositionDeletes)
        .partition_spec_id(table.metadata().default_partition_spec_id());
    Ok(Some(file.build().map_err(|e| {
        Error::internal(format!("a position-delete file entry: {e}"))
    })?))
}

/// The stored rows whose key is one of `lookup`'s, with `columns`.
pub(crate) async fn lookup(
    name: &TableName,
    table: &Table,
    schema: &SchemaRef,
    lookup: &RecordBatch,
    columns: &[String],
) -> Result<RecordBatch> {
    let keys: Vec<String> = lookup
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let index =
        KeyIndex::new(lookup.columns()).map_err(|e| Error::user(e.to_string(), "check `keys`"))?;
    // Only the key columns and those asked for are read, in the table's order.
    let read: Vec<usize> = (0..schema.fields().len())
        .filter(|&i| {
            let n = schema.field(i).name();
            keys.contains(n) || columns.contains(n)
        })
        .collect();
    let read_schema: SchemaRef = Arc::new(schema.project(&read)?);
    let names: Vec<String> = read_schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|n| cow::committed(table, n))
        .collect();
    let projection: Vec<usize> = columns
        .iter()
        .map(|c| read_schema.index_of(c))
        .collect::<std::result::Result<_, _>>()?;
    let out_schema: SchemaRef = Arc::new(read_schema.project(&projection)?);
    let mut found = Vec::new();
    for file in live_files(name, table, Some(&names)).await? {
        for batch in read_live(name, table, file, &read_schema).await? {
            let hit = cow::matches(&index, &batch, &keys)?;
            if hit.true_count() == 0 {
                continue;
            }
            found.push(filter_record_batch(&batch, &hit)?.project(&projection)?);
        }
    }
    Ok(concat_batches(&out_schema, &found)?)
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
