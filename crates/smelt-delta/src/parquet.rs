//! The Parquet files of Delta tables: reading (whole files or some columns, lined up
//! with a table schema) and writing change data files.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray, new_null_array};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use deltalake::kernel::AddCDCFile;
use deltalake::logstore::ObjectStoreRef;
use deltalake::logstore::parquet_reader::ParquetObjectReader;
use deltalake::parquet::arrow::AsyncArrowWriter;
use deltalake::parquet::arrow::ProjectionMask;
use deltalake::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection,
};
use deltalake::parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use deltalake::parquet::basic::Compression;
use deltalake::parquet::file::properties::{
    EnabledStatistics, WriterProperties, WriterPropertiesBuilder,
};
use deltalake::parquet::schema::types::ColumnPath;
use futures::TryStreamExt;
use object_store::buffered::BufWriter;

use crate::error::{Error, Result};

/// One Parquet file of a table.
#[derive(Debug, Clone)]
pub(crate) struct FileRef {
    /// Path relative to the table root, for messages.
    pub path: String,
    /// Where it is in the table's object store.
    pub location: object_store::path::Path,
    /// Size in bytes, from the log.
    pub size: i64,
    /// Partition values of the file (columns not stored in it), by logical column name.
    pub partition_values: HashMap<String, Option<String>>,
    /// The rows to read (deletion vectors).
    pub rows: FileRows,
}

/// Which rows of a data file are read: those a deletion vector leaves, or those it deletes.
#[derive(Debug, Clone, Default)]
pub(crate) enum FileRows {
    /// Every row.
    #[default]
    All,
    /// Every row but these (ascending row numbers).
    Except(Arc<[u64]>),
    /// Only these (ascending row numbers).
    Only(Arc<[u64]>),
}

impl FileRef {
    /// A file named by an `add`, `remove` or `cdc` action of a table's log (the path as
    /// parsed from the log, percent-decoded; kept as delta-rs keeps it).
    pub fn from_log(
        path: String,
        size: i64,
        partition_values: HashMap<String, Option<String>>,
        rows: FileRows,
    ) -> Self {
        let location = object_store::path::Path::parse(&path)
            .unwrap_or_else(|_| object_store::path::Path::from(path.as_str()));
        Self {
            path,
            location,
            size,
            partition_values,
            rows,
        }
    }
}

/// Number of cores to spread CPU-bound file work over.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Reads a data file of `table` (named in errors), all columns or those in `columns`,
/// all rows or those in `rows` (row numbers in the file, ascending): one batch per row
/// group at most (up to 4M rows each), or batches of [`SELECTED_BATCH_ROWS`] when `rows`
/// picks some.
pub(crate) async fn read(
    store: ObjectStoreRef,
    table: &str,
    file: &FileRef,
    columns: Option<&[String]>,
    rows: Option<&[u32]>,
    split_columns: bool,
) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    read_each(store, table, file, columns, rows, split_columns, |b| {
        out.push(b);
        Ok::<_, Error>(())
    })
    .await?;
    Ok(out)
}

/// Like [`read`], handing each batch to `f` as soon as it is decoded, so that a large
/// file never sits in memory whole: row group by row group (all of them at once when
/// `rows` picks some or a deletion vector applies: then every batch is decoded before `f`
/// sees the first). With `split_columns`, a large row group's columns are decoded on all
/// cores at once; callers that already read several files in parallel pass `false`.
pub(crate) async fn read_each<E: From<Error>>(
    store: ObjectStoreRef,
    table: &str,
    file: &FileRef,
    columns: Option<&[String]>,
    rows: Option<&[u32]>,
    split_columns: bool,
    mut f: impl FnMut(RecordBatch) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let mut reader = FileReader::open(store, table, file, columns, rows, split_columns).await?;
    while let Some(batches) = reader.next_group().await? {
        for b in batches {
            f(b)?;
        }
    }
    Ok(())
}

/// [`read_each`] as a stream of batches, every row of `file` (less its deleted rows), all
/// columns, in file order.
pub(crate) fn read_stream(
    store: ObjectStoreRef,
    table: String,
    file: FileRef,
) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
    use futures::StreamExt;
    futures::stream::once(async move {
        let reader = FileReader::open(store, &table, &file, None, None, true).await?;
        let groups = futures::stream::try_unfold(reader, |mut reader| async move {
            Ok::<_, Error>(reader.next_group().await?.map(|batches| {
                (
                    futures::stream::iter(batches.into_iter().map(Ok::<_, Error>)),
                    reader,
                )
            }))
        })
        .try_flatten();
        Ok::<_, Error>(groups)
    })
    .try_flatten()
    .boxed()
}

