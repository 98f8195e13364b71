//! The cast: bronze change batches cast to silver's types as they stream in ([`CastPlan`]),
//! deletes and truncates marked, cast failures and expectations handled as the flow says.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::{filter, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::display::array_value_to_string;
use smelt_core::cast::cast_columns_in;
use smelt_core::change::{
    CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION, DELETE, INSERT, UPDATE_POSTIMAGE, timestamp_utc,
};
use smelt_core::dialect::CastDialect;
use smelt_spec::{ApplyFlow, OnCastError, OnViolation, SourceDeletes};

use super::is_audit;
use crate::predicate::Predicate;
use crate::rejects::{Reason, Rejects};
use crate::report::FlowReport;
use crate::schema::type_name;
use crate::{EngineError, Result};

/// The column of a cast change batch that marks deletes.
pub(super) const IS_DELETE: &str = "_smelt_is_delete";
/// The column of a cast change batch that marks the deletes of the source's change feed
/// (not those of `apply_as_deletes`).
pub(super) const FEED_DELETE: &str = "_smelt_feed_delete";

/// The change batch schema: bronze columns, then the change metadata.
pub(super) fn source_change_schema(bronze: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = bronze.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(smelt_core::change::metadata_fields());
    Arc::new(Schema::new(fields))
}

/// Column `name` of a batch the run built itself (a cast change batch): missing is a bug.
pub(super) fn column(batch: &RecordBatch, name: &str) -> Result<ArrayRef> {
    batch
        .column_by_name(name)
        .cloned()
        .ok_or_else(|| EngineError::Internal(format!("cast batch without `{name}`")))
}

/// The first value that failed to cast, for `on_cast_error: fail`.
pub(super) struct CastFailure {
    pub(super) column: String,
    pub(super) target: String,
    pub(super) value: String,
    pub(super) version: String,
    pub(super) key: String,
}

/// Casts bronze change batches to the flow's silver types as they stream in, and marks
/// the deletes among them.
pub(super) struct CastPlan {
    /// Silver columns (audit columns excepted) in silver types, then `_commit_timestamp`
    /// and [`IS_DELETE`].
    pub(super) schema: SchemaRef,
    targets: Vec<(String, DataType)>,
    /// `apply_as_deletes`, over the change batch.
    as_deletes: Option<Predicate>,
    source_deletes: SourceDeletes,
    /// `expect:`, over the cast batch.
    expectations: Vec<(String, Predicate)>,
    /// `apply_as_truncates`, over the change batch.
    as_truncates: Option<Predicate>,
    /// The sequence columns in the cast batch.
    pub(super) sequence: Vec<String>,
}

/// Where [`CastPlan::cast`] reports what it found.
pub(super) struct CastSink<'a> {
    pub(super) report: &'a mut FlowReport,
    pub(super) first_failure: &'a mut Option<CastFailure>,
    /// The first expectation failure under `on_violation: fail`, as a message.
    pub(super) first_violation: &'a mut Option<String>,
    pub(super) rejects: &'a mut Rejects,
    /// The sequence columns of every truncate seen.
    pub(super) truncates: &'a mut Vec<RecordBatch>,
}

impl CastPlan {
    fn new(
        schema: &SchemaRef,
        is_audit: &dyn Fn(&str) -> bool,
        as_deletes: Option<Predicate>,
        source_deletes: SourceDeletes,
    ) -> Self {
        let targets: Vec<(String, DataType)> = schema
            .fields()
            .iter()
            .filter(|f| !is_audit(f.name()))
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect();
        let mut fields: Vec<Field> = targets
            .iter()
            .map(|(n, t)| Field::new(n, t.clone(), true))
            .collect();
        fields.push(Field::new(COMMIT_TIMESTAMP, timestamp_utc(), true));
        fields.push(Field::new(COMMIT_VERSION, DataType::Int64, true));
        fields.push(Field::new(IS_DELETE, DataType::Boolean, false));
        fields.push(Field::new(FEED_DELETE, DataType::Boolean, false));
        Self {
            schema: Arc::new(Schema::new(fields)),
            targets,
            as_deletes,
            source_deletes,
            expectations: Vec::new(),
            as_truncates: None,
            sequence: Vec::new(),
        }
    }

