//! Files rewritten in key order across them (`smelt optimize --cluster`): the live rows of
//! a partition's files go through DataFusion's sort, which spills sorted runs to local disk
//! past the memory limit and merges them, and come out cut into files of the table's rows
//! per file. Each new file then holds a key range of its own, which the guard's lookup
//! skips by (`prune`).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use arrow::datatypes::SchemaRef;
use deltalake::datafusion::error::DataFusionError;
use deltalake::datafusion::execution::TaskContext;
use deltalake::datafusion::execution::runtime_env::RuntimeEnvBuilder;
use deltalake::datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use deltalake::datafusion::physical_plan::expressions::col;
use deltalake::datafusion::physical_plan::sorts::sort::SortExec;
use deltalake::datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use deltalake::datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use deltalake::datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use deltalake::datafusion::prelude::SessionConfig;
use deltalake::kernel::Add;
use deltalake::logstore::ObjectStoreRef;
use futures::{StreamExt, TryStreamExt};

use super::DeltaLakeTable;
use super::batches::{read_whole, write_file};
use crate::error::{Context, Error, Result};
use crate::parquet::{self, FileRef};

/// Memory the sort keeps back for merging its spilled runs: a quarter of the limit, at
/// most DataFusion's default (10 MiB).
fn merge_reservation(limit: u64) -> usize {
    (limit / 4).min(10 << 20) as usize
}

/// What one key-ordered rewrite wrote.
pub(super) struct Clustered {
    pub adds: Vec<Add>,
    /// Live rows read (and written).
    pub rows: u64,
    pub bytes_spilled: u64,
}

/// The live rows of some data files, one file at a time, for DataFusion.
#[derive(Debug)]
struct LiveRows {
    schema: SchemaRef,
    store: ObjectStoreRef,
    table: String,
    files: Vec<FileRef>,
}

impl PartitionStream for LiveRows {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (store, table, schema) = (
            Arc::clone(&self.store),
            self.table.clone(),
            Arc::clone(&self.schema),
        );
        let rows = futures::stream::iter(self.files.clone()).then(move |file| {
            let (store, table, schema) = (Arc::clone(&store), table.clone(), Arc::clone(&schema));
            async move {
                read_whole(store, &table, &file, None, None, &schema)
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            rows,
        ))
    }
}

impl DeltaLakeTable {
    /// Writes the live rows of `files` (one partition's) sorted by `keys` (ascending, NULLs
    /// first) into new data files of the table's rows per file, each written on a core of
    /// its own while the sort goes on; at most `memory_limit` bytes of rows are held to sort
    /// (the rest spilled).
    pub(super) async fn rewrite_in_key_order(
        &self,
        files: Vec<FileRef>,
        schema: &SchemaRef,
        keys: &[String],
        memory_limit: Option<u64>,
    ) -> Result<Clustered> {
        let doing = || format!("putting the files of `{}` in key order", self.name);
        let mut runtime = RuntimeEnvBuilder::new();
        let mut config = SessionConfig::new();
        if let Some(limit) = memory_limit {
            runtime = runtime.with_memory_limit(limit as usize, 1.0);
            config = config.with_sort_spill_reservation_bytes(merge_reservation(limit));
        }
        let task = TaskContext::default()
            .with_session_config(config)
            .with_runtime(runtime.build_arc().context(doing)?);
        let source = LiveRows {
            schema: Arc::clone(schema),
            store: self.table()?.object_store(),
            table: self.name.to_string(),
            files,
        };
        let input = StreamingTableExec::try_new(
            Arc::clone(schema),
            vec![Arc::new(source)],
            None,
            [],
            false,
            None,
        )
        .context(doing)?;
        let order = keys
            .iter()
            .map(|k| {
                Ok(PhysicalSortExpr::new(
                    col(k, schema).context(doing)?,
                    SortOptions {
                        descending: false,
                        nulls_first: true,
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let order = LexOrdering::new(order)
            .ok_or_else(|| Error::internal(format!("no key to order `{}` by", self.name)))?;
        let sort = Arc::new(SortExec::new(order, Arc::new(input)));
        let mut sorted = sort.execute(0, Arc::new(task)).context(doing)?;

        let per_file = self.rows_per_file.max(1);
        let name = self.name.to_string();
        let mut writes = Vec::new();
        let mut adds = Vec::new();
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0;
        let mut rows = 0u64;
        loop {
            let batch = sorted
                .try_next()
                .await
                .map_err(|e| unwrap_error(e, doing))?;
            let last = batch.is_none();
            if let Some(batch) = batch {
                rows += batch.num_rows() as u64;
                pending_rows += batch.num_rows();
                pending.push(batch);
            }
            while pending_rows >= per_file || (last && pending_rows > 0) {
                let all = arrow::compute::concat_batches(schema, pending.iter())?;
                let take = per_file.min(all.num_rows());
                let rest = all.slice(take, all.num_rows() - take);
                pending_rows = rest.num_rows();
                pending = vec![rest];
                let writer = self.writer(schema, keys)?;
                let chunk = all.slice(0, take);
                writes.push(tokio::spawn(write_file(writer, chunk, name.clone())));
                // A file per core in flight, not more: each holds its rows until written.
                if writes.len() >= parquet::cores() {
                    adds.extend(join(writes.remove(0), &name).await?);
                }
            }
            if last {
                break;
            }
        }
        for w in writes {
            adds.extend(join(w, &name).await?);
        }
        let bytes_spilled = sort.metrics().and_then(|m| m.spilled_bytes()).unwrap_or(0) as u64;
        Ok(Clustered {
            adds,
            rows,
            bytes_spilled,
        })
    }
}

/// A file write's `add` actions, or why it failed.
async fn join(task: tokio::task::JoinHandle<Result<Vec<Add>>>, table: &str) -> Result<Vec<Add>> {
    task.await
        .map_err(|e| Error::internal(format!("a task writing `{table}` failed: {e}")))?
}

/// smelt's own error back out of DataFusion's (a file that could not be read keeps its
/// message); too little memory for the sort, with the fix; else DataFusion's with what was
/// being done.
fn unwrap_error(e: DataFusionError, doing: impl FnOnce() -> String) -> Error {
    match e {
        DataFusionError::External(inner) => match inner.downcast::<Error>() {
            Ok(ours) => *ours,
            Err(other) => Error::internal(format!("{}: {other}", doing())),
        },
        DataFusionError::ResourcesExhausted(why) => Error::user(
            format!("{}: the memory limit is too small: {why}", doing()),
            "give the sort more memory with `--memory-limit` (it spills past it, but needs room for a file's rows)",
        ),
        e => Error::DataFusion {
            context: doing(),
            source: Box::new(e),
        },
    }
}
