//! SCD type 1 for one partition of cast changes ([`PartitionWork::plan`]): the latest change
//! per key, the guard against what silver and the tombstones store, `where`, and the rows,
//! removes and tombstones to write.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, RecordBatch, TimestampMicrosecondArray,
};
use arrow::compute::kernels::zip::zip;
use arrow::compute::{filter, filter_record_batch};
use arrow::datatypes::{Schema, SchemaRef};
use smelt_core::change::{COMMIT_TIMESTAMP, COMMIT_VERSION};
use smelt_core::scd1::{ApplyPlan, Scd1Input, merge_updates, plan_scd1};
use smelt_spec::{ApplyFlow, ChangeData, UpdateColumns, UpdateTimestampOn, WriteMode};

use super::cast::{IS_DELETE, column};
use super::lookup::lookup_aligned;
use super::tombstones::{DELETED_AT, own_tombstones, replayed_deletes, stored_sequence_names};
use super::truncate::drop_stale;
use crate::Result;
use crate::phases::Phases;
use crate::ports::LakeTable;
use crate::predicate::Predicate;
use crate::rejects::Rejects;
use crate::report::FlowReport;

/// Applies one partition of cast changes: latest per key, guard against silver and the
/// tombstones, the rows to write and delete.
pub(super) struct PartitionWork<'a> {
    pub(super) flow: &'a ApplyFlow,
    pub(super) schema: &'a SchemaRef,
    /// Silver columns without the update audit column: what `where` reads.
    pub(super) state_schema: &'a SchemaRef,
    pub(super) tomb_schema: &'a SchemaRef,
    pub(super) filter: Option<&'a Predicate>,
    pub(super) audit_ingest: Option<&'a str>,
    pub(super) audit_update: Option<&'a str>,
    pub(super) run_timestamp_us: i64,
    /// A rebuild or a truncate: what silver and the tombstones store is not looked at.
    pub(super) fresh: bool,
    /// The tombstones are ahead of silver, through this bronze version (a crash between
    /// their commits): a delete of a version up to it, equal to its key's tombstone (same
    /// sequence), wrote that tombstone in the crashed attempt.
    pub(super) replayed_tombstones: Option<i64>,
    /// Changes with a sequence up to this one (a truncate's) are stale.
    pub(super) stale_through: Option<&'a [ArrayRef]>,
    /// The sequence columns of the cast batch.
    pub(super) cast_sequence: &'a [String],
    /// The guard reads stored data columns (see [`reads_stored_data`]).
    pub(super) stored_data: bool,
}

/// Whether the SCD1 guard reads the data columns of stored rows: to count and stamp
/// unchanged rows apart, to keep stored values (`column_list`, `ignore_null_updates`).
/// With derived change data (`change_data: derived`) it reads only keys, sequences and
/// the update stamp, unless an option needs the stored values.
pub(super) fn reads_stored_data(flow: &ApplyFlow, audit_update: Option<&str>) -> bool {
    flow.write_mode != WriteMode::MergeOnRead
        || flow.change_data != ChangeData::Derived
        || flow.ignore_null_updates
        || flow.update_columns != UpdateColumns::All
        || (audit_update.is_some() && flow.audit.update_timestamp_on == UpdateTimestampOn::Change)
}

/// What one partition writes.
pub(super) struct Planned {
    /// Rows to write (silver schema).
    pub(super) rows: RecordBatch,
    /// Per row: it replaces a stored row.
    pub(super) replaces: BooleanArray,
    /// Keys of stored rows to delete.
    pub(super) removes: RecordBatch,
    /// Tombstones to write (tombstone schema).
    pub(super) tombstones: RecordBatch,
    /// Per tombstone: it replaces a stored tombstone.
    pub(super) tombstone_replaces: BooleanArray,
    /// Keys whose stored tombstones are deleted (SCD2 stages a key's tombstones whole).
    pub(super) tombstone_removes: RecordBatch,
}