    /// The cast of `flow` to the silver columns of `schema` (audit columns excepted), with
    /// `as_deletes` (`apply_as_deletes`, compiled already), `apply_as_truncates`, the
    /// sequence columns and the expectations.
    pub(super) fn for_flow(
        flow: &ApplyFlow,
        bronze: &SchemaRef,
        schema: &SchemaRef,
        as_deletes: Option<Predicate>,
    ) -> Result<Self> {
        let as_truncates = flow
            .apply_as_truncates
            .as_deref()
            .map(|sql| {
                Predicate::compile(sql, &source_change_schema(bronze), "`apply_as_truncates`")
            })
            .transpose()?;
        let mut casting = CastPlan::new(
            schema,
            &|n: &str| is_audit(flow, n),
            as_deletes,
            flow.source_deletes,
        );
        casting.as_truncates = as_truncates;
        // `_commit_timestamp` in `sequence_by` is the change batch's own column.
        casting.sequence = flow.sequence_by.clone();
        let silver: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let scope = smelt_rules::predicate::expectation_scope(flow, silver);
        let scope: Vec<&str> = scope.iter().map(String::as_str).collect();
        for (name, sql) in &flow.expectations {
            let what = format!("expectation `{name}`");
            let predicate = Predicate::compile_in(sql, &casting.schema, &scope, &what)?;
            casting.expectations.push((name.clone(), predicate));
        }
        Ok(casting)
    }

    /// The changes of `batch` that apply — inserts and update post-images, and with
    /// `source_deletes: apply` deletes; the rest is counted as ignored — cast, with
    /// [`IS_DELETE`] set for deletes and for rows matching `apply_as_deletes`. Failures are
    /// counted per column among the upserts (a delete needs only its key and sequence);
    /// the first one is kept.
    pub(super) fn cast(
        &self,
        batch: &RecordBatch,
        flow: &ApplyFlow,
        sink: &mut CastSink<'_>,
    ) -> Result<RecordBatch> {
        let Selected {
            batch,
            delete,
            feed_delete,
            truncate,
        } = self.select(batch, sink.report)?;
        let not_upsert = arrow::compute::or(&delete, &truncate)?;
        let changes = Changes {
            flow,
            batch: &batch,
            not_upsert: &not_upsert,
        };
        let (mut columns, quarantined_casts) = self.cast_upserts(&changes, sink)?;
        columns.push(arrow::compute::cast(
            changes.raw(COMMIT_TIMESTAMP)?,
            &timestamp_utc(),
        )?);
        columns.push(arrow::compute::cast(
            changes.raw(COMMIT_VERSION)?,
            &DataType::Int64,
        )?);
        let upsert = arrow::compute::not(&not_upsert)?;
        columns.push(Arc::new(delete));
        columns.push(Arc::new(feed_delete));
        let cast = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let left_out = BooleanArray::from(quarantined_casts);
        let left_out = self.take_truncates(&cast, &truncate, left_out, sink)?;
        let left_out = self.check_expectations(&cast, &upsert, left_out, &changes, sink)?;
        if left_out.true_count() > 0 {
            return Ok(filter_record_batch(
                &cast,
                &arrow::compute::not(&left_out)?,
            )?);
        }
        Ok(cast)
    }

    /// The changes of `batch` that apply (the rest counted in `report` as ignored), with
    /// which of them are deletes and which truncates.
    fn select(&self, batch: &RecordBatch, report: &mut FlowReport) -> Result<Selected> {
        let kinds = batch
            .column_by_name(CHANGE_TYPE)
            .ok_or_else(|| EngineError::Internal("change batch without _change_type".into()))?;
        let kinds = arrow::compute::cast(kinds, &DataType::Utf8)?;
        let is = |kind: &str| {
            arrow::compute::kernels::cmp::eq(&kinds, &arrow::array::StringArray::new_scalar(kind))
        };
        let upsert = arrow::compute::or(&is(INSERT)?, &is(UPDATE_POSTIMAGE)?)?;
        let mut delete = match &self.as_deletes {
            Some(p) => arrow::compute::and(&upsert, &p.evaluate(batch)?)?,
            None => BooleanArray::from(vec![false; batch.num_rows()]),
        };
        let mut keep = upsert;
        let mut feed_delete = BooleanArray::from(vec![false; batch.num_rows()]);
        if self.source_deletes == SourceDeletes::Apply {
            feed_delete = is(DELETE)?;
            keep = arrow::compute::or(&keep, &feed_delete)?;
            delete = arrow::compute::or(&delete, &feed_delete)?;
        }
        // Filters copy every column: skip them when they keep everything (append-only bronze).
        let (batch, delete, feed_delete) = if keep.true_count() == batch.num_rows() {
            (batch.clone(), delete, feed_delete)
        } else {
            (
                filter_record_batch(batch, &keep)?,
                filter(&delete, &keep)?.as_boolean().clone(),
                filter(&feed_delete, &keep)?.as_boolean().clone(),
            )
        };
        report.ignored += keep.len() - batch.num_rows();
        // Truncates are upserts matching `apply_as_truncates`; like deletes they need only
        // their sequence.
        let truncate = match &self.as_truncates {
            Some(p) => arrow::compute::and_not(&p.evaluate(&batch)?, &delete)?,
            None => BooleanArray::from(vec![false; batch.num_rows()]),
        };
        Ok(Selected {
            batch,
            delete,
            feed_delete,
            truncate,
        })
    }

