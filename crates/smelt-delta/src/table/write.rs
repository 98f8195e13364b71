//! Writing data files: the writer, rows cut into files (`write_data`, `write_file`),
//! staging a run's rows with their change data (`stage`), and the task pool (`on_cores`).

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow::datatypes::SchemaRef;
use deltalake::kernel::Add;
use deltalake::writer::RecordBatchWriter;
use smelt_core::change::{INSERT, UPDATE_POSTIMAGE};

use super::DeltaLakeTable;
use super::batches::{align_to, key_columns, key_order, on_cores, with_change_type, write_file};
use crate::error::{Context, Error, Result};
use crate::parquet;

impl DeltaLakeTable {
    /// A writer of data files for this table (or for the table about to be created).
    pub(super) fn writer(&self, schema: &SchemaRef, keys: &[String]) -> Result<RecordBatchWriter> {
        let snapshot = self.table.as_ref().and_then(|t| t.snapshot().ok());
        let same_schema = snapshot
            .as_ref()
            .is_some_and(|s| s.snapshot().arrow_schema().fields() == schema.fields());
        let writer = match &self.table {
            Some(table) if self.staged.evolved.is_none() && same_schema => {
                RecordBatchWriter::for_table(table)
            }
            _ => RecordBatchWriter::try_new(
                self.lake.table_url(&self.name)?.as_str(),
                Arc::clone(schema),
                // New columns or wider types keep the table's partitioning.
                snapshot
                    .as_ref()
                    .map(|s| s.metadata().partition_columns().to_vec())
                    .filter(|p| !p.is_empty()),
                Some(self.lake.storage_options(&self.name)?),
            ),
        }
        .context(|| format!("writing `{}`", self.name))?;
        Ok(writer.with_writer_properties(parquet::writer_properties(keys)))
    }

    /// Writes `rows` as data files of at most `rows_per_file` rows, on all cores.
    /// With `keys`, the files are written in key order (see [`key_order`]), each file's
    /// rows taken as its task starts, so that a few files' copies are in memory at a time.
    pub(super) async fn write_data(&self, rows: &RecordBatch, keys: &[String]) -> Result<Vec<Add>> {
        (self.write_data_in(rows, keys, self.rows_per_file, true)).await
    }

    /// As [`Self::write_data`], in files of at most `per_file` rows, in key order only when
    /// `in_key_order`.
    async fn write_data_in(
        &self,
        rows: &RecordBatch,
        keys: &[String],
        per_file: usize,
        in_key_order: bool,
    ) -> Result<Vec<Add>> {
        let order = if in_key_order {
            key_order(rows, keys)?
        } else {
            None
        };
        let schema = rows.schema();
        let name = self.name.to_string();
        let mut tasks = Vec::new();
        let mut offset = 0;
        while offset < rows.num_rows() {
            let len = per_file.max(1).min(rows.num_rows() - offset);
            let writer = self.writer(&schema, keys)?;
            let (rows, order, name) = (rows.clone(), order.clone(), name.clone());
            tasks.push(async move {
                let chunk = match order {
                    Some(order) => {
                        arrow::compute::take_record_batch(&rows, &order.slice(offset, len))?
                    }
                    None => rows.slice(offset, len),
                };
                drop(rows);
                write_file(writer, chunk, name).await
            });
            offset += len;
        }
        let adds = on_cores(&name, tasks).await?;
        Ok(adds.into_iter().flatten().collect())
    }

