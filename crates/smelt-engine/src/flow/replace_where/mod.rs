//! The `replace_where` flow (seed 003's Delta `replaceWhere`): a batch atomically replaces
//! the target rows matching a predicate. Every batch row must match it (else nothing is
//! committed, and the error names the row); the predicate may use the batch's bounds.

pub mod files;
mod runner;
pub(crate) use runner::ReplaceWhere;

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::util::display::array_value_to_string;
use async_trait::async_trait;
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use datafusion::scalar::ScalarValue;
use futures::TryStreamExt;
use smelt_spec::{OnCastError, ReplaceWhereFlow};

use crate::cast::{CastMiss, cast_to_in};
use crate::flow::apply::RunContext;
use crate::flow::{FlowRun, report_head};
use crate::ports::{ChangeSource, LakeTable, Reporter, Watermark};
use crate::predicate::Predicate;
use crate::report::{FlowReport, ReadMode, ReportStatus};
use crate::stage::{Buffered, block_on, commit_report};
use crate::{EngineError, Result};

/// Where rows of a batch come from, for error messages: a file or table, and each row's
/// 1-based number in a file.
pub struct Origin<'a> {
    /// The file's URL, or `` `table` version N ``.
    pub source: &'a str,
    /// Row numbers in the file, one per row of the batch; `None` in a table, whose rows have
    /// no numbers a user could find (both engines name such a row by its values).
    pub rows: Option<&'a [i64]>,
}

impl Origin<'_> {
    /// Row `i` of the batch, for a message: "row 3 of file:///…", "a row of `t` version 2".
    pub fn row(&self, i: usize) -> String {
        match self.rows {
            Some(rows) => format!("row {} of {}", rows[i], self.source),
            None => format!("a row of {}", self.source),
        }
    }
}

/// A sink of batch rows.
pub type BatchSink<'a> = dyn FnMut(RecordBatch, Origin<'_>) -> Result<()> + Send + 'a;

/// A `replace_where` batch, readable as often as asked.
#[async_trait]
pub trait BatchSource: Send + Sync {
    /// Streams every row of the batch to `sink`, in order.
    async fn read(&self, sink: &mut BatchSink<'_>) -> Result<()>;
}

/// A table's snapshot as a batch.
pub struct TableBatch<'a>(pub &'a dyn ChangeSource);

#[async_trait]
impl BatchSource for TableBatch<'_> {
    async fn read(&self, sink: &mut BatchSink<'_>) -> Result<()> {
        let label = format!("`{}` version {}", self.0.table(), self.0.version());
        let mut batches = self.0.read(None);
        while let Some(batch) = batches.try_next().await? {
            let origin = Origin {
                source: &label,
                rows: None,
            };
            sink(batch, origin)?;
        }
        Ok(())
    }
}

pub use smelt_spec::bounds::{Placeholder, placeholders};

/// A value as a SQL literal of its exact type: integers as they are, strings quoted, the
/// rest (decimals, floats, dates, timestamps) as `arrow_cast('<text>', '<type>')`, so that
/// no comparison goes through a float or a nanosecond timestamp.
pub fn literal(value: &ScalarValue) -> Result<String> {
    if value.is_null() {
        return Ok("NULL".into());
    }
    let text = array_value_to_string(&value.to_array()?, 0)?;
    let quoted = format!("'{}'", text.replace('\'', "''"));
    let ty = value.data_type();
    Ok(if ty.is_integer() {
        text
    } else if matches!(
        ty,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        quoted
    } else {
        format!("arrow_cast({quoted}, '{ty}')")
    })
}

/// A placeholder of a column the target lacks.
pub fn unknown_bound(flow: &ReplaceWhereFlow, h: &Placeholder) -> EngineError {
    EngineError::user(
        format!("`{}` names no column of `{}`", h.text, flow.into),
        "use a target column, e.g. `{min(updated_at)}`",
    )
}

