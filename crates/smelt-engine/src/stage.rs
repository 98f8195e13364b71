//! Rows on their way to a table: buffered and written a few hundred thousand at a time,
//! then committed with the watermark and the flow's report ([`commit_with_report`]).

use arrow::array::{BooleanArray, RecordBatch};

use crate::ports::{LakeTable, Watermark, WriteStats};
use crate::report::{FlowReport, ReportStatus};
use crate::{Result, failpoint};

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
