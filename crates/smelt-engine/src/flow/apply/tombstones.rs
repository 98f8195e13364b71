//! The tombstone table of a silver table: the keys deleted so far and the sequence of their
//! delete, which the guard reads so that an older change cannot bring a key back. Its name
//! ([`tombstone_table`]), schema, the check against silver's types, and expiry.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::datatypes::{Field, Schema, SchemaRef};
use smelt_core::change::timestamp_utc;
use smelt_spec::ApplyFlow;
use smelt_spec::COMMIT_TIMESTAMP as SEQ_COMMIT_TIMESTAMP;

use super::schema::same_type;
use crate::context::RunContext;
use crate::phases::Phases;
use crate::ports::LakeTable;
use crate::report::FlowReport;
use crate::schema::{is_widening, type_name};
use crate::{EngineError, Result};

/// The tombstone table of a silver table: `<schema>.<table>__tombstones`.
pub fn tombstone_table(silver: &smelt_spec::TableName) -> smelt_spec::TableName {
    silver.sibling(format!("{}__tombstones", silver.table))
}

/// The column of a tombstone that says when the key was deleted (the run's time).
pub use smelt_rules::tables::DELETED_AT;

/// The tombstone table's columns: the keys, the sequence columns as silver stores them,
/// and [`DELETED_AT`].
pub(super) fn tombstone_schema(
    schema: &SchemaRef,
    flow: &ApplyFlow,
    audit_ingest: Option<&str>,
) -> Result<SchemaRef> {
    let mut fields = Vec::new();
    for name in flow.keys.iter().chain(
        stored_sequence_names(flow, audit_ingest)
            .iter()
            .filter(|s| !flow.keys.contains(s)),
    ) {
        fields.push(schema.field_with_name(name)?.clone());
    }
    fields.push(Field::new(DELETED_AT, timestamp_utc(), false));
    Ok(Arc::new(Schema::new(fields)))
}

/// The silver columns that store the sequence (`_commit_timestamp` is stored as the
/// ingest audit column).
pub(super) fn stored_sequence_names(flow: &ApplyFlow, audit_ingest: Option<&str>) -> Vec<String> {
    flow.sequence_by
        .iter()
        .map(|s| {
            if s == SEQ_COMMIT_TIMESTAMP {
                audit_ingest.expect("validated").to_string()
            } else {
                s.clone()
            }
        })
        .collect()
}

/// Checks the stored tombstone table against `tomb_schema`. Tombstones follow silver's key
/// and sequence types: after `widen_types` they are widened too (checked every run, so a
/// crash between the two widenings heals). True when they are to be widened.
pub(super) fn check_tombstones(
    tomb_schema: &SchemaRef,
    tombstones: &dyn LakeTable,
) -> Result<bool> {
    let mut widen_tombstones = false;
    if let Some(existing) = tombstones.schema() {
        for f in tomb_schema.fields() {
            if let Ok(e) = existing.field_with_name(f.name())
                && !same_type(e.data_type(), f.data_type())
            {
                if is_widening(e.data_type(), f.data_type()) {
                    widen_tombstones = true;
                } else {
                    return Err(EngineError::user(
                        format!(
                            "column `{}` of tombstone table `{}` is {}, but silver's is {}",
                            f.name(),
                            tombstones.table(),
                            type_name(e.data_type()),
                            type_name(f.data_type())
                        ),
                        "drop the tombstone table and rebuild silver with `smelt run --full-refresh`",
                    ));
                }
            }
            if existing.field_with_name(f.name()).is_err() {
                return Err(EngineError::user(
                    format!(
                        "tombstone table `{}` has no column `{}`: it was written for other keys or sequence columns",
                        tombstones.table(),
                        f.name()
                    ),
                    "if the keys or `sequence_by` changed on purpose, drop the tombstone table and rebuild silver with `smelt run --full-refresh`",
                ));
            }
        }
    }
    Ok(widen_tombstones)
}

/// Removes the tombstones older than `tombstone_retention` (after the run's commits).
pub(super) async fn expire_tombstones(
    flow: &ApplyFlow,
    ctx: &RunContext,
    tombstones: &mut dyn LakeTable,
    report: &mut FlowReport,
    phases: &mut Phases,
) -> Result<()> {
    if let Some(retention) = flow.tombstone_retention
        && tombstones.version().is_some()
    {
        let started = Instant::now();
        let before = ctx.run_timestamp_us - retention.as_micros().min(i64::MAX as u128) as i64;
        report.tombstones_expired = tombstones.expire(DELETED_AT, before).await?;
        phases.add("expire tombstones", started.elapsed().as_millis() as u64);
    }
    Ok(())
}