impl PartitionWork<'_> {
    /// `where` over the keys' latest state (`value_of` gives each state column): `None`
    /// without one, else `delete` with the failing keys added, and the failing keys that
    /// were not deletes already (counted as filtered).
    pub(super) fn filter_out(
        &self,
        value_of: impl Fn(&str) -> Result<ArrayRef>,
        delete: &BooleanArray,
    ) -> Result<Option<(BooleanArray, BooleanArray)>> {
        let Some(predicate) = self.filter else {
            return Ok(None);
        };
        let state = RecordBatch::try_new(
            Arc::clone(self.state_schema),
            self.state_schema
                .fields()
                .iter()
                .map(|f| value_of(f.name()))
                .collect::<Result<_>>()?,
        )?;
        let fails = arrow::compute::not(&predicate.evaluate(&state)?)?;
        Ok(Some((
            arrow::compute::or(delete, &fails)?,
            arrow::compute::and_not(&fails, delete)?,
        )))
    }

    /// The SCD1 plan of `batch`: the rows to write and delete, and the tombstones to write.
    pub(super) async fn plan(
        &self,
        batch: RecordBatch,
        silver: &dyn LakeTable,
        tombstones: &dyn LakeTable,
        rejects: &mut Rejects,
        report: &mut FlowReport,
        phases: &mut Phases,
    ) -> Result<Planned> {
        let started = Instant::now();
        let flow = self.flow;
        let schema = self.schema;
        let batch = drop_stale(batch, self.stale_through, self.cast_sequence, report)?;
        let batch = self.latest(batch, rejects, report)?;
        let m = batch.num_rows();
        let col = |name: &str| column(&batch, name);
        let new_commit_ts = col(COMMIT_TIMESTAMP)?;
        let new_seq: Vec<ArrayRef> = self
            .cast_sequence
            .iter()
            .map(|s| col(s))
            .collect::<Result<_>>()?;
        let mut delete = col(IS_DELETE)?.as_boolean().clone();
        phases.add("dedupe", started.elapsed().as_millis() as u64);

        // Guard: what silver and the tombstones store for these keys.
        let started = Instant::now();
        let stored_seq_names = stored_sequence_names(flow, self.audit_ingest);
        let is_audit = |n: &str| Some(n) == self.audit_ingest || Some(n) == self.audit_update;
        let data_names: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .filter(|n| !is_audit(n) && !flow.keys.contains(n))
            .collect();
        let new_keys: Vec<ArrayRef> = flow.keys.iter().map(|k| col(k)).collect::<Result<_>>()?;
        let read_data: &[String] = if self.stored_data { &data_names } else { &[] };
        let wanted = self.guard_columns(&stored_seq_names, read_data);
        let Guarded {
            matched,
            stored,
            tomb_matched,
            tomb_stored,
        } = self.guard(silver, tombstones, &new_keys, &wanted).await?;
        let tomb_seq: Vec<ArrayRef> = stored_seq_names
            .iter()
            .map(|c| Arc::clone(&tomb_stored[c]))
            .collect();
        let stored_seq: Vec<ArrayRef> = stored_seq_names
            .iter()
            .map(|c| Arc::clone(&stored[c]))
            .collect();
        let raw_data: Vec<ArrayRef> = data_names.iter().map(|c| col(c)).collect::<Result<_>>()?;
        let stored_data: Option<Vec<ArrayRef>> = self
            .stored_data
            .then(|| data_names.iter().map(|c| Arc::clone(&stored[c])).collect());
        let new_data = match &stored_data {
            Some(stored_data) => {
                let updates: Vec<bool> = data_names
                    .iter()
                    .map(|c| flow.update_columns.updates(c))
                    .collect();
                merge_updates(
                    &matched,
                    &raw_data,
                    stored_data,
                    &updates,
                    flow.ignore_null_updates,
                )?
            }
            // Every column updated, NULLs included: the change's values.
            None => raw_data,
        };
        let value_of = |name: &str| -> Result<ArrayRef> {
            if Some(name) == self.audit_ingest {
                Ok(Arc::clone(&new_commit_ts))
            } else if let Some(i) = data_names.iter().position(|d| d == name) {
                Ok(Arc::clone(&new_data[i]))
            } else {
                col(name)
            }
        };

        // `where`: a key whose latest state fails it is not kept (deleted, with a tombstone).
        let mut filtered: Option<BooleanArray> = None;
        if let Some((deleted, failing)) = self.filter_out(value_of, &delete)? {
            (delete, filtered) = (deleted, Some(failing));
        }

        // Tombstones the crashed attempt of this range wrote do not guard against the
        // deletes that wrote them: those are applied (and counted) again.
        let tomb_guards =
            self.tombstone_guards(&batch, &delete, &tomb_matched, &new_seq, &tomb_seq)?;
        let plan = plan_scd1(&Scd1Input {
            matched: &matched,
            new_sequence: &new_seq,
            stored_sequence: &stored_seq,
            new_data: &new_data,
            stored_data: stored_data.as_deref(),
            delete: Some(&delete),
            tombstone: Some((&tomb_guards, &tomb_seq)),
        })?;
        count(&plan, filtered, report)?;

        // The rows to write, in silver column order.
        let run_ts: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![self.run_timestamp_us; m]).with_timezone("UTC"),
        );
        let columns = self.silver_columns(&plan, &value_of, &stored, &run_ts)?;
        let removes = filter_record_batch(&self.key_batch(&new_keys)?, &plan.remove)?;
        let (tombstones, tombstone_replaces) = if plan.tombstone.true_count() == 0 {
            (
                RecordBatch::new_empty(Arc::clone(self.tomb_schema)),
                BooleanArray::from(Vec::<bool>::new()),
            )
        } else {
            let all = self.tombstone_columns(&batch, &stored_seq_names, &new_seq, &run_ts)?;
            (
                filter_record_batch(&all, &plan.tombstone)?,
                filter(&tomb_matched, &plan.tombstone)?.as_boolean().clone(),
            )
        };
        // Free what only the plan needed before the filtered copy below, which frees
        // each column of the rows as it is copied.
        drop((stored, stored_seq, stored_data, new_data, new_seq, batch));
        drop((new_keys, new_commit_ts));
        let rows = RecordBatch::try_new(Arc::clone(schema), columns)?;
        let (rows, replaces) = if plan.write.true_count() == rows.num_rows() {
            (rows, matched)
        } else {
            (
                smelt_core::columns::filter_owned(rows, &plan.write)?,
                filter(&matched, &plan.write)?.as_boolean().clone(),
            )
        };
        phases.add("guard", started.elapsed().as_millis() as u64);
        Ok(Planned {
            rows,
            replaces,
            removes,
            tombstones,
            tombstone_replaces,
            tombstone_removes: RecordBatch::new_empty(Arc::new(Schema::empty())),
        })
    }
}

