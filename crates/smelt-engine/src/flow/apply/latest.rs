//! The latest change per key of a partition: duplicates collapsed, changes of one key that
//! share the greatest sequence but differ (`on_sequence_conflict`), NULL keys rejected.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::{filter, take};
use arrow::datatypes::Schema;
use arrow::util::display::array_value_to_string;
use smelt_core::change::{COMMIT_TIMESTAMP, COMMIT_VERSION};
use smelt_core::dedupe::{Latest, latest_per_key_with_ties, sequence_conflicts};
use smelt_spec::OnSequenceConflict;

use super::cast::{FEED_DELETE, IS_DELETE, column};
use super::scd1::PartitionWork;
use crate::rejects::{Reason, Rejects};
use crate::report::FlowReport;
use crate::{EngineError, Result};

impl PartitionWork<'_> {
    /// The latest change of each key of `batch`, in input order: duplicates collapsed
    /// (counted), keys whose latest changes share the greatest sequence but differ in data
    /// handled as `on_sequence_conflict` says, keys with NULL in a NOT NULL key column
    /// rejected (counted).
    pub(super) fn latest(
        &self,
        batch: RecordBatch,
        rejects: &mut Rejects,
        report: &mut FlowReport,
    ) -> Result<RecordBatch> {
        let flow = self.flow;
        let schema = self.schema;
        let n = batch.num_rows();
        let winners = {
            // The key and sequence arrays share the batch's buffers: scoped, so the batch can
            // be dropped as soon as the winners are taken.
            let col = |name: &str| column(&batch, name);
            let key_arrays: Vec<ArrayRef> =
                flow.keys.iter().map(|k| col(k)).collect::<Result<_>>()?;
            let seq_arrays: Vec<ArrayRef> = self
                .cast_sequence
                .iter()
                .map(|s| col(s))
                .collect::<Result<_>>()?;
            let mut latest = if n == 0 {
                Latest {
                    winners: UInt32Array::from(Vec::<u32>::new()),
                    ties: Vec::new(),
                }
            } else {
                latest_per_key_with_ties(&key_arrays, &seq_arrays)?
            };
            let mut winners = latest.winners.clone();
            report.duplicates_collapsed += n - winners.len();

            // Equal-sequence conflicts: the latest changes of a key tie on the sequence but
            // differ in data (or one deletes).
            let is_sequence = |name: &str| {
                flow.keys.iter().any(|k| k == name)
                    || flow.sequence_by.iter().any(|s| s == name)
                    || name == COMMIT_TIMESTAMP
                    || name == COMMIT_VERSION
            };
            // A delete's other columns do not matter: two deletes never conflict.
            let is_delete = col(IS_DELETE)?;
            let is_delete = is_delete.as_boolean();
            let data: Vec<ArrayRef> = batch
                .schema()
                .fields()
                .iter()
                .zip(batch.columns())
                .filter(|(f, _)| !is_sequence(f.name()))
                .map(|(f, c)| {
                    if f.name() == IS_DELETE || is_delete.true_count() == 0 {
                        Ok(Arc::clone(c))
                    } else {
                        Ok(arrow::compute::nullif(c, is_delete)?)
                    }
                })
                .collect::<Result<_>>()?;
            replaced_in_commit(
                &mut latest,
                &col(FEED_DELETE)?,
                is_delete,
                &col(COMMIT_VERSION)?,
            );
            let conflicts = sequence_conflicts(&data, &latest)?;
            let conflicted = conflicts.conflicted.true_count();
            report.sequence_conflicts += conflicted;
            if conflicted > 0 {
                let first = conflicts.rows.value(0) as usize;
                let describe = |names: &[String], arrays: &[ArrayRef]| -> Result<String> {
                    Ok(names
                        .iter()
                        .zip(arrays)
                        .map(|(n, a)| Ok(format!("{n}={}", array_value_to_string(a, first)?)))
                        .collect::<Result<Vec<_>>>()?
                        .join(", "))
                };
                match flow.on_sequence_conflict {
                    OnSequenceConflict::Last => {}
                    OnSequenceConflict::Quarantine => {
                        rejects.add(
                            &batch,
                            &conflicts.rows,
                            &Reason {
                                rule: smelt_rules::tables::RULE_SEQUENCE_CONFLICT,
                                column: None,
                                target_type: None,
                                reason: smelt_rules::tables::SEQUENCE_CONFLICT_REASON,
                            },
                        )?;
                        winners = filter(&winners, &arrow::compute::not(&conflicts.conflicted)?)?
                            .as_primitive::<arrow::datatypes::UInt32Type>()
                            .clone();
                    }
                    OnSequenceConflict::Fail => {
                        return Err(EngineError::rule(smelt_rules::messages::sequence_conflict(
                            &describe(&flow.keys, &key_arrays)?,
                            &describe(&flow.sequence_by, &seq_arrays)?,
                            conflicted,
                            true,
                        )));
                    }
                }
            }

            // NULL in a NOT NULL key column cannot be stored: reject (counted), never
            // half-write.
            let valid = storable(&flow.keys, &key_arrays, schema)?;
            let keep = take(&valid, &winners, None)?;
            let keep = keep.as_boolean();
            report.rejected += winners.len() - keep.true_count();
            filter(&winners, keep)?
                .as_primitive::<arrow::datatypes::UInt32Type>()
                .clone()
        };
        // Taking every row in order is the identity (a first load without duplicates): no copy.
        let batch = if winners.len() == n {
            batch
        } else {
            let all = batch;
            smelt_core::columns::take(&all, &winners)?
        };
        Ok(batch)
    }
}