/// Rows per batch when reading rows picked from a file. Scattered rows are read by
/// decoding every row up to a batch's worth of picked ones and filtering (the Parquet
/// reader's mask policy): a batch as large as the file decoded all of it at once. At this
/// size a medium increment (8% of rows picked) peaks ~20% lower and looks up faster
/// (bench/NOTES.md, "Reading scattered rows a batch at a time").
const SELECTED_BATCH_ROWS: usize = 8192;

/// A Parquet file being read a row group at a time.
struct FileReader {
    store: ObjectStoreRef,
    file: FileRef,
    full_path: String,
    metadata: Arc<deltalake::parquet::file::metadata::ParquetMetaData>,
    /// The root columns read.
    roots: Vec<usize>,
    selection: Option<RowSelection>,
    /// Whether the caller picked rows (read in batches of [`SELECTED_BATCH_ROWS`]).
    picked: bool,
    /// (row group, its rows) still to read; `None` reads every row group in one go.
    groups: std::collections::VecDeque<(Option<usize>, usize)>,
    split_columns: bool,
}

impl FileReader {
    async fn open(
        store: ObjectStoreRef,
        table: &str,
        file: &FileRef,
        columns: Option<&[String]>,
        rows: Option<&[u32]>,
        split_columns: bool,
    ) -> Result<Self> {
        let full_path = format!("{table}/{}", file.path);
        let parquet_err = |source| Error::Parquet {
            path: full_path.clone(),
            source,
        };
        let reader = object_reader(&store, file);
        let builder = ParquetRecordBatchStreamBuilder::new(reader)
            .await
            .map_err(parquet_err)?;
        let metadata = Arc::clone(builder.metadata());
        let total = metadata.file_metadata().num_rows().max(0) as usize;
        let roots: Vec<usize> = metadata
            .file_metadata()
            .schema_descr()
            .root_schema()
            .get_fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| columns.is_none_or(|c| c.iter().any(|c| c == f.name())))
            .map(|(i, _)| i)
            .collect();
        let selection = match (rows, &file.rows) {
            // Rows picked among those a deletion vector leaves (as an earlier read of the
            // file numbered them): mapped to the file's rows.
            (Some(rows), FileRows::Except(deleted)) if !deleted.is_empty() => {
                let relative: Vec<u64> = rows.iter().map(|&r| r as u64).collect();
                let picked = crate::dv::absolute(&relative, deleted);
                check_rows(&picked, total, &full_path)?;
                Some(selection(picked.into_iter(), total))
            }
            (Some(rows), FileRows::Only(_)) => {
                return Err(Error::internal(format!(
                    "rows {} picked among the deleted rows of `{full_path}`",
                    rows.len()
                )));
            }
            (Some(rows), _) => Some(selection(rows.iter().map(|&r| r as u64), total)),
            (None, FileRows::All) => None,
            (None, FileRows::Except(deleted)) if deleted.is_empty() => None,
            (None, FileRows::Except(deleted)) => Some(except(deleted, total, &full_path)?),
            (None, FileRows::Only(only)) => {
                check_rows(only, total, &full_path)?;
                Some(selection(only.iter().copied(), total))
            }
        };
        let groups = if selection.is_some() || metadata.num_row_groups() <= 1 {
            vec![(None, total)]
        } else {
            (0..metadata.num_row_groups())
                .map(|g| (Some(g), metadata.row_group(g).num_rows().max(0) as usize))
                .collect()
        };
        Ok(Self {
            store,
            file: file.clone(),
            full_path,
            metadata,
            roots,
            selection,
            picked: rows.is_some(),
            groups: groups.into(),
            split_columns,
        })
    }

    /// The batches of the next row group, `None` after the last.
    async fn next_group(&mut self) -> Result<Option<Vec<RecordBatch>>> {
        let Some((group, group_rows)) = self.groups.pop_front() else {
            return Ok(None);
        };
        let full_path = &self.full_path;
        let parquet_err = |source| Error::Parquet {
            path: full_path.clone(),
            source,
        };
        let batch_size = if self.picked {
            SELECTED_BATCH_ROWS
        } else {
            group_rows.clamp(1, 4 << 20)
        };
        let parts = if self.split_columns && group_rows >= 100_000 {
            cores().min(self.roots.len()).max(1)
        } else {
            1
        };
        let mut tasks = Vec::with_capacity(parts);
        for part in 0..parts {
            let mine: Vec<usize> = self
                .roots
                .iter()
                .copied()
                .skip(part)
                .step_by(parts)
                .collect();
            let reader = object_reader(&self.store, &self.file);
            let mut meta =
                ArrowReaderMetadata::try_new(Arc::clone(&self.metadata), ArrowReaderOptions::new())
                    .map_err(parquet_err)?;
            if self.picked {
                // Picked rows are decoded with the rows around them and then filtered: as
                // views, the strings of the rows not picked are never copied.
                let options = ArrowReaderOptions::new().with_schema(as_views(meta.schema()));
                meta = ArrowReaderMetadata::try_new(Arc::clone(&self.metadata), options)
                    .map_err(parquet_err)?;
            }
            let mask = ProjectionMask::roots(meta.parquet_schema(), mine);
            let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta)
                .with_projection(mask)
                .with_batch_size(batch_size);
            if let Some(g) = group {
                builder = builder.with_row_groups(vec![g]);
            }
            if let Some(selection) = &self.selection {
                builder = builder.with_row_selection(selection.clone());
            }
            let mut stream = builder.build().map_err(parquet_err)?;
            let (path, views) = (full_path.clone(), self.picked);
            tasks.push(tokio::spawn(async move {
                let mut batches = Vec::new();
                while let Some(b) = stream.try_next().await.map_err(|source| Error::Parquet {
                    path: path.clone(),
                    source,
                })? {
                    // Each batch lets go of the pages its views point into at once.
                    batches.push(if views { from_views(&b)? } else { b });
                }
                Ok::<_, Error>(batches)
            }));
        }
        // Disjoint column sets decoded on separate tasks share row-group boundaries and
        // batch size, so their batches line up row by row.
        let mut pieces: Vec<Vec<RecordBatch>> = Vec::with_capacity(parts);
        for task in tasks {
            let batches = task.await.map_err(|e| {
                Error::internal(format!("a task reading `{full_path}` failed: {e}"))
            })??;
            pieces.push(batches);
        }
        if pieces.len() == 1 {
            return Ok(Some(pieces.pop().unwrap_or_default()));
        }
        if pieces.iter().any(|p| p.len() != pieces[0].len()) {
            return Err(Error::internal(format!(
                "the columns of `{full_path}` came back in batches that do not line up"
            )));
        }
        let mut out = Vec::with_capacity(pieces[0].len());
        for i in 0..pieces[0].len() {
            let mut fields = Vec::new();
            let mut arrays = Vec::new();
            for piece in &pieces {
                let b = &piece[i];
                fields.extend(b.schema().fields().iter().cloned());
                arrays.extend(b.columns().iter().cloned());
            }
            out.push(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?);
        }
        Ok(Some(out))
    }
}

