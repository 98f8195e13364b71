//! Truncates (`apply_as_truncates`): the greatest one of a run empties silver as of its
//! sequence, recorded in the table property [`TRUNCATED_THROUGH`]; changes up to the
//! greatest truncate known are stale forever after.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{filter_record_batch, take};
use arrow::util::display::array_value_to_string;
use smelt_spec::ApplyFlow;

use super::cast::{CastPlan, column};
use crate::ports::LakeTable;
use crate::report::FlowReport;
use crate::{EngineError, Result};

/// The table property holding the sequence a truncate emptied silver through (JSON array of
/// the sequence values as text); older changes are stale forever after.
pub const TRUNCATED_THROUGH: &str = "smelt.truncatedThrough";

/// The greatest row (lexicographic over the columns) of `batches`, as one-row arrays.
fn greatest(batches: &[RecordBatch]) -> Result<Option<Vec<ArrayRef>>> {
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let all = arrow::compute::concat_batches(&first.schema(), batches)?;
    let Some(best) = smelt_core::guard::greatest(all.columns())? else {
        return Ok(None);
    };
    Ok(Some(
        all.columns().iter().map(|c| c.slice(best, 1)).collect(),
    ))
}

/// The sequence silver was truncated through, read back from [`TRUNCATED_THROUGH`] into
/// the types of `like` (one-row arrays).
fn truncated_through(silver: &dyn LakeTable, like: &[ArrayRef]) -> Result<Option<Vec<ArrayRef>>> {
    let Some(text) = silver.property(TRUNCATED_THROUGH) else {
        return Ok(None);
    };
    let bad = || {
        EngineError::user(
            format!(
                "table property `{TRUNCATED_THROUGH}` of `{}` is not what smelt wrote: {text}",
                silver.table()
            ),
            "restore it, or remove it if silver was rebuilt since the truncate",
        )
    };
    let values: Vec<Option<String>> = serde_json::from_str(&text).map_err(|_| bad())?;
    if values.len() != like.len() {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(like.len());
    for (v, l) in values.iter().zip(like) {
        let input: ArrayRef = Arc::new(arrow::array::StringArray::from(vec![v.as_deref()]));
        let cast = smelt_core::cast::cast_column(&input, l.data_type(), Some("UTC"))?;
        if !cast.failed_rows.is_empty() {
            return Err(bad());
        }
        out.push(cast.array);
    }
    Ok(Some(out))
}

/// The truncates of a run against the one silver was truncated through: whether this run
/// truncates silver (recorded in [`TRUNCATED_THROUGH`] unless `dry_run`), and the sequence
/// changes up to which are stale. `truncates` are the sequence columns of the run's
/// truncates ([`CastPlan::cast`]).
pub(super) async fn resolve_truncates(
    flow: &ApplyFlow,
    silver: &mut dyn LakeTable,
    truncates: Vec<RecordBatch>,
    casting: &CastPlan,
    dry_run: bool,
) -> Result<(bool, Option<Vec<ArrayRef>>)> {
    let run_truncate = greatest(&truncates)?;
    drop(truncates);
    let stored_truncate = match &run_truncate {
        Some(t) => truncated_through(&*silver, t)?,
        None if flow.apply_as_truncates.is_some()
            || silver.property(TRUNCATED_THROUGH).is_some() =>
        {
            // Types of the sequence columns, from an empty cast batch.
            let idx = casting
                .sequence
                .iter()
                .map(|n| casting.schema.index_of(n))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let like = RecordBatch::new_empty(Arc::clone(&casting.schema)).project(&idx)?;
            truncated_through(&*silver, like.columns())?
        }
        None => None,
    };
    let truncate_now = match (&run_truncate, &stored_truncate) {
        (Some(run), Some(stored)) => smelt_core::guard::newer_than(run, stored, 1)?.value(0),
        (Some(_), None) => true,
        _ => false,
    };
    let stale_through = if truncate_now {
        run_truncate.clone()
    } else {
        stored_truncate
    };
    if truncate_now && !dry_run {
        let run = run_truncate.as_ref().expect("truncate_now");
        let text: Vec<Option<String>> = run
            .iter()
            .map(|a| {
                (!a.is_null(0))
                    .then(|| array_value_to_string(a, 0))
                    .transpose()
            })
            .collect::<std::result::Result<_, _>>()?;
        silver
            .set_property(
                TRUNCATED_THROUGH,
                &serde_json::to_string(&text).expect("text"),
            )
            .await?;
    }
    Ok((truncate_now, stale_through))
}

/// `batch` without the changes a truncate came after: those with a sequence up to
/// `stale_through` (counted as stale).
pub(super) fn drop_stale(
    batch: RecordBatch,
    stale_through: Option<&[ArrayRef]>,
    cast_sequence: &[String],
    report: &mut FlowReport,
) -> Result<RecordBatch> {
    // Changes a truncate came after are stale.
    let batch = match stale_through {
        Some(through) if batch.num_rows() > 0 => {
            let n = batch.num_rows();
            let seq: Vec<ArrayRef> = cast_sequence
                .iter()
                .map(|c| column(&batch, c))
                .collect::<Result<_>>()?;
            let zeros = UInt32Array::from(vec![0u32; n]);
            let bound: Vec<ArrayRef> = through
                .iter()
                .map(|t| take(t.as_ref(), &zeros, None))
                .collect::<std::result::Result<_, _>>()?;
            let after = smelt_core::guard::newer_than(&seq, &bound, n)?;
            report.stale += n - after.true_count();
            if after.true_count() == n {
                batch
            } else {
                filter_record_batch(&batch, &after)?
            }
        }
        _ => batch,
    };
    Ok(batch)
}