    /// The silver columns of `changes` cast to silver's types, and per change whether a
    /// cast failure quarantined it. Failures among the upserts are handled by
    /// [`Changes::cast_failed`].
    fn cast_upserts(
        &self,
        changes: &Changes<'_>,
        sink: &mut CastSink<'_>,
    ) -> Result<(Vec<ArrayRef>, Vec<bool>)> {
        let flow = changes.flow;
        let inputs: Vec<(ArrayRef, DataType)> = self
            .targets
            .iter()
            .map(|(n, t)| Ok((Arc::clone(changes.raw(n)?), t.clone())))
            .collect::<Result<_>>()?;
        let dialect = core_dialect(flow.cast_dialect);
        let outputs = cast_columns_in(&inputs, flow.tz.as_deref(), dialect)?;
        let mut columns = Vec::with_capacity(self.targets.len() + 1);
        // Upserts left out of the apply: quarantined or dropped.
        let mut quarantined_casts = vec![false; changes.batch.num_rows()];
        for ((name, target), out) in self.targets.iter().zip(outputs) {
            let failed: Vec<usize> = if changes.not_upsert.true_count() == 0 {
                out.failed_rows
            } else {
                out.failed_rows
                    .into_iter()
                    .filter(|&r| !changes.not_upsert.value(r))
                    .collect()
            };
            if !failed.is_empty() {
                changes.cast_failed(name, target, &failed, &mut quarantined_casts, sink)?;
            }
            columns.push(if out.array.data_type() == target {
                out.array
            } else {
                arrow::compute::cast(&out.array, target)?
            });
        }
        Ok((columns, quarantined_casts))
    }

    /// `left_out` with the truncates among `cast` (rows `truncate`) added, having kept
    /// their sequence columns in the sink and counted them.
    fn take_truncates(
        &self,
        cast: &RecordBatch,
        truncate: &BooleanArray,
        left_out: BooleanArray,
        sink: &mut CastSink<'_>,
    ) -> Result<BooleanArray> {
        if truncate.true_count() == 0 {
            return Ok(left_out);
        }
        let idx = self
            .sequence
            .iter()
            .map(|n| self.schema.index_of(n))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        sink.truncates
            .push(filter_record_batch(&cast.project(&idx)?, truncate)?);
        sink.report.truncates += truncate.true_count();
        Ok(arrow::compute::or(&left_out, truncate)?)
    }

    /// Checks the expectations on the upserts of `cast` (`upsert`) not left out yet, as
    /// `on_violation` says: violations are counted, then warned of, dropped or quarantined
    /// (both added to `left_out`), or the first kept to fail the run. Returns `left_out`.
    fn check_expectations(
        &self,
        cast: &RecordBatch,
        upsert: &BooleanArray,
        mut left_out: BooleanArray,
        changes: &Changes<'_>,
        sink: &mut CastSink<'_>,
    ) -> Result<BooleanArray> {
        let flow = changes.flow;
        let row_numbers = UInt32Array::from_iter_values(0..cast.num_rows() as u32);

        // Expectations hold for upserts (a delete carries only its key and sequence).
        for (name, predicate) in &self.expectations {
            let holds = predicate.evaluate(cast)?;
            let violated =
                arrow::compute::and_not(&arrow::compute::and_not(upsert, &holds)?, &left_out)?;
            let count = violated.true_count();
            if count == 0 {
                continue;
            }
            *sink.report.expectations.entry(name.clone()).or_default() += count;
            let rows = filter(&row_numbers, &violated)?;
            let rows = rows.as_primitive::<arrow::datatypes::UInt32Type>();
            match flow.on_violation {
                OnViolation::Warn => {}
                OnViolation::Drop => {
                    sink.report.dropped += count;
                    left_out = arrow::compute::or(&left_out, &violated)?;
                }
                OnViolation::Quarantine => {
                    sink.rejects.add(
                        changes.batch,
                        rows,
                        &Reason {
                            rule: name,
                            column: None,
                            target_type: None,
                            reason: &smelt_rules::tables::expectation_reason(
                                name,
                                predicate.text(),
                            ),
                        },
                    )?;
                    left_out = arrow::compute::or(&left_out, &violated)?;
                }
                OnViolation::Fail => {
                    if sink.first_violation.is_none() {
                        let r = rows.value(0) as usize;
                        let key = changes.key_of(r)?;
                        *sink.first_violation = Some(smelt_rules::messages::violation(
                            name,
                            predicate.text(),
                            &key,
                            &flow.from.to_string(),
                            &array_value_to_string(changes.raw(COMMIT_VERSION)?, r)?,
                        ));
                    }
                }
            }
        }
        Ok(left_out)
    }
}

