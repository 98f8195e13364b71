//! SCD type 2 for one partition of cast changes: the history of each key rebuilt by
//! [`smelt_core::scd2`], the stored versions of rewritten keys deleted, the new ones written.
//! Deletes that close no version are kept in the tombstone table (one row per delete), read
//! back as delete events by every later run.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, RecordBatch, TimestampMicrosecondArray,
};
use arrow::compute::{filter_record_batch, take};
use arrow::datatypes::{Field, Schema, SchemaRef};
use smelt_core::change::{COMMIT_TIMESTAMP, COMMIT_VERSION};
use smelt_core::dedupe::latest_per_key;
use smelt_spec::OnSequenceConflict;
use smelt_spec::{END_AT, START_AT};

use super::cast::{IS_DELETE, column};
use super::scd1::{PartitionWork, Planned};
use super::tombstones::{DELETED_AT, not_own_tombstones, replayed_deletes, stored_sequence_names};
use crate::phases::Phases;
use crate::ports::SilverTable;
use crate::report::FlowReport;
use crate::{EngineError, Result};

impl PartitionWork<'_> {
    /// SCD2: the rebuilt history of every key this partition changes
    /// ([`smelt_core::scd2`]); the stored versions of those keys are deleted and the
    /// rebuilt ones written.
    pub(super) async fn plan_scd2(
        &self,
        batch: RecordBatch,
        silver: &dyn SilverTable,
        tombstones: &dyn SilverTable,
        report: &mut FlowReport,
        phases: &mut Phases,
    ) -> Result<Planned> {
        use arrow::compute::interleave;
        use smelt_core::scd2::{From as DataFrom, Scd2Input, SeqFrom, plan_scd2};

        let started = Instant::now();
        let flow = self.flow;
        let schema = self.schema;
        let col_of = column;
        // NULL in a NOT NULL key column cannot be stored: reject (counted).
        let mut keep = BooleanArray::from(vec![true; batch.num_rows()]);
        for k in &flow.keys {
            if !schema.field_with_name(k)?.is_nullable() {
                keep =
                    arrow::compute::and(&keep, &arrow::compute::is_not_null(&col_of(&batch, k)?)?)?;
            }
        }
        report.rejected += keep.len() - keep.true_count();
        let batch = if keep.true_count() == keep.len() {
            batch
        } else {
            filter_record_batch(&batch, &keep)?
        };
        let empty = || Planned {
            rows: RecordBatch::new_empty(Arc::clone(schema)),
            replaces: BooleanArray::from(Vec::<bool>::new()),
            removes: RecordBatch::new_empty(Arc::new(Schema::empty())),
            tombstones: RecordBatch::new_empty(Arc::clone(self.tomb_schema)),
            tombstone_replaces: BooleanArray::from(Vec::<bool>::new()),
            tombstone_removes: RecordBatch::new_empty(Arc::new(Schema::empty())),
        };
        if batch.num_rows() == 0 {
            return Ok(empty());
        }
        let seq_type = schema.field_with_name(START_AT)?.data_type().clone();
        let seq_name = self.cast_sequence[0].as_str();
        let change_seq = arrow::compute::cast(&col_of(&batch, seq_name)?, &seq_type)?;
        let change_keys: Vec<ArrayRef> = flow
            .keys
            .iter()
            .map(|k| col_of(&batch, k))
            .collect::<Result<_>>()?;
        // Key groups: one per distinct key.
        let firsts = latest_per_key(&change_keys, &[])?;
        let unique: Vec<ArrayRef> = change_keys
            .iter()
            .map(|k| Ok(take(k.as_ref(), &firsts, None)?))
            .collect::<Result<_>>()?;
        let index = smelt_core::dedupe::KeyIndex::new(&unique)?;
        let change_key: Vec<u32> = index.positions(&change_keys)?.values().to_vec();

        // Every stored version of those keys.
        let found = self.stored_rows(silver, schema, &unique).await?;
        let stored_keys: Vec<ArrayRef> = flow
            .keys
            .iter()
            .zip(&change_keys)
            .map(|(k, c)| Ok(arrow::compute::cast(&col_of(&found, k)?, c.data_type())?))
            .collect::<Result<_>>()?;
        let stored_key: Vec<u32> = index.positions(&stored_keys)?.values().to_vec();

        // The stored tombstones of those keys: deletes the history does not show.
        let tomb_seq_name = stored_sequence_names(flow, self.audit_ingest)
            .into_iter()
            .next()
            .ok_or_else(|| EngineError::Internal("SCD2 without a sequence".into()))?;
        let tomb_found = self
            .stored_rows(tombstones, self.tomb_schema, &unique)
            .await?;
        let tomb_keys: Vec<ArrayRef> = flow
            .keys
            .iter()
            .zip(&change_keys)
            .map(|(k, c)| {
                Ok(arrow::compute::cast(
                    &col_of(&tomb_found, k)?,
                    c.data_type(),
                )?)
            })
            .collect::<Result<_>>()?;
        let tomb_key: Vec<u32> = index.positions(&tomb_keys)?.values().to_vec();
        let tomb_seq = arrow::compute::cast(&col_of(&tomb_found, &tomb_seq_name)?, &seq_type)?;

        let is_data = |n: &str| {
            !(Some(n) == self.audit_ingest
                || Some(n) == self.audit_update
                || n == START_AT
                || n == END_AT
                || flow.keys.iter().any(|k| k == n))
        };
        let data_names: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .filter(|n| is_data(n))
            .collect();

        // Deletes, and keys whose state fails `where` (their version is closed).
        let mut delete = col_of(&batch, IS_DELETE)?.as_boolean().clone();
        let value_of = |name: &str| {
            if Some(name) == self.audit_ingest {
                col_of(&batch, COMMIT_TIMESTAMP)
            } else {
                col_of(&batch, name)
            }
        };
        if let Some((deleted, failing)) = self.filter_out(value_of, &delete)? {
            report.filtered += failing.true_count();
            delete = deleted;
        }
        let tracked: Vec<usize> = data_names
            .iter()
            .enumerate()
            .filter(|(_, c)| flow.history.updates(c))
            .map(|(i, _)| i)
            .collect();
        let stored_data: Vec<ArrayRef> = data_names
            .iter()
            .map(|c| col_of(&found, c))
            .collect::<Result<_>>()?;
        let change_data: Vec<ArrayRef> = data_names
            .iter()
            .map(|c| col_of(&batch, c))
            .collect::<Result<_>>()?;
        let stored_start = col_of(&found, START_AT)?;
        let stored_end = col_of(&found, END_AT)?;
        // The sequence of the last change merged into each stored version in place.
        let stored_last = arrow::compute::cast(&col_of(&found, &tomb_seq_name)?, &seq_type)?;
        // Tombstones the crashed attempt of this range wrote do not hold the deletes that
        // wrote them: those are applied (and counted) again. Every stored tombstone of a
        // key still counts when its tombstones are staged again.
        let all_tomb_key = tomb_key.clone();
        let (tomb_found, tomb_key, tomb_seq) = if let Some(through) = self.replayed_tombstones
            && !tomb_key.is_empty()
        {
            let replayed = replayed_deletes(&delete, &col_of(&batch, COMMIT_VERSION)?, through)?;
            let keep =
                not_own_tombstones(&tomb_key, &tomb_seq, &change_key, &change_seq, &replayed)?;
            let kept: Vec<u32> = tomb_key
                .iter()
                .zip(keep.values().iter())
                .filter(|(_, k)| *k)
                .map(|(t, _)| *t)
                .collect();
            (
                filter_record_batch(&tomb_found, &keep)?,
                kept,
                arrow::compute::filter(&tomb_seq, &keep)?,
            )
        } else {
            (tomb_found, tomb_key, tomb_seq)
        };
        let plan = plan_scd2(&Scd2Input {
            keys: unique[0].len(),
            stored_key: &stored_key,
            stored_start: &stored_start,
            stored_end: &stored_end,
            stored_data: &stored_data,
            stored_last: &stored_last,
            change_key: &change_key,
            change_seq: &change_seq,
            change_delete: &delete,
            change_data: &change_data,
            tracked: &tracked,
            tomb_key: &tomb_key,
            tomb_seq: &tomb_seq,
        })?;
        report.inserted += plan.inserted;
        report.updated += plan.updated;
        report.stale += plan.stale;
        report.deleted += plan.deleted;
        report.sequence_conflicts += plan.sequence_conflicts;
        if plan.sequence_conflicts > 0 && flow.on_sequence_conflict == OnSequenceConflict::Fail {
            return Err(EngineError::user(
                format!(
                    "{} key(s) have two changes with one sequence and different data",
                    plan.sequence_conflicts
                ),
                "add a column to `sequence_by` that orders them, or set `on_sequence_conflict: last`",
            ));
        }
        if plan.versions.is_empty()
            && !plan.rewrite.iter().any(|&r| r)
            && plan.tombstones.is_empty()
        {
            return Ok(empty());
        }

        // The rebuilt versions, column by column.
        let data_at = |v: &smelt_core::scd2::Version| match v.data {
            DataFrom::Stored(i) => (0, i as usize),
            DataFrom::Change(i) => (1, i as usize),
        };
        let seq_at = |s: SeqFrom| match s {
            SeqFrom::StoredStart(i) => (0, i as usize),
            SeqFrom::StoredEnd(i) => (1, i as usize),
            SeqFrom::Change(i) => (2, i as usize),
            SeqFrom::Tombstone(i) => (3, i as usize),
            SeqFrom::StoredLast(i) => (4, i as usize),
        };
        let data_index: Vec<(usize, usize)> = plan.versions.iter().map(data_at).collect();
        let null_seq = arrow::array::new_null_array(&seq_type, 1);
        // Every sequence value a version bound or tombstone takes, by `seq_at`; NULL last.
        let seq_sources: [&dyn Array; 6] = [
            stored_start.as_ref(),
            stored_end.as_ref(),
            change_seq.as_ref(),
            tomb_seq.as_ref(),
            stored_last.as_ref(),
            null_seq.as_ref(),
        ];
        let m = plan.versions.len();
        let run_ts: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![self.run_timestamp_us; m]).with_timezone("UTC"),
        );
        let mut columns = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            let name = f.name().as_str();
            let array: ArrayRef = if name == START_AT {
                let idx: Vec<(usize, usize)> =
                    plan.versions.iter().map(|v| seq_at(v.start)).collect();
                interleave(&seq_sources[..5], &idx)?
            } else if name == END_AT {
                let idx: Vec<(usize, usize)> = plan
                    .versions
                    .iter()
                    .map(|v| v.end.map_or((5, 0), seq_at))
                    .collect();
                interleave(&seq_sources, &idx)?
            } else if Some(name) == self.audit_update {
                Arc::clone(&run_ts)
            } else {
                let change = if Some(name) == self.audit_ingest {
                    col_of(&batch, COMMIT_TIMESTAMP)?
                } else {
                    col_of(&batch, name)?
                };
                let change = arrow::compute::cast(&change, f.data_type())?;
                interleave(
                    &[col_of(&found, name)?.as_ref(), change.as_ref()],
                    &data_index,
                )?
            };
            columns.push(if array.data_type() == f.data_type() {
                array
            } else {
                arrow::compute::cast(&array, f.data_type())?
            });
        }
        let rows = RecordBatch::try_new(Arc::clone(schema), columns)?;
        // Stored versions of rewritten keys are removed.
        let mut had_stored = vec![false; plan.rewrite.len()];
        for &k in &stored_key {
            had_stored[k as usize] = true;
        }
        let remove = BooleanArray::from_iter(
            plan.rewrite
                .iter()
                .zip(&had_stored)
                .map(|(&r, &h)| Some(r && h)),
        );
        let key_schema = Arc::new(Schema::new(
            flow.keys
                .iter()
                .map(|k| Ok(schema.field_with_name(k)?.clone()))
                .collect::<Result<Vec<_>>>()?,
        ));
        let unique_typed: Vec<ArrayRef> = flow
            .keys
            .iter()
            .zip(&unique)
            .map(|(k, u)| {
                Ok(arrow::compute::cast(
                    u,
                    schema.field_with_name(k)?.data_type(),
                )?)
            })
            .collect::<Result<_>>()?;
        let keys_batch = RecordBatch::try_new(key_schema, unique_typed)?;
        let removes = filter_record_batch(&keys_batch, &remove)?;
        let replaces = BooleanArray::from(vec![false; rows.num_rows()]);

        // A key that gets new tombstones has all of its tombstones staged again (as stored,
        // `_deleted_at` kept, so retention runs from the first write) with the new ones, and
        // its stored ones removed: the tombstone table holds several rows per key.
        report.tombstones_written += plan.tombstones.len();
        let mut gets_new = vec![false; plan.rewrite.len()];
        for &(k, _) in &plan.tombstones {
            gets_new[k as usize] = true;
        }
        let carried: Vec<usize> = (0..tomb_key.len())
            .filter(|&i| gets_new[tomb_key[i] as usize])
            .collect();
        let key_rows = arrow::array::UInt32Array::from_iter_values(
            carried
                .iter()
                .map(|&i| tomb_key[i])
                .chain(plan.tombstones.iter().map(|t| t.0)),
        );
        let seq_index: Vec<(usize, usize)> = carried
            .iter()
            .map(|&i| (3, i))
            .chain(plan.tombstones.iter().map(|t| seq_at(t.1)))
            .collect();
        let at_index: Vec<(usize, usize)> = carried
            .iter()
            .map(|&i| (0, i))
            .chain(plan.tombstones.iter().map(|_| (1, 0)))
            .collect();
        let new_at: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![self.run_timestamp_us]).with_timezone("UTC"),
        );
        let mut tomb_columns = Vec::with_capacity(self.tomb_schema.fields().len());
        for f in self.tomb_schema.fields() {
            let name = f.name().as_str();
            let array = if name == DELETED_AT {
                let stored_at =
                    arrow::compute::cast(&col_of(&tomb_found, DELETED_AT)?, new_at.data_type())?;
                interleave(&[stored_at.as_ref(), new_at.as_ref()], &at_index)?
            } else if name == tomb_seq_name {
                interleave(&seq_sources[..5], &seq_index)?
            } else {
                take(col_of(&keys_batch, name)?.as_ref(), &key_rows, None)?
            };
            tomb_columns.push(arrow::compute::cast(&array, f.data_type())?);
        }
        let tombstones = RecordBatch::try_new(Arc::clone(self.tomb_schema), tomb_columns)?;
        let tombstone_replaces = BooleanArray::from(vec![false; tombstones.num_rows()]);
        let mut had_tomb = vec![false; plan.rewrite.len()];
        for &k in &all_tomb_key {
            had_tomb[k as usize] = true;
        }
        let tombstone_removes = filter_record_batch(
            &keys_batch,
            &BooleanArray::from_iter(gets_new.iter().zip(&had_tomb).map(|(&n, &h)| Some(n && h))),
        )?;
        phases.add("history", started.elapsed().as_millis() as u64);
        Ok(Planned {
            rows,
            replaces,
            removes,
            tombstones,
            tombstone_replaces,
            tombstone_removes,
        })
    }

    /// Every stored row of `table` (columns of `schema`, nullable) whose key is a row of
    /// `unique`; none when the table does not exist or the run is a rebuild.
    async fn stored_rows(
        &self,
        table: &dyn SilverTable,
        schema: &SchemaRef,
        unique: &[ArrayRef],
    ) -> Result<RecordBatch> {
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let nullable = Arc::new(Schema::new(fields));
        if table.version().is_none() || self.fresh {
            return Ok(RecordBatch::new_empty(nullable));
        }
        let key_schema = Arc::new(Schema::new(
            self.flow
                .keys
                .iter()
                .map(|k| Ok(nullable.field_with_name(k)?.clone()))
                .collect::<Result<Vec<_>>>()?,
        ));
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let found = table
            .lookup(RecordBatch::try_new(key_schema, unique.to_vec())?, &names)
            .await?;
        let columns = nullable
            .fields()
            .iter()
            .map(|f| {
                Ok(arrow::compute::cast(
                    &column(&found, f.name())?,
                    f.data_type(),
                )?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(nullable, columns)?)
    }
}
