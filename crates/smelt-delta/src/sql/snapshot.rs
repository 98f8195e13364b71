//! The rows of one table version as a DataFusion table, read by smelt's own reader (a
//! [`ChangeSource`]'s snapshot): for the Delta tables delta-rs' provider refuses but smelt
//! reads right (reader features that need no reader work, such as `vacuumProtocolCheck`,
//! or whose work smelt does, such as `typeWidening`), and for the tables of the pipeline's
//! Iceberg catalogs. The rows stream from the files when the query runs.

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use deltalake::DeltaTable;
use deltalake::datafusion::catalog::TableProvider;
use deltalake::datafusion::catalog::streaming::StreamingTable;
use deltalake::datafusion::error::DataFusionError;
use deltalake::datafusion::execution::{SendableRecordBatchStream, TaskContext};
use deltalake::datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use deltalake::datafusion::physical_plan::streaming::PartitionStream;
use deltalake::kernel::transaction::PROTOCOL;
use futures::StreamExt;
use smelt_engine::ports::ChangeSource;
use smelt_spec::TableName;

use crate::error::{Context, Result};
use crate::source::DeltaSource;

/// The table `smelt sql` reads for Delta table `name` (loaded at the version asked for):
/// delta-rs' provider (which prunes files and pushes filters down) when it reads the
/// table, else smelt's reader. A table neither reads keeps delta-rs' provider, which
/// refuses it, naming the features, when a query reads it.
pub(crate) async fn delta(name: &TableName, table: DeltaTable) -> Result<Arc<dyn TableProvider>> {
    let state = table.snapshot().context(|| format!("reading `{name}`"))?;
    let delta_rs_reads = PROTOCOL.can_read_from_protocol(state.protocol()).is_ok();
    if !delta_rs_reads && crate::features::check_readable(&name.to_string(), state).is_ok() {
        return of_source(Box::new(DeltaSource::of(name, table)?));
    }
    table
        .table_provider()
        .await
        .context(|| format!("scanning `{name}`"))
}

/// The rows of `source` at its version, as a table.
pub(crate) fn of_source(source: Box<dyn ChangeSource>) -> Result<Arc<dyn TableProvider>> {
    let schema = source.schema();
    let name = source.table().to_string();
    let rows = Rows {
        source: Arc::from(source),
        schema: Arc::new(Schema::new(schema.fields().clone())),
    };
    let table = StreamingTable::try_new(Arc::clone(&rows.schema), vec![Arc::new(rows)])
        .context(|| format!("reading `{name}`"))?;
    Ok(Arc::new(table))
}

/// A source's snapshot rows, streamed when the query runs.
struct Rows {
    source: Arc<dyn ChangeSource>,
    /// The table's columns (the source's batches also carry the change metadata).
    schema: SchemaRef,
}

impl std::fmt::Debug for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rows")
            .field("table", &self.source.table().to_string())
            .field("version", &self.source.version())
            .finish()
    }
}

impl PartitionStream for Rows {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), 2);
        let tx = builder.tx();
        let (source, schema) = (Arc::clone(&self.source), Arc::clone(&self.schema));
        builder.spawn(async move {
            let columns: Vec<usize> = (0..schema.fields().len()).collect();
            let mut batches = source.read(None);
            while let Some(batch) = batches.next().await {
                let batch = batch.map_err(|e| DataFusionError::External(Box::new(e)))?;
                let data = batch.project(&columns)?.with_schema(Arc::clone(&schema))?;
                if tx.send(Ok(data)).await.is_err() {
                    break;
                }
            }
            Ok(())
        });
        builder.build()
    }
}