/// A placeholder the batch gives no value.
pub fn empty_bound(h: &Placeholder) -> EngineError {
    EngineError::user(
        format!(
            "`{}` has no value: the batch has no non-NULL `{}`",
            h.text, h.column
        ),
        "bound the predicate by a column the batch always fills, or write the bound out",
    )
}

/// A batch row (`row`, e.g. "row 3 of `t` version 2", with its `values`) outside
/// `predicate`: nothing is written.
pub fn outside(row: &str, predicate: &str, values: &str) -> EngineError {
    EngineError::user(
        format!(
            "{row} is outside the predicate `{predicate}`, so replacing the rows it matches would not replace this one: {values}"
        ),
        "widen the predicate to cover the whole batch (e.g. with `{min(col)}`), or leave such rows out of the batch; nothing was written",
    )
}

/// `on_cast_error: fail`: `miss`, a value of batch row `row` (e.g. "row 3 of `t` version
/// 2") that does not cast.
pub fn cast_failed(miss: CastMiss, row: &str) -> EngineError {
    EngineError::Cast {
        source: Box::new(smelt_core::CoreError::CastFailed {
            column: miss.column,
            target: miss.target,
            value: miss.value,
            context: format!(" ({row})"),
        }),
    }
}

/// The batch changed between its check and its write.
fn changed_batch(detail: &str) -> EngineError {
    EngineError::user(
        format!("the batch changed while it was applied ({detail})"),
        "nothing was committed; run again once its files are complete (files should be written under a hidden name and renamed)",
    )
}

/// `row` of `batch` as `col = value, …`.
pub fn describe(batch: &RecordBatch, row: usize) -> String {
    batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, c)| {
            let v = if c.is_null(row) {
                "NULL".to_string()
            } else {
                array_value_to_string(c, row).unwrap_or_default()
            };
            format!("{} = {v}", f.name())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `flow.predicate` with its `{min(col)}` / `{max(col)}` placeholders filled from `batch`
/// (cast to `schema`) as literals of the column's exact type.
async fn fill_bounds(
    flow_name: &str,
    flow: &ReplaceWhereFlow,
    batch: &dyn BatchSource,
    schema: &SchemaRef,
    reporter: &dyn Reporter,
) -> Result<String> {
    let (tz, dialect) = (
        flow.tz.as_deref(),
        crate::flow::apply::core_dialect(flow.cast_dialect),
    );
    let holes = placeholders(&flow.predicate);
    let mut text = flow.predicate.clone();
    if !holes.is_empty() {
        reporter.phase(flow_name, "batch bounds");
        let mut accumulators: Vec<Box<dyn Accumulator>> = Vec::new();
        for h in &holes {
            let field = schema
                .field_with_name(&h.column)
                .map_err(|_| unknown_bound(flow, h))?;
            let ty = field.data_type();
            accumulators.push(if h.max {
                Box::new(MaxAccumulator::try_new(ty)?)
            } else {
                Box::new(MinAccumulator::try_new(ty)?)
            });
        }
        let mut sink = |rows: RecordBatch, _: Origin<'_>| -> Result<()> {
            let cast = cast_to_in(&rows, schema, tz, dialect)?;
            for (h, acc) in holes.iter().zip(accumulators.iter_mut()) {
                let column = cast
                    .batch
                    .column_by_name(&h.column)
                    .expect("a target column");
                acc.update_batch(&[Arc::clone(column)])?;
            }
            Ok(())
        };
        batch.read(&mut sink).await?;
        for (h, acc) in holes.iter().zip(accumulators.iter_mut()) {
            let value = acc.evaluate()?;
            if value.is_null() {
                return Err(empty_bound(h));
            }
            text = text.replace(&h.text, &literal(&value)?);
        }
    }
    Ok(text)
}

