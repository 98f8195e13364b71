//! Rows on their way to a table, written a few hundred thousand at a time, and the cast of
//! whole batches to a table's types (append and replace_where flows).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{BooleanArray, RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use arrow::util::display::array_value_to_string;
use smelt_core::cast::cast_columns_in;
use smelt_core::dialect::CastDialect;

use crate::ports::{LakeTable, Watermark, WriteStats};
use crate::report::{FlowReport, ReportStatus};
use crate::{EngineError, Result, failpoint};

/// Rows buffered before they are written as a data file.
pub const ROWS_PER_WRITE: usize = 256 * 1024;

/// Bytes buffered before they are written as a data file.
pub const BYTES_PER_WRITE: usize = 128 << 20;

/// Batches of one schema waiting to be staged as new rows of a table.
#[derive(Default)]
pub struct Buffered {
    batches: Vec<RecordBatch>,
    rows: usize,
    bytes: usize,
    /// Rows staged so far.
    pub rows_written: usize,
}

impl Buffered {
    /// Adds `batch`; true when enough is buffered to [`Buffered::flush`].
    pub fn push(&mut self, batch: RecordBatch) -> bool {
        if batch.num_rows() > 0 {
            self.rows += batch.num_rows();
            self.bytes += batch.get_array_memory_size();
            self.batches.push(batch);
        }
        self.rows >= ROWS_PER_WRITE || self.bytes >= BYTES_PER_WRITE
    }

    /// Stages the buffered rows in `table` (as new rows).
    pub async fn flush(&mut self, table: &mut dyn LakeTable) -> Result<()> {
        if self.batches.is_empty() {
            return Ok(());
        }
        let batches = std::mem::take(&mut self.batches);
        (self.rows, self.bytes) = (0, 0);
        let rows = arrow::compute::concat_batches(&batches[0].schema(), &batches)?;
        self.rows_written += rows.num_rows();
        let replaces = BooleanArray::from(vec![false; rows.num_rows()]);
        table.stage(rows, &replaces, &[]).await
    }
}

/// Runs `f` to completion from synchronous code running on the runtime (a reader's
/// callback): the worker thread blocks, others go on.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let handle = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| handle.block_on(f))
}

/// The first value that did not cast.
#[derive(Debug, Clone)]
pub struct CastMiss {
    /// Column.
    pub column: String,
    /// Target type.
    pub target: String,
    /// The value.
    pub value: String,
    /// Row within the batch.
    pub row: usize,
}

/// A batch cast to a table's types.
pub struct Cast {
    /// The rows, with the table's columns in its order.
    pub batch: RecordBatch,
    /// Values that did not cast (now NULL), per column.
    pub failures: BTreeMap<String, usize>,
    /// The first of them.
    pub first: Option<CastMiss>,
}

/// Casts the columns of `batch` named like the columns of `target` to their types
/// (smelt's casts: SAFE_CAST and better, DESIGN §5); other columns of `batch` are left out.
/// `batch` cast to `target` by the rules of `dialect`; a column of `target` that `batch`
/// lacks is an error.
pub fn cast_to_in(
    batch: &RecordBatch,
    target: &SchemaRef,
    tz: Option<&str>,
    dialect: CastDialect,
) -> Result<Cast> {
    let mut inputs = Vec::with_capacity(target.fields().len());
    for f in target.fields() {
        let c = batch.column_by_name(f.name()).ok_or_else(|| {
            EngineError::user(
                format!("column `{}` of the target is not in the input", f.name()),
                "add the column to the input, or remove it from the target's CREATE TABLE",
            )
        })?;
        inputs.push((Arc::clone(c), f.data_type().clone()));
    }
    let outputs = cast_columns_in(&inputs, tz, dialect)?;
    let mut failures = BTreeMap::new();
    let mut first: Option<CastMiss> = None;
    for (f, (out, (input, _))) in target.fields().iter().zip(outputs.iter().zip(&inputs)) {
        if out.failed_rows.is_empty() {
            continue;
        }
        failures.insert(f.name().clone(), out.failed_rows.len());
        let row = out.failed_rows[0];
        if first.as_ref().is_none_or(|m| row < m.row) {
            first = Some(CastMiss {
                column: f.name().clone(),
                target: crate::schema::type_name(f.data_type()),
                value: array_value_to_string(input, row)?,
                row,
            });
        }
    }
    let batch = RecordBatch::try_new_with_options(
        Arc::clone(target),
        outputs.into_iter().map(|o| o.array).collect(),
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?;
    Ok(Cast {
        batch,
        failures,
        first,
    })
}

/// The commit of a flow's written table, shared by every flow kind: the failpoint
/// `failpoint_name` fires first; then `report` (status `applied`, with the phases it has
/// so far) goes into the commit info beside `watermark`, so that the event-log row a crash
/// loses can be recovered from the table; the commit's counts go into `report`.
pub async fn commit_with_report(
    table: &mut dyn LakeTable,
    keys: &[String],
    mut watermark: Watermark,
    report: &mut FlowReport,
    failpoint_name: &str,
) -> Result<WriteStats> {
    failpoint(failpoint_name)?;
    report.status = ReportStatus::Applied;
    watermark.report = Some(serde_json::to_string(&*report).expect("serialisable"));
    let stats = table.commit(keys, &watermark).await?;
    report.silver_version = Some(stats.version);
    report.files_written = stats.files_added;
    report.files_removed = stats.files_removed;
    report.files_marked = stats.files_marked;
    report.bytes_written = stats.bytes_written;
    Ok(stats)
}

/// [`commit_with_report`] for append and replace_where: the phase `read` took `read.1` ms,
/// the failpoint is `before_target_commit`, and the rows the commit removed are the
/// report's `rows_replaced`.
pub async fn commit_report(
    target: &mut dyn LakeTable,
    watermark: Watermark,
    mut report: FlowReport,
    read: (&str, u64),
) -> Result<FlowReport> {
    let started = std::time::Instant::now();
    report.phases_ms = vec![(read.0.to_string(), read.1)];
    let stats =
        commit_with_report(target, &[], watermark, &mut report, "before_target_commit").await?;
    report.rows_replaced = stats.rows_removed;
    report
        .phases_ms
        .push(("commit".into(), started.elapsed().as_millis() as u64));
    Ok(report)
}