impl PartitionWork<'_> {
    /// Which stored tombstones guard the changes of `batch` (`tomb_matched`: the key has
    /// one): not those a crashed attempt of this range wrote, whose deletes are applied
    /// (and counted) again.
    fn tombstone_guards(
        &self,
        batch: &RecordBatch,
        delete: &BooleanArray,
        tomb_matched: &BooleanArray,
        new_seq: &[ArrayRef],
        tomb_seq: &[ArrayRef],
    ) -> Result<BooleanArray> {
        let Some(through) = self.replayed_tombstones else {
            return Ok(tomb_matched.clone());
        };
        let replayed = replayed_deletes(delete, &column(batch, COMMIT_VERSION)?, through)?;
        let own = own_tombstones(&replayed, tomb_matched, new_seq, tomb_seq)?;
        Ok(arrow::compute::kernels::boolean::and_not(
            tomb_matched,
            &own,
        )?)
    }

    /// The rows to write, column by column in silver's order: each change's state
    /// (`value_of`), the update stamp `run_ts` where `plan` says it is due (`stored`: the
    /// stored stamps kept elsewhere).
    fn silver_columns(
        &self,
        plan: &ApplyPlan,
        value_of: &dyn Fn(&str) -> Result<ArrayRef>,
        stored: &HashMap<String, ArrayRef>,
        run_ts: &ArrayRef,
    ) -> Result<Vec<ArrayRef>> {
        let m = run_ts.len();
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for f in self.schema.fields() {
            let array: ArrayRef = if Some(f.name().as_str()) == self.audit_update {
                // Every row written is stamped (`update_timestamp_on: apply`), or those
                // whose data is new (`change`); the others keep the stored stamp.
                let stamped = match self.flow.audit.update_timestamp_on {
                    UpdateTimestampOn::Apply => &plan.write,
                    UpdateTimestampOn::Change => &plan.changed,
                };
                if stamped.true_count() == m {
                    Arc::clone(run_ts)
                } else {
                    zip(stamped, run_ts, &stored[f.name()])?
                }
            } else {
                value_of(f.name())?
            };
            columns.push(if array.data_type() == f.data_type() {
                array
            } else {
                arrow::compute::cast(&array, f.data_type())?
            });
        }
        Ok(columns)
    }
}

