//! The newer-than guard and the SCD1 apply plan (DESIGN §3.5–3.6).
//!
//! Input: the latest change per key (already cast to silver types) lined up with what
//! silver stores for the same key (NULLs where the key is new). Output: which rows to
//! write, which of those changed data (so they get a new `_update_timestamp`), and the
//! counts the run report shows.

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::compute::kernels::boolean::{and, and_not, not, or};
use arrow::compute::kernels::cmp::distinct;

use crate::dedupe::encode;
use crate::{CoreError, Result};

/// What one run does to silver, per deduplicated change.
#[derive(Debug, Clone)]
pub struct ApplyPlan {
    /// Rows to write (insert or update).
    pub write: BooleanArray,
    /// Rows whose data is new or differs from silver: inserted or updated.
    pub changed: BooleanArray,
    /// Counts for the report.
    pub counts: ApplyCounts,
}

/// Counts of an apply plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyCounts {
    /// Keys not in silver: inserted.
    pub inserted: usize,
    /// Keys in silver with a newer sequence and different data: updated.
    pub updated: usize,
    /// Keys in silver with a newer sequence and identical data: only the sequence and
    /// ingest time are refreshed; `_update_timestamp` is kept.
    pub unchanged: usize,
    /// Changes whose sequence is not newer than silver's: skipped by the guard.
    pub stale: usize,
}

/// Inputs of [`plan_scd1`], all of the same length (one row per deduplicated change).
pub struct Scd1Input<'a> {
    /// True where silver already holds the key.
    pub matched: &'a BooleanArray,
    /// The change's sequence columns.
    pub new_sequence: &'a [ArrayRef],
    /// Silver's stored sequence columns for the key (any value where unmatched).
    pub stored_sequence: &'a [ArrayRef],
    /// The change's data columns (silver columns except keys and audit columns).
    pub new_data: &'a [ArrayRef],
    /// Silver's stored data columns, same order and types.
    pub stored_data: &'a [ArrayRef],
}

/// Plans an SCD type 1 apply: insert new keys; update matched keys whose sequence is
/// strictly greater than the stored one; skip the rest as stale.
pub fn plan_scd1(input: &Scd1Input<'_>) -> Result<ApplyPlan> {
    let n = input.matched.len();
    if input.new_sequence.len() != input.stored_sequence.len()
        || input.new_data.len() != input.stored_data.len()
    {
        return Err(CoreError::Internal(
            "apply plan inputs differ in width".into(),
        ));
    }
    for (a, b) in input
        .new_sequence
        .iter()
        .zip(input.stored_sequence)
        .chain(input.new_data.iter().zip(input.stored_data))
    {
        if a.len() != n || b.len() != n || a.data_type() != b.data_type() {
            return Err(CoreError::Internal(format!(
                "apply plan column mismatch: {} vs {}",
                a.data_type(),
                b.data_type()
            )));
        }
    }
    let matched = strip_nulls(input.matched);
    let newer = newer_than(input.new_sequence, input.stored_sequence, n)?;

    let mut differs = BooleanArray::from(vec![false; n]);
    // Data is only compared where silver has the key (nothing to compare for inserts).
    if matched.true_count() > 0 {
        for (a, b) in input.new_data.iter().zip(input.stored_data) {
            differs = or(&differs, &distinct(a, b)?)?;
        }
    }

    let inserts = not(&matched)?;
    let matched_newer = and(&matched, &newer)?;
    let updates = and(&matched_newer, &differs)?;
    let unchanged = and_not(&matched_newer, &differs)?;
    let write = or(&inserts, &matched_newer)?;
    let changed = or(&inserts, &updates)?;

    let count = |b: &BooleanArray| b.true_count();
    let counts = ApplyCounts {
        inserted: count(&inserts),
        updated: count(&updates),
        unchanged: count(&unchanged),
        stale: n - count(&write),
    };
    Ok(ApplyPlan {
        write,
        changed,
        counts,
    })
}

fn strip_nulls(b: &BooleanArray) -> BooleanArray {
    if b.null_count() == 0 {
        return b.clone();
    }
    BooleanArray::from_iter(b.iter().map(|v| Some(v.unwrap_or(false))))
}

/// Row-wise "new sequence > stored sequence", lexicographic over the columns; a NULL
/// is older than any value. With no sequence columns every change is newer.
pub fn newer_than(new: &[ArrayRef], stored: &[ArrayRef], n: usize) -> Result<BooleanArray> {
    let (Some(new_rows), Some(stored_rows)) = (encode(new)?, encode(stored)?) else {
        return Ok(BooleanArray::from(vec![true; n]));
    };
    Ok(BooleanArray::from_iter(
        (0..n).map(|i| Some(new_rows.row(i) > stored_rows.row(i))),
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};

    use super::*;

    #[test]
    fn classifies_insert_update_unchanged_stale() {
        let matched = BooleanArray::from(vec![false, true, true, true, true]);
        let new_seq: ArrayRef = Arc::new(Int64Array::from(vec![1, 5, 5, 3, 4]));
        let old_seq: ArrayRef = Arc::new(Int64Array::from(vec![
            None,
            Some(4),
            Some(4),
            Some(3),
            None,
        ]));
        let new_val: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            Some("b"),
            Some("c"),
            Some("d"),
            None,
        ]));
        let old_val: ArrayRef = Arc::new(StringArray::from(vec![
            None,
            Some("x"),
            Some("c"),
            Some("z"),
            None,
        ]));
        let plan = plan_scd1(&Scd1Input {
            matched: &matched,
            new_sequence: &[new_seq],
            stored_sequence: &[old_seq],
            new_data: &[new_val],
            stored_data: &[old_val],
        })
        .unwrap();
        assert_eq!(
            plan.counts,
            ApplyCounts {
                inserted: 1,
                updated: 1,
                unchanged: 2,
                stale: 1
            }
        );
        assert_eq!(
            plan.write,
            BooleanArray::from(vec![true, true, true, false, true])
        );
        assert_eq!(
            plan.changed,
            BooleanArray::from(vec![true, true, false, false, false])
        );
    }
}