/// Per change row: a delete whose key's tombstone (`tomb_matched`, row-aligned) has the
/// same sequence — the tombstone that delete wrote.
pub(super) fn own_tombstones(
    delete: &BooleanArray,
    tomb_matched: &BooleanArray,
    new_seq: &[ArrayRef],
    tomb_seq: &[ArrayRef],
) -> Result<BooleanArray> {
    let mut own = arrow::compute::kernels::boolean::and(delete, tomb_matched)?;
    for (new, stored) in new_seq.iter().zip(tomb_seq) {
        let stored = arrow::compute::cast(stored, new.data_type())?;
        let same = arrow::compute::kernels::cmp::not_distinct(new, &stored)?;
        own = arrow::compute::kernels::boolean::and(&own, &same)?;
    }
    // NULL counts as false (`prep_null_mask_filter` wants a mask with nulls).
    Ok(if own.null_count() > 0 {
        arrow::compute::prep_null_mask_filter(&own)
    } else {
        own
    })
}

/// Per stored tombstone (key group `tomb_key`, sequence `tomb_seq`): true unless a delete
/// change of the same key group and sequence wrote it (SCD2, where a key has several).
pub(super) fn not_own_tombstones(
    tomb_key: &[u32],
    tomb_seq: &ArrayRef,
    change_key: &[u32],
    change_seq: &ArrayRef,
    delete: &BooleanArray,
) -> Result<BooleanArray> {
    use arrow::row::{RowConverter, SortField};
    let converter = RowConverter::new(vec![SortField::new(change_seq.data_type().clone())])?;
    let changes = converter.convert_columns(&[Arc::clone(change_seq)])?;
    let stored =
        converter.convert_columns(&[arrow::compute::cast(tomb_seq, change_seq.data_type())?])?;
    // Only a run that follows a crash gets here, with this partition's deletes.
    let deletes: std::collections::HashSet<(u32, &[u8])> = (0..change_key.len())
        .filter(|&i| delete.is_valid(i) && delete.value(i))
        .map(|i| (change_key[i], changes.row(i).data()))
        .collect();
    Ok((0..tomb_key.len())
        .map(|i| Some(!deletes.contains(&(tomb_key[i], stored.row(i).data()))))
        .collect())
}

/// The deletes of bronze versions up to `through` (the tombstones' watermark): those a
/// crashed attempt may have written tombstones for.
pub(super) fn replayed_deletes(
    delete: &BooleanArray,
    commit_version: &ArrayRef,
    through: i64,
) -> Result<BooleanArray> {
    let version = arrow::compute::cast(commit_version, &arrow::datatypes::DataType::Int64)?;
    let within = arrow::compute::kernels::cmp::lt_eq(
        &version,
        &arrow::array::Int64Array::new_scalar(through),
    )?;
    let both = arrow::compute::kernels::boolean::and(delete, &within)?;
    Ok(if both.null_count() > 0 {
        arrow::compute::prep_null_mask_filter(&both)
    } else {
        both
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, BooleanArray, Int64Array};

    use super::*;

    fn ints(v: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(v.to_vec()))
    }

    #[test]
    fn only_deletes_up_to_the_tombstones_watermark_are_replayed() {
        let delete = BooleanArray::from(vec![Some(true), Some(true), Some(false), None]);
        let version = ints(&[Some(3), Some(4), Some(3), Some(3)]);
        let got = replayed_deletes(&delete, &version, 3).unwrap();
        assert_eq!(got, BooleanArray::from(vec![true, false, false, false]));
    }

    #[test]
    fn a_tombstone_is_a_deletes_own_only_at_its_sequence() {
        // Rows: a replayed delete at the tombstone's sequence; one at another sequence; a
        // key without a tombstone; a delete not replayed.
        let replayed = BooleanArray::from(vec![true, true, true, false]);
        let tomb = BooleanArray::from(vec![Some(true), Some(true), None, Some(true)]);
        let seq = ints(&[Some(5), Some(6), Some(5), Some(5)]);
        let tomb_seq = ints(&[Some(5), Some(5), None, Some(5)]);
        let own = own_tombstones(&replayed, &tomb, &[seq], &[tomb_seq]).unwrap();
        assert_eq!(own, BooleanArray::from(vec![true, false, false, false]));
    }

    #[test]
    fn scd2_keeps_every_tombstone_no_replayed_delete_wrote() {
        // Tombstones (key group, sequence): (0, 5) written by the delete of key 0 at 5;
        // (0, 2) older; (1, 5) of another key.
        let keep = not_own_tombstones(
            &[0, 0, 1],
            &ints(&[Some(5), Some(2), Some(5)]),
            &[0, 1],
            &ints(&[Some(5), Some(7)]),
            &BooleanArray::from(vec![true, true]),
        )
        .unwrap();
        assert_eq!(keep, BooleanArray::from(vec![false, true, true]));
    }
}
