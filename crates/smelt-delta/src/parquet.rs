//! The Parquet files of Delta tables: reading (whole files or some columns, lined up
//! with a table schema) and writing change data files.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray, new_null_array};
use arrow::datatypes::{Schema, SchemaRef};
use deltalake::kernel::AddCDCFile;
use deltalake::logstore::ObjectStoreRef;
use deltalake::logstore::parquet_reader::ParquetObjectReader;
use deltalake::parquet::arrow::ArrowWriter;
use deltalake::parquet::arrow::ProjectionMask;
use deltalake::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection,
};
use deltalake::parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use deltalake::parquet::basic::Compression;
use deltalake::parquet::file::properties::{EnabledStatistics, WriterProperties};
use deltalake::parquet::schema::types::ColumnPath;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;

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
    /// Partition values of the file (columns not stored in it).
    pub partition_values: HashMap<String, Option<String>>,
}

impl FileRef {
    /// A file named by an `add` or `cdc` action of `table`'s log (URL-encoded path).
    pub fn from_log(
        table: &str,
        path: String,
        size: i64,
        partition_values: HashMap<String, Option<String>>,
    ) -> Result<Self> {
        let location = object_store::path::Path::from_url_path(&path).map_err(|e| {
            Error::user(
                format!("bad file path `{path}` in `{table}`: {e}"),
                "the table log is damaged",
            )
        })?;
        Ok(Self {
            path,
            location,
            size,
            partition_values,
        })
    }
}

/// Number of cores to spread CPU-bound file work over.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Reads a data file of `table` (named in errors), all columns or those in `columns`,
/// all rows or those in `rows` (row numbers in the file, ascending), as one batch per
/// row group at most (up to 4M rows each).
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
/// `rows` selects some). With `split_columns`, a large row group's columns are decoded
/// on all cores at once; callers that already read several files in parallel pass `false`.
pub(crate) async fn read_each<E: From<Error>>(
    store: ObjectStoreRef,
    table: &str,
    file: &FileRef,
    columns: Option<&[String]>,
    rows: Option<&[u32]>,
    split_columns: bool,
    mut f: impl FnMut(RecordBatch) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let path = file.location.clone();
    let full_path = format!("{table}/{}", file.path);
    let parquet_err = |source| Error::Parquet {
        path: full_path.clone(),
        source,
    };
    let reader =
        ParquetObjectReader::new(Arc::clone(&store), path.clone()).with_file_size(file.size as u64);
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
    // (row group, its rows); `None` reads every row group in one go.
    let groups: Vec<(Option<usize>, usize)> = if rows.is_some() || metadata.num_row_groups() <= 1 {
        vec![(None, total)]
    } else {
        (0..metadata.num_row_groups())
            .map(|g| (Some(g), metadata.row_group(g).num_rows().max(0) as usize))
            .collect()
    };
    let selection = rows.map(|rows| selection(rows, total));
    for (group, group_rows) in groups {
        let batch_size = group_rows.clamp(1, 4 << 20);
        let parts = if split_columns && group_rows >= 100_000 {
            cores().min(roots.len()).max(1)
        } else {
            1
        };
        let mut tasks = Vec::with_capacity(parts);
        for part in 0..parts {
            let mine: Vec<usize> = roots.iter().copied().skip(part).step_by(parts).collect();
            let reader = ParquetObjectReader::new(Arc::clone(&store), path.clone())
                .with_file_size(file.size as u64);
            let meta =
                ArrowReaderMetadata::try_new(Arc::clone(&metadata), ArrowReaderOptions::new())
                    .map_err(parquet_err)?;
            let mask = ProjectionMask::roots(meta.parquet_schema(), mine);
            let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta)
                .with_projection(mask)
                .with_batch_size(batch_size);
            if let Some(g) = group {
                builder = builder.with_row_groups(vec![g]);
            }
            if let Some(selection) = &selection {
                builder = builder.with_row_selection(selection.clone());
            }
            let stream = builder.build().map_err(parquet_err)?;
            tasks.push(tokio::spawn(async move {
                stream.try_collect::<Vec<RecordBatch>>().await
            }));
        }
        // Disjoint column sets decoded on separate tasks share row-group boundaries and
        // batch size, so their batches line up row by row.
        let mut pieces: Vec<Vec<RecordBatch>> = Vec::with_capacity(parts);
        for task in tasks {
            let batches = task
                .await
                .map_err(|e| {
                    Error::user(
                        format!("reading `{full_path}`: {e}"),
                        "this is a bug in smelt",
                    )
                })?
                .map_err(parquet_err)?;
            pieces.push(batches);
        }
        if pieces.len() == 1 {
            for b in pieces.pop().unwrap_or_default() {
                f(b)?;
            }
            continue;
        }
        for i in 0..pieces[0].len() {
            let mut fields = Vec::new();
            let mut arrays = Vec::new();
            for piece in &pieces {
                let b = &piece[i];
                fields.extend(b.schema().fields().iter().cloned());
                arrays.extend(b.columns().iter().cloned());
            }
            f(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(Error::from)?)?;
        }
    }
    Ok(())
}

/// The rows `rows` (ascending) of a file of `total` rows, as runs of consecutive rows.
fn selection(rows: &[u32], total: usize) -> RowSelection {
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
    for &r in rows {
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

/// Properties of the Parquet files smelt writes. Key columns hold a distinct value per row,
/// so they skip the dictionary the writer would build and then drop; statistics are kept
/// per column chunk (what Delta's file statistics are made of), not per page.
pub(crate) fn writer_properties(keys: &[String]) -> WriterProperties {
    keys.iter()
        .fold(
            WriterProperties::builder()
                .set_created_by(format!("smelt {}", env!("CARGO_PKG_VERSION")))
                .set_compression(Compression::SNAPPY)
                .set_statistics_enabled(EnabledStatistics::Chunk),
            |b, k| b.set_column_dictionary_enabled(ColumnPath::from(k.as_str()), false),
        )
        .build()
}

/// Writes `batch` (table columns plus `_change_type`) as a change data file of the table
/// in `store` and returns its `cdc` action.
pub(crate) async fn write_change_data(
    store: ObjectStoreRef,
    table: &str,
    batch: &RecordBatch,
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
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(writer_properties(&[])))
        .map_err(parquet_err)?;
    writer.write(batch).map_err(parquet_err)?;
    writer.close().map_err(parquet_err)?;
    let size = bytes.len() as i64;
    store
        .put(&object_store::path::Path::from(path.as_str()), bytes.into())
        .await
        .map_err(|source| Error::Store {
            context: format!("writing `{full_path}`"),
            source,
        })?;
    Ok(AddCDCFile {
        path,
        size,
        partition_values: HashMap::new(),
        data_change: false,
        tags: None,
    })
}
