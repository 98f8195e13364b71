//! SCD type 2 for one partition of cast changes: the history of each key rebuilt by
//! [`smelt_core::scd2`], the stored versions of rewritten keys deleted, the new ones written.
//! Deletes that close no version are kept in the tombstone table (one row per delete), read
//! back as delete events by every later run.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, RecordBatch, TimestampMicrosecondArray,
};
use arrow::compute::{filter_record_batch, interleave, take};
use arrow::datatypes::{Field, Schema, SchemaRef};
use smelt_core::change::{COMMIT_TIMESTAMP, COMMIT_VERSION};
use smelt_core::dedupe::latest_per_key;
use smelt_spec::OnSequenceConflict;
use smelt_spec::{END_AT, START_AT};

use smelt_core::scd2::{From as DataFrom, Scd2Input, SeqFrom, plan_scd2};

use super::cast::{IS_DELETE, column};
use super::latest::storable;
use super::scd1::{PartitionWork, Planned};
use super::tombstones::{DELETED_AT, not_own_tombstones, replayed_deletes, stored_sequence_names};
use crate::phases::Phases;
use crate::ports::LakeTable;
use crate::report::FlowReport;
use crate::{EngineError, Result};

/// One partition's changes, their keys, and what silver and the tombstones store of those
/// keys, lined up by key group.
struct Gathered {
    /// The changes (rows with a NULL in a NOT NULL key left out).
    batch: RecordBatch,
    /// One row per key group: the keys this partition changes.
    unique: Vec<ArrayRef>,
    /// Per change, its key group.
    change_key: Vec<u32>,
    /// The stored versions of those keys, and the key group of each.
    found: RecordBatch,
    stored_key: Vec<u32>,
    /// The stored tombstones of those keys, the key group of each (`all_tomb_key`: before
    /// a crashed attempt's own were left out), and their sequence column.
    tomb_found: RecordBatch,
    tomb_key: Vec<u32>,
    all_tomb_key: Vec<u32>,
    tomb_seq_name: String,
    /// Every sequence value a version bound or a tombstone takes, in silver's sequence
    /// type.
    seq: Sequences,
}

/// The sequence values a rebuilt history draws from, indexed as [`seq_at`] says.
struct Sequences {
    stored_start: ArrayRef,
    stored_end: ArrayRef,
    change: ArrayRef,
    tomb: ArrayRef,
    /// The sequence of the last change merged into each stored version in place.
    stored_last: ArrayRef,
    /// One NULL: an open version's end.
    null: ArrayRef,
}

impl Sequences {
    /// The sources by [`seq_at`]'s index; NULL last.
    fn sources(&self) -> [&dyn Array; 6] {
        [
            self.stored_start.as_ref(),
            self.stored_end.as_ref(),
            self.change.as_ref(),
            self.tomb.as_ref(),
            self.stored_last.as_ref(),
            self.null.as_ref(),
        ]
    }
}

/// Where a sequence value of the plan is, in [`Sequences::sources`].
fn seq_at(s: SeqFrom) -> (usize, usize) {
    match s {
        SeqFrom::StoredStart(i) => (0, i as usize),
        SeqFrom::StoredEnd(i) => (1, i as usize),
        SeqFrom::Change(i) => (2, i as usize),
        SeqFrom::Tombstone(i) => (3, i as usize),
        SeqFrom::StoredLast(i) => (4, i as usize),
    }
}

/// The key groups of `keys` given a `true`.
fn of_groups(groups: usize, keys: &[u32]) -> Vec<bool> {
    let mut has = vec![false; groups];
    for &k in keys {
        has[k as usize] = true;
    }
    has
}