/// Replaces the rows of `target` matching `flow.predicate` with the rows of `batch`, in one
/// commit carrying `watermark`. Needs a multi-threaded runtime.
pub async fn run_replace_where(
    run: FlowRun<'_, ReplaceWhereFlow>,
    batch: &dyn BatchSource,
    target: &mut dyn LakeTable,
    watermark: Watermark,
) -> Result<FlowReport> {
    let FlowRun {
        name: flow_name,
        spec: flow,
        ctx,
        reporter,
    } = run;
    let mut report = FlowReport {
        mode: ReadMode::Batch,
        to_version: watermark.version,
        silver_version: target.version(),
        ..run.report()
    };
    let schema = target_schema(flow, target.schema())?;
    let tz = flow.tz.as_deref();
    let dialect = crate::flow::apply::core_dialect(flow.cast_dialect);

    // Pass 1: the batch's bounds, for the placeholders.
    let started = Instant::now();
    let text = fill_bounds(flow_name, flow, batch, &schema, reporter).await?;
    let predicate = Predicate::compile(&text, &schema, "`predicate`")?;
    report.predicate = Some(text.clone());
    if ctx.dry_run {
        report.status = ReportStatus::Planned;
        return Ok(report);
    }

    // Pass 2: check every row against the predicate (and cast it), before anything is
    // written. A batch small enough to hold is kept and written from memory; a larger one is
    // read a third time to be written.
    reporter.phase(flow_name, "check the batch");
    let mut held = Some(Buffered::default());
    let mut read = 0;
    let mut check = |rows: RecordBatch, origin: Origin<'_>| -> Result<RecordBatch> {
        let cast = cast_to_in(&rows, &schema, tz, dialect)?;
        if let (OnCastError::Fail, Some(miss)) = (flow.on_cast_error, cast.first) {
            let row = origin.row(miss.row);
            return Err(cast_failed(miss, &row));
        }
        let pass = predicate.evaluate(&cast.batch)?;
        if let Some(i) = (0..pass.len()).find(|&i| !pass.value(i)) {
            return Err(outside(&origin.row(i), &text, &describe(&cast.batch, i)));
        }
        for (c, n) in &cast.failures {
            *report.cast_failures.entry(c.clone()).or_default() += n;
        }
        Ok(cast.batch)
    };
    let mut sink = |rows: RecordBatch, origin: Origin<'_>| -> Result<()> {
        read += rows.num_rows();
        let cast = check(rows, origin)?;
        if let Some(buffer) = &mut held
            && buffer.push(cast)
        {
            held = None; // too big to hold: written by pass 3
        }
        Ok(())
    };
    batch.read(&mut sink).await?;

    reporter.phase(flow_name, "write the batch");
    if target.schema().is_none() {
        target.create(Arc::clone(&schema)).await?;
    }
    // Before the rows: their commit removes rows, so they go with change data.
    target.stage_delete_where(predicate.clone()).await?;
    let mut buffer = match held {
        Some(buffer) => buffer,
        None => {
            // Checked again as it is written: the batch must be what pass 2 checked.
            let mut buffer = Buffered::default();
            let mut again = 0;
            let mut sink = |rows: RecordBatch, origin: Origin<'_>| -> Result<()> {
                again += rows.num_rows();
                let cast = cast_to_in(&rows, &schema, tz, dialect)?;
                let pass = predicate.evaluate(&cast.batch)?;
                if cast.first.is_some() && flow.on_cast_error == OnCastError::Fail
                    || pass.true_count() < pass.len()
                {
                    return Err(changed_batch(origin.source));
                }
                if buffer.push(cast.batch) {
                    block_on(buffer.flush(target))?;
                }
                Ok(())
            };
            batch.read(&mut sink).await?;
            if again != read {
                return Err(changed_batch(&format!("{again} rows, not {read}")));
            }
            buffer
        }
    };
    buffer.flush(target).await?;
    report.changes_read = read;
    report.rows_written = buffer.rows_written;
    report.inserted = buffer.rows_written;
    report.on_cast_error = format!("{:?}", flow.on_cast_error).to_lowercase();
    let read_ms = started.elapsed().as_millis() as u64;

    reporter.phase(flow_name, "commit");
    commit_report(target, watermark, report, ("read and check", read_ms)).await
}