/// `schema` with its string and binary columns as views (top-level columns only).
fn as_views(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 => Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8View)),
            DataType::Binary => Arc::new(f.as_ref().clone().with_data_type(DataType::BinaryView)),
            _ => Arc::clone(f),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A batch read [`as_views`] with its view columns copied out as strings and binaries
/// again (only the rows it holds: the pages the views point into are let go).
fn from_views(batch: &RecordBatch) -> Result<RecordBatch> {
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        let to = match f.data_type() {
            DataType::Utf8View => DataType::Utf8,
            DataType::BinaryView => DataType::Binary,
            _ => {
                fields.push(Arc::clone(f));
                columns.push(Arc::clone(c));
                continue;
            }
        };
        columns.push(arrow::compute::cast(c, &to)?);
        fields.push(Arc::new(f.as_ref().clone().with_data_type(to)));
    }
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new_with_metadata(
            fields,
            batch.schema().metadata().clone(),
        )),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

/// A reader of `file`; its size comes from the log where the log has it (a `remove` may
/// not), saving a request.
fn object_reader(store: &ObjectStoreRef, file: &FileRef) -> ParquetObjectReader {
    let reader = ParquetObjectReader::new(Arc::clone(store), file.location.clone());
    if file.size > 0 {
        reader.with_file_size(file.size as u64)
    } else {
        reader
    }
}

/// Fails when a deletion vector names a row past the end of its file.
fn check_rows(rows: &[u64], total: usize, path: &str) -> Result<()> {
    match rows.last() {
        Some(&last) if last as usize >= total => Err(Error::user(
            format!(
                "a deletion vector of `{path}` deletes row {last}, but the file has {total} rows"
            ),
            "the table's deletion vectors do not match its data files; the engine that wrote it can purge them with `REORG TABLE … APPLY (PURGE)`",
        )),
        _ => Ok(()),
    }
}

/// Every row of a file of `total` rows but `deleted` (ascending).
fn except(deleted: &[u64], total: usize, path: &str) -> Result<RowSelection> {
    check_rows(deleted, total, path)?;
    let mut ranges = Vec::with_capacity(deleted.len() + 1);
    let mut start = 0usize;
    for &d in deleted {
        let d = d as usize;
        if d > start {
            ranges.push(start..d);
        }
        start = d + 1;
    }
    if start < total {
        ranges.push(start..total);
    }
    Ok(RowSelection::from_consecutive_ranges(
        ranges.into_iter(),
        total,
    ))
}