/// The changes of a change batch that apply, and what each one is.
struct Selected {
    /// The changes, change metadata included.
    batch: RecordBatch,
    /// Per change: a delete (from the source, or matching `apply_as_deletes`).
    delete: BooleanArray,
    /// Per change: a delete of the source's change feed.
    feed_delete: BooleanArray,
    /// Per change: a truncate (an upsert matching `apply_as_truncates`).
    truncate: BooleanArray,
}

/// The changes of a change batch that apply, being cast by [`CastPlan::cast`].
struct Changes<'a> {
    flow: &'a ApplyFlow,
    /// The changes as read (bronze columns and change metadata).
    batch: &'a RecordBatch,
    /// Per change: a delete or a truncate, which needs only its key and sequence.
    not_upsert: &'a BooleanArray,
}

impl Changes<'_> {
    /// Column `name` of the change batch.
    fn raw(&self, name: &str) -> Result<&ArrayRef> {
        self.batch
            .column_by_name(name)
            .ok_or_else(|| EngineError::Internal(format!("change batch without `{name}`")))
    }

    /// The key of the change at `row`, as `k=v, …`.
    fn key_of(&self, row: usize) -> Result<String> {
        Ok(self
            .flow
            .keys
            .iter()
            .map(|k| Ok(format!("{k}={}", array_value_to_string(self.raw(k)?, row)?)))
            .collect::<Result<Vec<_>>>()?
            .join(", "))
    }

    /// Handles the upserts at `failed`, whose value of column `name` cannot be cast to
    /// `target`: quarantined under `on_cast_error: quarantine` (and marked in
    /// `quarantined`), counted, and the first kept.
    fn cast_failed(
        &self,
        name: &str,
        target: &DataType,
        failed: &[usize],
        quarantined: &mut [bool],
        sink: &mut CastSink<'_>,
    ) -> Result<()> {
        if self.flow.on_cast_error == OnCastError::Quarantine {
            let rows = UInt32Array::from_iter_values(failed.iter().map(|&r| r as u32));
            let target_type = type_name(target);
            sink.rejects.add(
                self.batch,
                &rows,
                &Reason {
                    rule: smelt_rules::tables::RULE_CAST,
                    column: Some(name),
                    target_type: Some(&target_type),
                    reason: &smelt_rules::tables::cast_reason(&target_type),
                },
            )?;
            for &r in failed {
                quarantined[r] = true;
            }
        }
        let failures = &mut sink.report.cast_failures;
        *failures.entry(name.to_owned()).or_default() += failed.len();
        if sink.first_failure.is_none() {
            let row = failed[0];
            let key = self.key_of(row)?;
            *sink.first_failure = Some(CastFailure {
                column: name.to_owned(),
                target: type_name(target),
                value: array_value_to_string(self.raw(name)?, row)?,
                version: array_value_to_string(self.raw(COMMIT_VERSION)?, row)?,
                key,
            });
        }
        Ok(())
    }
}

/// The cast rules of a flow's `cast_dialect`.
pub(crate) fn core_dialect(dialect: smelt_spec::CastDialect) -> CastDialect {
    match dialect {
        smelt_spec::CastDialect::BigQuery => CastDialect::BigQuery,
        smelt_spec::CastDialect::Spark => CastDialect::Spark,
        smelt_spec::CastDialect::Lenient => CastDialect::Lenient,
    }
}

#[cfg(test)]
mod tests {
    /// `sequence_by: [_commit_timestamp]` names the change batch's column as is.
    #[test]
    fn the_default_sequence_is_the_change_batch_column() {
        assert_eq!(
            smelt_spec::COMMIT_TIMESTAMP,
            smelt_core::change::COMMIT_TIMESTAMP
        );
    }

    /// `apply_as_deletes` sees bronze's columns and the change columns of the rules, which
    /// are the change batch's.
    #[test]
    fn the_change_batch_carries_the_change_columns_of_the_rules() {
        let names: Vec<String> = smelt_core::change::metadata_fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, smelt_rules::predicate::CHANGE_COLUMNS);
    }
}