    /// `TableSink::stage`: writes `rows` as data files, with change data once silver
    /// holds data, and records the keys of the rows that replace stored rows.
    pub(super) async fn stage(
        &mut self,
        rows: RecordBatch,
        replaces: &BooleanArray,
        keys: &[String],
    ) -> smelt_engine::Result<()> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        self.settle_found().await?;
        let schema = match (&self.pending, &self.table) {
            (Some(schema), _) => {
                self.lake.prepare(&self.name)?;
                Arc::clone(schema)
            }
            (None, Some(table)) => self.current_schema(table)?,
            (None, None) => {
                return Err(smelt_engine::EngineError::Internal(format!(
                    "stage called for `{}`, which does not exist",
                    self.name
                )));
            }
        };
        let rows = align_to(&rows, &schema)?;
        // Once silver holds data, a commit may replace rows and then carries change data
        // files, which readers use alone: every staged row goes in them too. That file is
        // written on another core while the data files are.
        let mut change_data = None;
        if let Some(table) = &self.table {
            let snapshot = table
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?;
            // An overwrite carries no change data: readers take its removes as deletes
            // and its adds as inserts.
            // A commit that only appends needs none: readers take its adds as inserts.
            let only_appends =
                keys.is_empty() && replaces.true_count() == 0 && self.staged.delete_where.is_none();
            if self.writes_change_data()
                && snapshot.log_data().num_files() > 0
                && !self.staged.overwrite
                && !only_appends
            {
                let kinds: ArrayRef =
                    Arc::new(StringArray::from_iter_values(replaces.iter().map(|r| {
                        if r == Some(true) {
                            UPDATE_POSTIMAGE
                        } else {
                            INSERT
                        }
                    })));
                let batch = with_change_type(&rows, kinds)?;
                let (store, name) = (table.object_store(), self.name.to_string());
                let keys = keys.to_vec();
                change_data = Some(tokio::spawn(async move {
                    parquet::write_change_data(store, &name, &batch, &keys).await
                }));
            }
        }
        let per_file = new_rows_per_file(rows.num_rows(), self.rows_per_file, parquet::cores());
        // The first rows of a table (or of its rebuild) are written in key order, so that
        // each file holds a key range of its own. A later run's rows are written as they
        // come: their files' ranges overlap the stored files' whatever their order, and
        // sorting them (the key sort, then every column taken in its order) was a third of
        // a merge-on-read run's write (BENCHMARKS.md, run J). `smelt optimize --cluster`
        // puts a table's files in key order.
        let first_rows = self.staged.overwrite
            || self
                .table
                .as_ref()
                .and_then(|t| t.snapshot().ok())
                .is_none_or(|s| s.log_data().num_files() == 0);
        let adds = match (self.write_data_in(&rows, keys, per_file, first_rows)).await {
            Ok(adds) => adds,
            Err(e) => {
                // The change data would go with nothing: stop writing it.
                if let Some(task) = &change_data {
                    task.abort();
                }
                return Err(e.into());
            }
        };
        self.staged.adds.extend(adds);
        if let Some(task) = change_data {
            let cdc = task.await.map_err(|e| {
                Error::internal(format!(
                    "a task writing change data of `{}` failed: {e}",
                    self.name
                ))
            })??;
            self.staged.cdc.push(cdc);
        }
        if replaces.true_count() > 0 {
            // The keys alone are kept: filter those, not the whole rows.
            let replaced = key_columns(&rows, keys, &schema)?
                .iter()
                .map(|c| arrow::compute::filter(c, replaces))
                .collect::<Result<Vec<_>, _>>()?;
            self.staged.replaced.push(replaced);
        }
        Ok(())
    }
}

/// Rows per file for `rows` new rows of a run: the table's `rows_per_file`, or fewer so that
/// each of `cores` encodes a file (encoding is most of a write) when every file still holds
/// at least a quarter of `rows_per_file` (smaller ones count as small files to compact).
/// 185,000 new rows on two cores: two files of 92,500 rows, written at once, not one.
fn new_rows_per_file(rows: usize, rows_per_file: usize, cores: usize) -> usize {
    let small = (rows_per_file / 4).max(1);
    let files = rows.div_ceil(rows_per_file.max(1));
    if files >= cores {
        return rows_per_file;
    }
    let files = cores.min(rows / small).max(files).max(1);
    rows.div_ceil(files)
}

#[cfg(test)]
mod tests {
    use super::new_rows_per_file;

    #[test]
    fn new_rows_are_spread_over_the_cores_while_files_stay_a_quarter_full() {
        let full = 262_144;
        // One file's worth on two cores: two files.
        assert_eq!(new_rows_per_file(185_000, full, 2), 92_500);
        // Too few rows for two quarter-full files: one.
        assert_eq!(new_rows_per_file(100_000, full, 2), 100_000);
        // Enough files for the cores already: full files.
        assert_eq!(new_rows_per_file(2_000_000, full, 2), full);
        // Four cores, rows for three quarter-full files: three.
        assert_eq!(new_rows_per_file(200_000, full, 4), 66_667);
        assert_eq!(new_rows_per_file(300_000, full, 8), 75_000);
        assert_eq!(new_rows_per_file(1, full, 2), 1);
    }
}