/// The rows `rows` (ascending) of a file of `total` rows, as runs of consecutive rows.
fn selection(rows: impl Iterator<Item = u64>, total: usize) -> RowSelection {
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
    for r in rows {
        let r = r as usize;
        match ranges.last_mut() {
            Some(last) if last.end == r => last.end = r + 1,
            _ => ranges.push(r..r + 1),
        }
    }
    RowSelection::from_consecutive_ranges(ranges.into_iter(), total)
}

/// Lines a batch read from `file` up with `schema`: columns by name, cast where the file's
/// type differs, partition columns from the file's partition values, missing columns NULL.
pub(crate) fn conform(
    batch: &RecordBatch,
    file: &FileRef,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let array = match batch.column_by_name(field.name()) {
            Some(c) if c.data_type() == field.data_type() => Arc::clone(c),
            Some(c) => arrow::compute::cast(c, field.data_type())?,
            None => match file.partition_values.get(field.name()) {
                Some(value) => {
                    let strings: ArrayRef = Arc::new(StringArray::from(vec![value.clone(); n]));
                    arrow::compute::cast(&strings, field.data_type())?
                }
                None => new_null_array(field.data_type(), n),
            },
        };
        columns.push(array);
    }
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
    )?)
}

/// Properties of the data files smelt writes. Key columns hold a distinct value per row,
/// so they skip the dictionary the writer would build and then drop; statistics are kept
/// per column chunk (what Delta's file statistics are made of), not per page.
pub(crate) fn writer_properties(keys: &[String]) -> WriterProperties {
    properties(keys, EnabledStatistics::Chunk)
}

/// Properties of change data files: as data files', without statistics, which the log
/// keeps none of for them and which no change feed reader consults (the writer compared
/// every string with the least and greatest so far to compute them), in row groups of
/// [`CHANGE_DATA_ROW_GROUP`] rows.
fn change_data_properties(keys: &[String]) -> WriterProperties {
    properties_builder(keys, EnabledStatistics::None)
        .set_max_row_group_row_count(Some(CHANGE_DATA_ROW_GROUP))
        .build()
}

fn properties(keys: &[String], statistics: EnabledStatistics) -> WriterProperties {
    properties_builder(keys, statistics).build()
}

fn properties_builder(keys: &[String], statistics: EnabledStatistics) -> WriterPropertiesBuilder {
    keys.iter().fold(
        WriterProperties::builder()
            .set_created_by(format!("smelt {}", env!("CARGO_PKG_VERSION")))
            .set_compression(Compression::SNAPPY)
            .set_statistics_enabled(statistics),
        |b, k| b.set_column_dictionary_enabled(ColumnPath::from(k.as_str()), false),
    )
}

/// Rows per row group of a change data file. The file is streamed out a row group at a
/// time (a multipart upload past 10 MiB), so the writer holds one encoded row group, not
/// the whole file: for a million changed rows, the whole file was ~80 MiB more at the peak.
pub(crate) const CHANGE_DATA_ROW_GROUP: usize = 131_072;

/// Writes `batch` (table columns plus `_change_type`) as a change data file of the table
/// in `store` and returns its `cdc` action. `keys` are the table's key columns.
pub(crate) async fn write_change_data(
    store: ObjectStoreRef,
    table: &str,
    batch: &RecordBatch,
    keys: &[String],
) -> Result<AddCDCFile> {
    let path = format!(
        "_change_data/cdc-00000-{}.c000.snappy.parquet",
        uuid::Uuid::new_v4()
    );
    let full_path = format!("{table}/{path}");
    let parquet_err = |source| Error::Parquet {
        path: full_path.clone(),
        source,
    };
    let upload = BufWriter::new(store, object_store::path::Path::from(path.as_str()));
    let mut writer =
        AsyncArrowWriter::try_new(upload, batch.schema(), Some(change_data_properties(keys)))
            .map_err(parquet_err)?;
    let mut offset = 0;
    while offset < batch.num_rows() {
        let len = CHANGE_DATA_ROW_GROUP.min(batch.num_rows() - offset);
        if let Err(e) = writer.write(&batch.slice(offset, len)).await {
            // Nothing is visible yet; leave no uploaded parts behind either.
            let _ = writer.into_inner().abort().await;
            return Err(parquet_err(e));
        }
        offset += len;
    }
    // A failed finish may have begun completing the upload, which cannot be aborted then:
    // the file, if any, is referenced by no commit.
    writer.finish().await.map_err(parquet_err)?;
    Ok(AddCDCFile {
        path,
        size: writer.bytes_written() as i64,
        partition_values: HashMap::new(),
        data_change: false,
        tags: None,
    })
}

#[cfg(test)]
mod tests;