impl PartitionWork<'_> {
    /// SCD2: the rebuilt history of every key this partition changes
    /// ([`smelt_core::scd2`]); the stored versions of those keys are deleted and the
    /// rebuilt ones written.
    pub(super) async fn plan_scd2(
        &self,
        batch: RecordBatch,
        silver: &dyn LakeTable,
        tombstones: &dyn LakeTable,
        report: &mut FlowReport,
        phases: &mut Phases,
    ) -> Result<Planned> {
        let started = Instant::now();
        let keys: Vec<ArrayRef> = (self.flow.keys.iter())
            .map(|k| column(&batch, k))
            .collect::<Result<_>>()?;
        let keep = storable(&self.flow.keys, &keys, self.schema)?;
        report.rejected += keep.len() - keep.true_count();
        let batch = if keep.true_count() == keep.len() {
            batch
        } else {
            filter_record_batch(&batch, &keep)?
        };
        if batch.num_rows() == 0 {
            return Ok(self.nothing());
        }
        let g = self.gather(batch, silver, tombstones).await?;
        let delete = self.closing(&g.batch, report)?;
        let g = self.without_replayed(g, &delete)?;
        let data_names = self.data_names();
        let columns_of = |b: &RecordBatch| -> Result<Vec<ArrayRef>> {
            data_names.iter().map(|c| column(b, c)).collect()
        };
        let (stored_data, change_data) = (columns_of(&g.found)?, columns_of(&g.batch)?);
        let tracked: Vec<usize> = (data_names.iter().enumerate())
            .filter(|(_, c)| self.flow.history.updates(c))
            .map(|(i, _)| i)
            .collect();
        let plan = plan_scd2(&Scd2Input {
            keys: g.unique[0].len(),
            stored_key: &g.stored_key,
            stored_start: &g.seq.stored_start,
            stored_end: &g.seq.stored_end,
            stored_data: &stored_data,
            stored_last: &g.seq.stored_last,
            change_key: &g.change_key,
            change_seq: &g.seq.change,
            change_delete: &delete,
            change_data: &change_data,
            tracked: &tracked,
            tomb_key: &g.tomb_key,
            tomb_seq: &g.seq.tomb,
        })?;
        self.count(&plan, report)?;
        if plan.versions.is_empty()
            && !plan.rewrite.iter().any(|&r| r)
            && plan.tombstones.is_empty()
        {
            return Ok(self.nothing());
        }
        let rows = self.version_rows(&plan, &g)?;
        let keys_batch = self.key_batch(&g.unique)?;
        // Stored versions of rewritten keys are removed.
        let had_stored = of_groups(plan.rewrite.len(), &g.stored_key);
        let remove = BooleanArray::from_iter(
            (plan.rewrite.iter().zip(&had_stored)).map(|(&r, &h)| Some(r && h)),
        );
        let removes = filter_record_batch(&keys_batch, &remove)?;
        let replaces = BooleanArray::from(vec![false; rows.num_rows()]);
        report.tombstones_written += plan.tombstones.len();
        let (tombstones, tombstone_removes) = self.tombstone_rows(&plan, &g, &keys_batch)?;
        phases.add("history", started.elapsed().as_millis() as u64);
        Ok(Planned {
            rows,
            replaces,
            removes,
            tombstone_replaces: BooleanArray::from(vec![false; tombstones.num_rows()]),
            tombstones,
            tombstone_removes,
        })
    }

    /// What a partition that changes nothing writes.
    fn nothing(&self) -> Planned {
        Planned {
            rows: RecordBatch::new_empty(Arc::clone(self.schema)),
            replaces: BooleanArray::from(Vec::<bool>::new()),
            removes: RecordBatch::new_empty(Arc::new(Schema::empty())),
            tombstones: RecordBatch::new_empty(Arc::clone(self.tomb_schema)),
            tombstone_replaces: BooleanArray::from(Vec::<bool>::new()),
            tombstone_removes: RecordBatch::new_empty(Arc::new(Schema::empty())),
        }
    }

    /// The key groups of `batch`, and every stored version and tombstone of them.
    async fn gather(
        &self,
        batch: RecordBatch,
        silver: &dyn LakeTable,
        tombstones: &dyn LakeTable,
    ) -> Result<Gathered> {
        let flow = self.flow;
        let seq_type = self.schema.field_with_name(START_AT)?.data_type().clone();
        let seq_name = self.cast_sequence[0].as_str();
        let change_seq = arrow::compute::cast(&column(&batch, seq_name)?, &seq_type)?;
        let change_keys: Vec<ArrayRef> = (flow.keys.iter())
            .map(|k| column(&batch, k))
            .collect::<Result<_>>()?;
        // Key groups: one per distinct key.
        let firsts = latest_per_key(&change_keys, &[])?;
        let unique: Vec<ArrayRef> = (change_keys.iter())
            .map(|k| Ok(take(k.as_ref(), &firsts, None)?))
            .collect::<Result<_>>()?;
        let index = smelt_core::dedupe::KeyIndex::new(&unique)?;
        let change_key: Vec<u32> = index.positions(&change_keys)?.values().to_vec();
        // The key group of each row of `rows`.
        let groups = |rows: &RecordBatch| -> Result<Vec<u32>> {
            let keys: Vec<ArrayRef> = (flow.keys.iter().zip(&change_keys))
                .map(|(k, c)| Ok(arrow::compute::cast(&column(rows, k)?, c.data_type())?))
                .collect::<Result<_>>()?;
            Ok(index.positions(&keys)?.values().to_vec())
        };

        // Every stored version of those keys.
        let found = self.stored_rows(silver, self.schema, &unique).await?;
        let stored_key = groups(&found)?;
        // The stored tombstones of those keys: deletes the history does not show.
        let tomb_seq_name = stored_sequence_names(flow, self.audit_ingest)
            .into_iter()
            .next()
            .ok_or_else(|| EngineError::Internal("SCD2 without a sequence".into()))?;
        let tomb_found = (self.stored_rows(tombstones, self.tomb_schema, &unique)).await?;
        let tomb_key = groups(&tomb_found)?;
        let seq = Sequences {
            stored_start: column(&found, START_AT)?,
            stored_end: column(&found, END_AT)?,
            change: change_seq,
            tomb: arrow::compute::cast(&column(&tomb_found, &tomb_seq_name)?, &seq_type)?,
            stored_last: arrow::compute::cast(&column(&found, &tomb_seq_name)?, &seq_type)?,
            null: arrow::array::new_null_array(&seq_type, 1),
        };
        Ok(Gathered {
            batch,
            unique,
            change_key,
            found,
            stored_key,
            all_tomb_key: tomb_key.clone(),
            tomb_found,
            tomb_key,
            tomb_seq_name,
            seq,
        })
    }

    /// Which changes close their key's version: deletes, and changes whose state fails
    /// `where` (counted as filtered).
    fn closing(&self, batch: &RecordBatch, report: &mut FlowReport) -> Result<BooleanArray> {
        let delete = column(batch, IS_DELETE)?.as_boolean().clone();
        let value_of = |name: &str| {
            if Some(name) == self.audit_ingest {
                column(batch, COMMIT_TIMESTAMP)
            } else {
                column(batch, name)
            }
        };
        Ok(match self.filter_out(value_of, &delete)? {
            Some((deleted, failing)) => {
                report.filtered += failing.true_count();
                deleted
            }
            None => delete,
        })
    }

    /// `g` without the tombstones a crashed attempt of this range wrote: they do not hold
    /// the deletes that wrote them, which are applied (and counted) again. Every stored
    /// tombstone of a key still counts when its tombstones are staged again.
    fn without_replayed(&self, g: Gathered, delete: &BooleanArray) -> Result<Gathered> {
        let Some(through) = self.replayed_tombstones.filter(|_| !g.tomb_key.is_empty()) else {
            return Ok(g);
        };
        let versions = column(&g.batch, COMMIT_VERSION)?;
        let replayed = replayed_deletes(delete, &versions, through)?;
        let (tomb_key, tomb_seq) = (&g.tomb_key, &g.seq.tomb);
        let keep = not_own_tombstones(tomb_key, tomb_seq, &g.change_key, &g.seq.change, &replayed)?;
        let kept: Vec<u32> = (tomb_key.iter().zip(keep.values().iter()))
            .filter(|(_, k)| *k)
            .map(|(t, _)| *t)
            .collect();
        let tomb = arrow::compute::filter(tomb_seq, &keep)?;
        Ok(Gathered {
            tomb_found: filter_record_batch(&g.tomb_found, &keep)?,
            tomb_key: kept,
            seq: Sequences { tomb, ..g.seq },
            ..g
        })
    }

    /// Silver's data columns: neither key, audit nor history bound.
    fn data_names(&self) -> Vec<String> {
        let is_data = |n: &str| {
            !(Some(n) == self.audit_ingest
                || Some(n) == self.audit_update
                || n == START_AT
                || n == END_AT
                || self.flow.keys.iter().any(|k| k == n))
        };
        (self.schema.fields().iter())
            .map(|f| f.name().clone())
            .filter(|n| is_data(n))
            .collect()
    }

    /// Counts what `plan` does into `report`; fails on a sequence conflict under
    /// `on_sequence_conflict: fail`.
    fn count(&self, plan: &smelt_core::scd2::Scd2Plan, report: &mut FlowReport) -> Result<()> {
        report.inserted += plan.inserted;
        report.updated += plan.updated;
        report.stale += plan.stale;
        report.deleted += plan.deleted;
        report.sequence_conflicts += plan.sequence_conflicts;
        if plan.sequence_conflicts > 0 && self.flow.on_sequence_conflict == OnSequenceConflict::Fail
        {
            return Err(EngineError::rule(
                smelt_rules::messages::history_sequence_conflict(plan.sequence_conflicts),
            ));
        }
        Ok(())
    }

    /// The rebuilt versions of `plan`, column by column (silver's schema).
    fn version_rows(&self, plan: &smelt_core::scd2::Scd2Plan, g: &Gathered) -> Result<RecordBatch> {
        let data_index: Vec<(usize, usize)> = (plan.versions.iter())
            .map(|v| match v.data {
                DataFrom::Stored(i) => (0, i as usize),
                DataFrom::Change(i) => (1, i as usize),
            })
            .collect();
        let seq_sources = g.seq.sources();
        let run_ts: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![self.run_timestamp_us; plan.versions.len()])
                .with_timezone("UTC"),
        );
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for f in self.schema.fields() {
            let name = f.name().as_str();
            let array: ArrayRef = if name == START_AT {
                let idx: Vec<(usize, usize)> =
                    plan.versions.iter().map(|v| seq_at(v.start)).collect();
                interleave(&seq_sources[..5], &idx)?
            } else if name == END_AT {
                let idx: Vec<(usize, usize)> = (plan.versions.iter())
                    .map(|v| v.end.map_or((5, 0), seq_at))
                    .collect();
                interleave(&seq_sources, &idx)?
            } else if Some(name) == self.audit_update {
                Arc::clone(&run_ts)
            } else {
                let change = if Some(name) == self.audit_ingest {
                    column(&g.batch, COMMIT_TIMESTAMP)?
                } else {
                    column(&g.batch, name)?
                };
                let change = arrow::compute::cast(&change, f.data_type())?;
                let stored = column(&g.found, name)?;
                interleave(&[stored.as_ref(), change.as_ref()], &data_index)?
            };
            columns.push(if array.data_type() == f.data_type() {
                array
            } else {
                arrow::compute::cast(&array, f.data_type())?
            });
        }
        Ok(RecordBatch::try_new(Arc::clone(self.schema), columns)?)
    }

    /// The key groups `unique` as a batch of silver's key columns.
    pub(super) fn key_batch(&self, unique: &[ArrayRef]) -> Result<RecordBatch> {
        let keys = &self.flow.keys;
        let key_schema = Arc::new(Schema::new(
            (keys.iter())
                .map(|k| Ok(self.schema.field_with_name(k)?.clone()))
                .collect::<Result<Vec<_>>>()?,
        ));
        let typed: Vec<ArrayRef> = (keys.iter().zip(unique))
            .map(|(k, u)| {
                let ty = self.schema.field_with_name(k)?.data_type();
                Ok(arrow::compute::cast(u, ty)?)
            })
            .collect::<Result<_>>()?;
        Ok(RecordBatch::try_new(key_schema, typed)?)
    }

    /// The tombstones to stage, and the keys whose stored tombstones they replace. A key
    /// that gets new tombstones has all of its tombstones staged again (as stored,
    /// `_deleted_at` kept, so retention runs from the first write) with the new ones, and
    /// its stored ones removed: the tombstone table holds several rows per key.
    fn tombstone_rows(
        &self,
        plan: &smelt_core::scd2::Scd2Plan,
        g: &Gathered,
        keys_batch: &RecordBatch,
    ) -> Result<(RecordBatch, RecordBatch)> {
        let groups = plan.rewrite.len();
        let gets_new = of_groups(
            groups,
            &plan.tombstones.iter().map(|t| t.0).collect::<Vec<_>>(),
        );
        let tomb_key = &g.tomb_key;
        let carried: Vec<usize> = (0..tomb_key.len())
            .filter(|&i| gets_new[tomb_key[i] as usize])
            .collect();
        let key_rows = arrow::array::UInt32Array::from_iter_values(
            (carried.iter().map(|&i| tomb_key[i])).chain(plan.tombstones.iter().map(|t| t.0)),
        );
        let seq_index: Vec<(usize, usize)> = (carried.iter().map(|&i| (3, i)))
            .chain(plan.tombstones.iter().map(|t| seq_at(t.1)))
            .collect();
        let at_index: Vec<(usize, usize)> = (carried.iter().map(|&i| (0, i)))
            .chain(plan.tombstones.iter().map(|_| (1, 0)))
            .collect();
        let new_at: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![self.run_timestamp_us]).with_timezone("UTC"),
        );
        let seq_sources = g.seq.sources();
        let mut columns = Vec::with_capacity(self.tomb_schema.fields().len());
        for f in self.tomb_schema.fields() {
            let name = f.name().as_str();
            let array = if name == DELETED_AT {
                let stored_at =
                    arrow::compute::cast(&column(&g.tomb_found, DELETED_AT)?, new_at.data_type())?;
                interleave(&[stored_at.as_ref(), new_at.as_ref()], &at_index)?
            } else if name == g.tomb_seq_name {
                interleave(&seq_sources[..5], &seq_index)?
            } else {
                take(column(keys_batch, name)?.as_ref(), &key_rows, None)?
            };
            columns.push(arrow::compute::cast(&array, f.data_type())?);
        }
        let tombstones = RecordBatch::try_new(Arc::clone(self.tomb_schema), columns)?;
        let had_tomb = of_groups(groups, &g.all_tomb_key);
        let removes = filter_record_batch(
            keys_batch,
            &BooleanArray::from_iter(gets_new.iter().zip(&had_tomb).map(|(&n, &h)| Some(n && h))),
        )?;
        Ok((tombstones, removes))
    }

    /// Every stored row of `table` (columns of `schema`, nullable) whose key is a row of
    /// `unique`; none when the table does not exist or the run is a rebuild.
    async fn stored_rows(
        &self,
        table: &dyn LakeTable,
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
