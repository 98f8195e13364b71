//! What a merge-on-read lookup found, kept for the commit's marking (`Found`): in memory,
//! or past a size, in a local temporary file, so that the run's writing does not hold it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Seek};
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;
use smelt_core::dedupe::KeyIndex;

use super::DeltaLakeTable;
use super::batches::key_columns;
use crate::error::{Error, Result};

/// The most bytes of found rows kept in memory from the lookup to the commit (default);
/// beyond, they wait in a temporary file.
pub const FOUND_IN_MEMORY: usize = 64 << 20;

/// Rows per batch written to, and read back from, the temporary file.
const SPILL_BATCH_ROWS: usize = 8192;

/// What a lookup found: its rows (the columns it read), in the order found or lined up with the
/// keys looked up, and per file, the numbers of its rows found (among those its deletion
/// vector leaves, ascending) and where each is in `rows`.
pub(super) struct Found {
    pub(super) rows: FoundRows,
    /// Which of `rows` are stored rows (lined up: the keys matched); `None`: all.
    pub(super) present: Option<BooleanArray>,
    pub(super) files: HashMap<String, (UInt32Array, UInt32Array)>,
}

/// The rows a lookup found.
pub(super) enum FoundRows {
    Memory(RecordBatch),
    /// Being written to a temporary file (Arrow IPC, unlinked from the start, so nothing
    /// is left behind however the run ends): the file, rewound, when done.
    Spilling {
        schema: SchemaRef,
        task: tokio::task::JoinHandle<Result<File>>,
    },
    /// Written to that file.
    Spilled {
        schema: SchemaRef,
        file: File,
    },
}

impl FoundRows {
    /// `rows`, in memory if they take at most `in_memory` bytes, else written to a
    /// temporary file by a blocking task (the lookup's caller still holds them meanwhile).
    pub(super) fn keep(rows: RecordBatch, in_memory: usize, table: &str) -> Self {
        if rows.get_array_memory_size() <= in_memory {
            return FoundRows::Memory(rows);
        }
        let table = table.to_string();
        FoundRows::Spilling {
            schema: rows.schema(),
            task: tokio::task::spawn_blocking(move || spill(&rows, &table)),
        }
    }

    pub(super) fn schema(&self) -> SchemaRef {
        match self {
            FoundRows::Memory(rows) => rows.schema(),
            FoundRows::Spilling { schema, .. } | FoundRows::Spilled { schema, .. } => {
                Arc::clone(schema)
            }
        }
    }

    /// Waits for a spill under way to end, so that memory no longer holds the rows.
    pub(super) async fn settle(self, table: &str) -> Result<Self> {
        Ok(match self {
            FoundRows::Spilling { schema, task } => FoundRows::Spilled {
                schema,
                file: task.await.map_err(|e| {
                    Error::internal(format!("a task keeping rows of `{table}` failed: {e}"))
                })??,
            },
            other => other,
        })
    }
}

impl DeltaLakeTable {
    /// Waits for the rows the lookup found to be out of memory, if they are going (before
    /// writing: the run's writing and those rows are not held at once).
    pub(super) async fn settle_found(&self) -> Result<()> {
        let taken = self
            .looked_up
            .lock()
            .expect("not poisoned")
            .as_mut()
            .and_then(|seen| seen.found.take());
        if let Some(mut found) = taken {
            found.rows = found.rows.settle(&self.name.to_string()).await?;
            if let Some(seen) = self.looked_up.lock().expect("not poisoned").as_mut() {
                seen.found = Some(found);
            }
        }
        Ok(())
    }
}

/// Writes `rows` to a new temporary file, rewound.
fn spill(rows: &RecordBatch, table: &str) -> Result<File> {
    let io = |e: std::io::Error| spill_error(table, e);
    let file = tempfile::tempfile().map_err(io)?;
    let mut writer = FileWriter::try_new(BufWriter::new(file), &rows.schema())?;
    for offset in (0..rows.num_rows()).step_by(SPILL_BATCH_ROWS) {
        let len = SPILL_BATCH_ROWS.min(rows.num_rows() - offset);
        writer.write(&rows.slice(offset, len))?;
    }
    writer.finish()?;
    let mut file = writer
        .into_inner()?
        .into_inner()
        .map_err(|e| io(e.into_error()))?;
    file.rewind().map_err(io)?;
    Ok(file)
}

fn spill_error(table: &str, source: std::io::Error) -> Error {
    Error::Io {
        context: format!(
            "keeping the rows the lookup of `{table}` found in a temporary file in `{}` \
             (set TMPDIR to a disk with room)",
            std::env::temp_dir().display()
        ),
        source,
    }
}

/// Which found rows this commit marks: per row of `found`, whether its key is in `index`
/// (and it is a stored row), and, with `pre_images`, those rows (their columns as found).
pub(super) async fn marked_rows(
    found: FoundRows,
    present: Option<BooleanArray>,
    keys: Arc<[String]>,
    schema: SchemaRef,
    index: Arc<KeyIndex>,
    pre_images: bool,
    table: &str,
) -> Result<(BooleanArray, Option<RecordBatch>)> {
    match found.settle(table).await? {
        FoundRows::Memory(rows) => mark_batches(
            std::iter::once(Ok(rows)),
            present.as_ref(),
            &keys,
            &schema,
            &index,
            pre_images,
        ),
        FoundRows::Spilling { .. } => Err(Error::internal(format!(
            "the rows found in `{table}` are still being written"
        ))),
        FoundRows::Spilled { file, .. } => {
            let table = table.to_string();
            tokio::task::spawn_blocking(move || {
                let reader = FileReader::try_new(BufReader::new(file), None)?;
                mark_batches(
                    reader.map(|b| b.map_err(Error::from)),
                    present.as_ref(),
                    &keys,
                    &schema,
                    &index,
                    pre_images,
                )
            })
            .await
            .map_err(|e| Error::internal(format!("a task marking rows of `{table}` failed: {e}")))?
        }
    }
}

/// [`marked_rows`] over the found rows in consecutive batches.
fn mark_batches(
    batches: impl Iterator<Item = Result<RecordBatch>>,
    present: Option<&BooleanArray>,
    keys: &[String],
    schema: &SchemaRef,
    index: &KeyIndex,
    pre_images: bool,
) -> Result<(BooleanArray, Option<RecordBatch>)> {
    let (mut marks, mut rows) = (Vec::new(), Vec::new());
    let mut offset = 0;
    let mut rows_schema = None;
    for batch in batches {
        let batch = batch?;
        let found_keys = key_columns(&batch, keys, schema)?;
        let mut marked = arrow::compute::is_not_null(&index.positions(&found_keys)?)?;
        if let Some(present) = present {
            marked = arrow::compute::and(&marked, &present.slice(offset, batch.num_rows()))?;
        }
        offset += batch.num_rows();
        if pre_images && marked.true_count() > 0 {
            rows.push(smelt_core::columns::filter(&batch, &marked)?);
        }
        rows_schema.get_or_insert_with(|| batch.schema());
        marks.push(marked);
    }
    let marked = match marks.len() {
        0 => BooleanArray::from(Vec::<bool>::new()),
        1 => marks.remove(0),
        _ => {
            let parts: Vec<&dyn Array> = marks.iter().map(|m| m as &dyn Array).collect();
            arrow::compute::concat(&parts)?.as_boolean().clone()
        }
    };
    let rows = match rows_schema {
        Some(s) if !rows.is_empty() => Some(smelt_core::columns::concat(&s, &rows)?),
        _ => None,
    };
    Ok((marked, rows))
}