/// What the guard looks up for a partition's keys: the stored rows of silver and of the
/// tombstones, lined up with the keys (`matched`: the key is stored).
struct Guarded {
    matched: BooleanArray,
    stored: HashMap<String, ArrayRef>,
    tomb_matched: BooleanArray,
    tomb_stored: HashMap<String, ArrayRef>,
}

impl PartitionWork<'_> {
    /// The silver columns the guard reads: keys, stored sequences, data, the update stamp.
    fn guard_columns(&self, stored_seq_names: &[String], data_names: &[String]) -> Vec<String> {
        let mut wanted: Vec<String> = self.flow.keys.clone();
        let update = self.audit_update.map(str::to_string);
        for c in stored_seq_names
            .iter()
            .chain(data_names)
            .chain(update.iter())
        {
            if !wanted.contains(c) {
                wanted.push(c.clone());
            }
        }
        wanted
    }

    /// The stored rows of `new_keys` in silver (columns `wanted`) and in the tombstones;
    /// none on a rebuild or a truncate.
    async fn guard(
        &self,
        silver: &dyn LakeTable,
        tombstones: &dyn LakeTable,
        new_keys: &[ArrayRef],
        wanted: &[String],
    ) -> Result<Guarded> {
        let keys = &self.flow.keys;
        let (silver, tombstones) = if self.fresh {
            (None, None)
        } else {
            (Some(silver), Some(tombstones))
        };
        let (matched, stored) = lookup_aligned(silver, self.schema, keys, new_keys, wanted).await?;
        let tomb_wanted: Vec<String> = (self.tomb_schema.fields().iter())
            .map(|f| f.name().clone())
            .filter(|n| n != DELETED_AT)
            .collect();
        let (tomb_matched, tomb_stored) =
            lookup_aligned(tombstones, self.tomb_schema, keys, new_keys, &tomb_wanted).await?;
        Ok(Guarded {
            matched,
            stored,
            tomb_matched,
            tomb_stored,
        })
    }

    /// A tombstone for every change of `batch` (the delete's sequence `new_seq`, stamped
    /// `run_ts`), in the tombstone table's columns.
    fn tombstone_columns(
        &self,
        batch: &RecordBatch,
        stored_seq_names: &[String],
        new_seq: &[ArrayRef],
        run_ts: &ArrayRef,
    ) -> Result<RecordBatch> {
        let mut columns = Vec::new();
        for f in self.tomb_schema.fields() {
            let array = if f.name() == DELETED_AT {
                Arc::clone(run_ts)
            } else if let Some(i) = stored_seq_names.iter().position(|s| s == f.name()) {
                Arc::clone(&new_seq[i])
            } else {
                column(batch, f.name())?
            };
            columns.push(if array.data_type() == f.data_type() {
                array
            } else {
                arrow::compute::cast(&array, f.data_type())?
            });
        }
        Ok(RecordBatch::try_new(Arc::clone(self.tomb_schema), columns)?)
    }
}

/// Counts what `plan` does into `report`; `filtered`: the changes whose state fails
/// `where` — counted when they get past the guard (a stale one is counted as stale only).
fn count(plan: &ApplyPlan, filtered: Option<BooleanArray>, report: &mut FlowReport) -> Result<()> {
    report.inserted += plan.counts.inserted;
    report.updated += plan.counts.updated;
    report.unchanged += plan.counts.unchanged;
    report.deleted += plan.counts.deleted;
    report.stale += plan.counts.stale;
    report.tombstones_written += plan.tombstone.true_count();
    if let Some(filtered) = filtered {
        let acted = arrow::compute::or(&plan.remove, &plan.tombstone)?;
        report.filtered += arrow::compute::and(&filtered, &acted)?.true_count();
    }
    Ok(())
}