/// The report of a replace_where run that finds no new batch: `applied` is the stored
/// watermark, `to_version` the source version (or batch number) seen.
pub fn up_to_date(
    flow_name: &str,
    flow: &ReplaceWhereFlow,
    ctx: &RunContext,
    applied: Option<i64>,
    to_version: i64,
    target_version: Option<i64>,
) -> FlowReport {
    FlowReport {
        status: ReportStatus::UpToDate,
        from_version: applied,
        to_version,
        silver_version: target_version,
        ..report_head(flow_name, flow, &ctx.run_id)
    }
}

/// The watermark a replace_where commit carries: source version (or batch number)
/// `version` applied, with the ledger entries `extra`.
pub fn watermark(
    flow_name: &str,
    ctx: &RunContext,
    version: i64,
    extra: Vec<(String, String)>,
) -> Watermark {
    Watermark {
        app_id: crate::flow::apply::app_id(flow_name),
        version,
        run_id: ctx.run_id.clone(),
        report: None,
        extra,
        source: None,
    }
}

/// The columns a replace_where flow writes: the target's, else its DDL's.
pub fn target_schema(flow: &ReplaceWhereFlow, existing: Option<SchemaRef>) -> Result<SchemaRef> {
    match (existing, &flow.target) {
        (Some(s), _) => Ok(s),
        (None, Some(def)) => Ok(crate::schema::arrow_schema(def)),
        (None, None) => Err(EngineError::user(
            format!(
                "`{}` does not exist and the flow has no `schema:`",
                flow.into
            ),
            "add `schema: <CREATE TABLE file>` to the flow, or create the table first",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_filled_as_literals_of_their_type() {
        assert_eq!(literal(&ScalarValue::Int64(Some(3))).unwrap(), "3");
        assert_eq!(
            literal(&ScalarValue::Utf8(Some("it's".into()))).unwrap(),
            "'it''s'"
        );
        assert_eq!(literal(&ScalarValue::Int64(None)).unwrap(), "NULL");
    }

    /// The least value of each type satisfies `col >= {min(col)}`, exactly: no float
    /// rounding of decimals, no nanosecond overflow of far dates, NaN allowed.
    #[test]
    fn literals_keep_their_exact_type() {
        use arrow::array::{
            ArrayRef, Date32Array, Decimal128Array, Float64Array, TimestampMicrosecondArray,
        };
        let far = 253_402_214_400_000_000i64; // 9999-12-31
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "amt",
                Arc::new(
                    Decimal128Array::from(vec![123_450_000_000_000_000_000i128])
                        .with_precision_and_scale(38, 18)
                        .unwrap(),
                ),
            ),
            (
                "at",
                Arc::new(TimestampMicrosecondArray::from(vec![far]).with_timezone("UTC")),
            ),
            (
                "naive",
                Arc::new(TimestampMicrosecondArray::from(vec![far])),
            ),
            ("day", Arc::new(Date32Array::from(vec![2_932_896]))),
            ("x", Arc::new(Float64Array::from(vec![f64::NAN]))),
        ];
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        for (i, f) in batch.schema().fields().iter().enumerate() {
            let value = ScalarValue::try_from_array(batch.column(i), 0).unwrap();
            let sql = format!("\"{}\" >= {}", f.name(), literal(&value).unwrap());
            let p = Predicate::compile(&sql, &batch.schema(), "test").unwrap();
            assert!(p.evaluate(&batch).unwrap().value(0), "{sql}");
            let sql = format!("\"{}\" > {}", f.name(), literal(&value).unwrap());
            let p = Predicate::compile(&sql, &batch.schema(), "test").unwrap();
            if f.name() != "x" {
                assert!(!p.evaluate(&batch).unwrap().value(0), "{sql}");
            }
        }
    }
}