/// Which rows can be stored by their keys (`key_arrays`, the columns `keys`): those with no
/// NULL in a key column `schema` declares NOT NULL. SCD1 and SCD2 reject the others.
pub(super) fn storable(
    keys: &[String],
    key_arrays: &[ArrayRef],
    schema: &Schema,
) -> Result<BooleanArray> {
    let rows = key_arrays.first().map_or(0, |a| a.len());
    let mut keep = BooleanArray::from(vec![true; rows]);
    for (k, array) in keys.iter().zip(key_arrays) {
        if !schema.field_with_name(k)?.is_nullable() {
            keep = arrow::compute::and(&keep, &arrow::compute::is_not_null(array)?)?;
        }
    }
    Ok(keep)
}

/// Drops from `latest`'s ties each change-feed delete (`feed_delete`) that an upsert of the
/// same key, sequence and commit follows in bronze order: the key's row deleted and added
/// again in one commit (rows marked in deletion vectors and new rows, a change feed its
/// reader derives, as `change_data: derived` writes it) is replaced, the added row being the
/// state the commit left. Such a delete is no conflict.
fn replaced_in_commit(
    latest: &mut Latest,
    feed_delete: &ArrayRef,
    is_delete: &BooleanArray,
    version: &ArrayRef,
) {
    let feed_delete = feed_delete.as_boolean();
    if feed_delete.true_count() == 0 || latest.ties.is_empty() {
        return;
    }
    let version = version.as_primitive::<arrow::datatypes::Int64Type>();
    // Per tie group (its winner) and commit, the last upsert in bronze order.
    let mut last_upsert: std::collections::HashMap<(u32, i64), u32> =
        std::collections::HashMap::new();
    for &(row, winner) in &latest.ties {
        for r in [row, winner] {
            if !is_delete.value(r as usize) {
                let last = last_upsert
                    .entry((winner, version.value(r as usize)))
                    .or_insert(r);
                *last = (*last).max(r);
            }
        }
    }
    latest.ties.retain(|&(row, winner)| {
        let replaced = feed_delete.value(row as usize)
            && last_upsert
                .get(&(winner, version.value(row as usize)))
                .is_some_and(|&upsert| upsert > row);
        !replaced
    });
}
