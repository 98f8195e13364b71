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
        let order = key_order(rows, keys)?;
        let schema = rows.schema();
        let name = self.name.to_string();
        let mut tasks = Vec::new();
        let mut offset = 0;
        while offset < rows.num_rows() {
            let len = self.rows_per_file.min(rows.num_rows() - offset);
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
        let adds = match self.write_data(&rows, keys).await {
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
