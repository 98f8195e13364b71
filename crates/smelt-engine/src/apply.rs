//! One run of an `apply` flow (DESIGN §3): read → cast → latest per key → guard → write.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, RecordBatch, TimestampMicrosecondArray, UInt32Array,
};
use arrow::compute::kernels::zip::zip;
use arrow::compute::{concat_batches, filter, filter_record_batch, take};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::util::display::array_value_to_string;
use smelt_core::apply::{Scd1Input, plan_scd1};
use smelt_core::cast::cast_columns;
use smelt_core::change::{
    CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION, INSERT, UPDATE_POSTIMAGE, timestamp_utc,
};
use smelt_core::dedupe::{latest_per_key, positions_of};
use smelt_spec::pipeline::COMMIT_TIMESTAMP as SEQ_COMMIT_TIMESTAMP;
use smelt_spec::{ApplyFlow, OnCastError, did_you_mean};

use crate::ports::{ChangeSource, Reporter, SilverTable, Watermark};
use crate::report::FlowReport;
use crate::schema::{arrow_schema, type_name};
use crate::{EngineError, Result, failpoint};

/// Settings shared by every flow of one run.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// Unique id of the run.
    pub run_id: String,
    /// The run timestamp (µs since the epoch, UTC): `_update_timestamp` of changed rows.
    pub run_timestamp_us: i64,
    /// Plan only: compute the report, write nothing.
    pub dry_run: bool,
    /// Ignore the watermark and rebuild from the bronze snapshot.
    pub full_refresh: bool,
}

/// The watermark application id of a flow.
pub fn app_id(flow: &str) -> String {
    format!("smelt/{flow}")
}

struct Phases {
    start: Instant,
    done: Vec<(String, u64)>,
}

impl Phases {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            done: Vec::new(),
        }
    }
    fn end(&mut self, name: &str) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.done.push((name.to_string(), ms));
        self.start = Instant::now();
    }
}

/// The silver schema the flow writes: the existing table's, checked against the DDL, or
/// the DDL's when silver does not exist yet.
pub fn silver_schema(
    flow_name: &str,
    flow: &ApplyFlow,
    silver: &dyn SilverTable,
) -> Result<SchemaRef> {
    let declared = flow.silver.as_ref().map(arrow_schema);
    match (silver.schema(), declared) {
        (Some(existing), Some(declared)) => {
            for f in declared.fields() {
                match existing.field_with_name(f.name()) {
                    Ok(e) if same_type(e.data_type(), f.data_type()) => {}
                    Ok(e) => {
                        return Err(EngineError::user(
                            format!(
                                "flow `{flow_name}`: column `{}` of `{}` is {} in the table but {} in {}",
                                f.name(),
                                flow.into,
                                type_name(e.data_type()),
                                type_name(f.data_type()),
                                flow.schema_file
                                    .as_ref()
                                    .map(|p| p.display().to_string())
                                    .unwrap_or_default()
                            ),
                            "make the DDL match the table, or rebuild silver with `smelt run --full-refresh` after dropping it",
                        ));
                    }
                    Err(_) => {
                        return Err(EngineError::user(
                            format!(
                                "flow `{flow_name}`: column `{}` is declared but missing from the existing table `{}`",
                                f.name(),
                                flow.into
                            ),
                            "schema evolution is not supported yet: drop the column from the DDL or recreate the silver table",
                        ));
                    }
                }
            }
            Ok(existing)
        }
        (Some(existing), None) => Ok(existing),
        (None, Some(declared)) => Ok(declared),
        (None, None) => Err(EngineError::TableNotFound {
            table: flow.into.to_string(),
            location: "the lake".into(),
            hint:
                "give the flow a `schema:` file with the silver CREATE TABLE so smelt can create it"
                    .into(),
        }),
    }
}

fn same_type(a: &DataType, b: &DataType) -> bool {
    match (a, b) {
        (
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8,
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8,
        ) => true,
        (
            DataType::Binary | DataType::BinaryView | DataType::LargeBinary,
            DataType::Binary | DataType::BinaryView | DataType::LargeBinary,
        ) => true,
        (DataType::Timestamp(_, Some(_)), DataType::Timestamp(_, Some(_))) => true,
        _ => a == b,
    }
}

/// Runs (or plans, with `ctx.dry_run`) one apply flow.
pub async fn run_apply(
    flow_name: &str,
    flow: &ApplyFlow,
    source: &dyn ChangeSource,
    silver: &mut dyn SilverTable,
    ctx: &RunContext,
    reporter: &dyn Reporter,
) -> Result<FlowReport> {
    let mut phases = Phases::new();
    let app = app_id(flow_name);
    let schema = silver_schema(flow_name, flow, silver)?;
    let audit_ingest = flow.audit.ingest_timestamp.clone();
    let audit_update = flow.audit.update_timestamp.clone();
    let is_audit =
        |n: &str| Some(n) == audit_ingest.as_deref() || Some(n) == audit_update.as_deref();

    // Every silver column (except audit columns) must come from bronze.
    let bronze = source.schema();
    let bronze_names: Vec<&str> = bronze.fields().iter().map(|f| f.name().as_str()).collect();
    for f in schema.fields() {
        if is_audit(f.name()) || bronze.field_with_name(f.name()).is_ok() {
            continue;
        }
        let hint = match did_you_mean(f.name(), bronze_names.iter().copied()) {
            Some(near) => format!(
                "bronze has `{near}`: rename the silver column, or add `{}` to bronze",
                f.name()
            ),
            None => format!("bronze columns are: {}", bronze_names.join(", ")),
        };
        return Err(EngineError::user(
            format!(
                "flow `{flow_name}`: silver column `{}` of `{}` is missing from bronze table `{}`",
                f.name(),
                flow.into,
                flow.from
            ),
            hint,
        ));
    }
    for k in &flow.keys {
        if schema.field_with_name(k).is_err() {
            return Err(EngineError::user(
                format!(
                    "flow `{flow_name}`: key column `{k}` is not a column of `{}`",
                    flow.into
                ),
                match did_you_mean(k, schema.fields().iter().map(|f| f.name().as_str())) {
                    Some(near) => format!("did you mean `{near}`?"),
                    None => "set `keys:` to columns of the silver table".to_string(),
                },
            ));
        }
    }

    let watermark = if ctx.full_refresh || silver.schema().is_none() {
        None
    } else {
        silver.watermark(&app).await?
    };
    let v = source.version();
    let mut report = FlowReport {
        flow: flow_name.to_string(),
        from: flow.from.to_string(),
        into: flow.into.to_string(),
        run_id: ctx.run_id.clone(),
        mode: if watermark.is_none() {
            "snapshot"
        } else {
            "incremental"
        }
        .to_string(),
        from_version: watermark,
        to_version: v,
        silver_version: silver.version(),
        ..FlowReport::default()
    };
    if let Some(w) = watermark {
        if w == v {
            report.status = "up_to_date".into();
            phases.end("check");
            report.phases_ms = phases.done;
            return Ok(report);
        }
        if w > v {
            return Err(EngineError::user(
                format!(
                    "flow `{flow_name}`: silver `{}` has applied bronze version {w}, but `{}` is only at version {v}",
                    flow.into, flow.from
                ),
                "the bronze table was recreated; rebuild silver with `smelt run --full-refresh`",
            ));
        }
    }

    reporter.phase(flow_name, "read changes");
    let changes = source.read_changes(watermark).await?;
    report.files_read = changes.files_read;
    report.bytes_read = changes.bytes_read;
    report.delete_files_ignored = changes.skipped_delete_files;
    let all = concat_batches(&changes.schema, &changes.batches)?;
    report.changes_read = all.num_rows();
    tracing::info!(flow = flow_name, after = ?watermark, to = v, rows = all.num_rows(), files = changes.files_read, "read bronze changes");
    phases.end("read");

    reporter.phase(flow_name, "cast");
    // Upserts only: inserts and update post-images. Everything else is ignored (counted).
    let kinds = all
        .column_by_name(CHANGE_TYPE)
        .ok_or_else(|| EngineError::Internal("change batch without _change_type".into()))?;
    let kinds = arrow::compute::cast(kinds, &DataType::Utf8)?;
    let upsert = BooleanArray::from_iter(
        kinds
            .as_string::<i32>()
            .iter()
            .map(|k| Some(matches!(k, Some(INSERT | UPDATE_POSTIMAGE)))),
    );
    // Filters copy every column: skip them when they keep everything (append-only bronze).
    let changes_batch = if upsert.true_count() == all.num_rows() {
        all.clone()
    } else {
        filter_record_batch(&all, &upsert)?
    };
    report.ignored = all.num_rows() - changes_batch.num_rows();

    let n = changes_batch.num_rows();
    let mut cast: HashMap<String, ArrayRef> = HashMap::new();
    let mut first_failure: Option<(String, usize, String)> = None;
    let to_cast: Vec<(&str, ArrayRef, DataType)> = schema
        .fields()
        .iter()
        .filter(|f| !is_audit(f.name()))
        .map(|f| {
            let raw = changes_batch
                .column_by_name(f.name())
                .expect("checked above");
            (f.name().as_str(), Arc::clone(raw), f.data_type().clone())
        })
        .collect();
    let inputs: Vec<(ArrayRef, DataType)> = to_cast
        .iter()
        .map(|(_, a, t)| (Arc::clone(a), t.clone()))
        .collect();
    let outputs = cast_columns(&inputs, flow.tz.as_deref())?;
    for ((name, raw, _), out) in to_cast.iter().zip(outputs) {
        if !out.failed_rows.is_empty() {
            report
                .cast_failures
                .insert(name.to_string(), out.failed_rows.len());
            if first_failure.is_none() {
                let row = out.failed_rows[0];
                first_failure = Some((name.to_string(), row, array_value_to_string(raw, row)?));
            }
        }
        cast.insert(name.to_string(), out.array);
    }
    if let (OnCastError::Fail, Some((column, row, value))) = (flow.on_cast_error, &first_failure) {
        let version = array_value_to_string(
            changes_batch
                .column_by_name(COMMIT_VERSION)
                .expect("metadata"),
            *row,
        )?;
        let key = flow
            .keys
            .iter()
            .map(|k| {
                Ok(format!(
                    "{k}={}",
                    array_value_to_string(changes_batch.column_by_name(k).expect("checked"), *row)?
                ))
            })
            .collect::<Result<Vec<_>>>()?
            .join(", ");
        let target = type_name(
            schema
                .field_with_name(column)
                .expect("silver column")
                .data_type(),
        );
        let total = report.cast_failures_total();
        return Err(EngineError::Cast {
            flow: flow_name.to_string(),
            source: Box::new(smelt_core::CoreError::CastFailed {
                column: column.clone(),
                target,
                value: value.clone(),
                row: *row,
                context: format!(
                    " (bronze `{}` version {version}, key {key}); {total} value(s) failed in all",
                    flow.from
                ),
            }),
        });
    }
    phases.end("cast");
    let commit_ts = arrow::compute::cast(
        changes_batch
            .column_by_name(COMMIT_TIMESTAMP)
            .expect("metadata"),
        &timestamp_utc(),
    )?;
    let key_arrays: Vec<ArrayRef> = flow.keys.iter().map(|k| Arc::clone(&cast[k])).collect();
    let seq_arrays: Vec<ArrayRef> = flow
        .sequence_by
        .iter()
        .map(|s| {
            if s == SEQ_COMMIT_TIMESTAMP {
                Arc::clone(&commit_ts)
            } else {
                Arc::clone(&cast[s])
            }
        })
        .collect();

    let winners = if n == 0 {
        UInt32Array::from(Vec::<u32>::new())
    } else {
        latest_per_key(&key_arrays, &seq_arrays)?
    };
    report.duplicates_collapsed = n - winners.len();

    // NULL in a NOT NULL key column cannot be stored: reject (counted), never half-write.
    let mut keep = BooleanArray::from(vec![true; winners.len()]);
    for k in &flow.keys {
        let field = schema.field_with_name(k).expect("checked");
        if !field.is_nullable() {
            let valid = take(&arrow::compute::is_not_null(&cast[k])?, &winners, None)?;
            keep = arrow::compute::and(&keep, valid.as_boolean())?;
        }
    }
    report.rejected = winners.len() - keep.true_count();
    let winners: UInt32Array = filter(&winners, &keep)?
        .as_primitive::<arrow::datatypes::UInt32Type>()
        .clone();
    // Taking every row in order is the identity (a first load without duplicates): no copy.
    let identity = winners.len() == n;
    let pick = |a: &ArrayRef| -> Result<ArrayRef> {
        if identity {
            Ok(Arc::clone(a))
        } else {
            Ok(take(a.as_ref(), &winners, None)?)
        }
    };
    let mut new_cols: HashMap<String, ArrayRef> = HashMap::new();
    for (name, array) in &cast {
        new_cols.insert(name.clone(), pick(array)?);
    }
    let new_commit_ts = pick(&commit_ts)?;
    let new_seq: Vec<ArrayRef> = seq_arrays.iter().map(pick).collect::<Result<_>>()?;
    let m = winners.len();
    phases.end("dedupe");

    // Guard: what silver stores for these keys.
    reporter.phase(flow_name, "look up silver");
    let stored_seq_names: Vec<String> = flow
        .sequence_by
        .iter()
        .map(|s| {
            if s == SEQ_COMMIT_TIMESTAMP {
                audit_ingest.clone().expect("validated")
            } else {
                s.clone()
            }
        })
        .collect();
    let data_names: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|n| !is_audit(n) && !flow.keys.contains(n))
        .collect();
    let mut wanted: Vec<String> = flow.keys.clone();
    for c in stored_seq_names
        .iter()
        .chain(&data_names)
        .chain(audit_update.iter())
    {
        if !wanted.contains(c) {
            wanted.push(c.clone());
        }
    }
    let new_keys: Vec<ArrayRef> = flow.keys.iter().map(|k| Arc::clone(&new_cols[k])).collect();
    let (matched, stored) = if silver.schema().is_some() && m > 0 {
        let key_schema = Arc::new(arrow::datatypes::Schema::new(
            flow.keys
                .iter()
                .map(|k| {
                    schema
                        .field_with_name(k)
                        .expect("checked")
                        .clone()
                        .with_nullable(true)
                })
                .collect::<Vec<_>>(),
        ));
        let keys_batch = RecordBatch::try_new(key_schema, new_keys.clone())?;
        let found = silver.lookup(keys_batch, &wanted).await?;
        align(&new_keys, &found, &flow.keys, &wanted, &schema)?
    } else {
        let empty: HashMap<String, ArrayRef> = wanted
            .iter()
            .map(|c| {
                (
                    c.clone(),
                    arrow::array::new_null_array(
                        schema.field_with_name(c).expect("silver").data_type(),
                        m,
                    ),
                )
            })
            .collect();
        (BooleanArray::from(vec![false; m]), empty)
    };
    let stored_seq: Vec<ArrayRef> = stored_seq_names
        .iter()
        .map(|c| Arc::clone(&stored[c]))
        .collect();
    let new_data: Vec<ArrayRef> = data_names
        .iter()
        .map(|c| Arc::clone(&new_cols[c]))
        .collect();
    let stored_data: Vec<ArrayRef> = data_names.iter().map(|c| Arc::clone(&stored[c])).collect();
    let plan = plan_scd1(&Scd1Input {
        matched: &matched,
        new_sequence: &new_seq,
        stored_sequence: &stored_seq,
        new_data: &new_data,
        stored_data: &stored_data,
    })?;
    report.inserted = plan.counts.inserted;
    report.updated = plan.counts.updated;
    report.unchanged = plan.counts.unchanged;
    report.stale = plan.counts.stale;
    phases.end("guard");

    // The rows to write, in silver column order.
    let run_ts: ArrayRef = Arc::new(
        TimestampMicrosecondArray::from(vec![ctx.run_timestamp_us; m]).with_timezone("UTC"),
    );
    let mut columns = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let array: ArrayRef = if Some(f.name().as_str()) == audit_ingest.as_deref() {
            Arc::clone(&new_commit_ts)
        } else if Some(f.name().as_str()) == audit_update.as_deref() {
            if plan.changed.true_count() == m {
                Arc::clone(&run_ts)
            } else {
                zip(&plan.changed, &run_ts, &stored[f.name()])?
            }
        } else {
            Arc::clone(&new_cols[f.name()])
        };
        columns.push(arrow::compute::cast(&array, f.data_type())?);
    }
    let rows = RecordBatch::try_new(Arc::clone(&schema), columns)?;
    let rows = if plan.write.true_count() == rows.num_rows() {
        rows
    } else {
        filter_record_batch(&rows, &plan.write)?
    };

    if ctx.dry_run {
        report.status = "planned".into();
        report.phases_ms = phases.done;
        return Ok(report);
    }

    reporter.phase(flow_name, "write silver");
    if silver.schema().is_none() {
        silver.create(Arc::clone(&schema)).await?;
    }
    failpoint("before_silver_commit")?;
    let stats = silver
        .upsert(
            rows,
            &flow.keys,
            &Watermark {
                app_id: app,
                version: v,
                run_id: ctx.run_id.clone(),
            },
        )
        .await?;
    report.files_written = stats.files_added;
    report.files_removed = stats.files_removed;
    report.bytes_written = stats.bytes_written;
    report.silver_version = Some(stats.version);
    report.status = "applied".into();
    tracing::info!(
        flow = flow_name,
        silver_version = stats.version,
        files_added = stats.files_added,
        files_removed = stats.files_removed,
        "committed silver and watermark"
    );
    phases.end("write");
    report.phases_ms = phases.done;
    reporter.done(flow_name);
    Ok(report)
}

/// Lines up stored silver rows with the new keys: `matched[i]` and, per wanted column, the
/// stored value for new row `i` (NULL where unmatched).
fn align(
    new_keys: &[ArrayRef],
    found: &RecordBatch,
    keys: &[String],
    wanted: &[String],
    schema: &SchemaRef,
) -> Result<(BooleanArray, HashMap<String, ArrayRef>)> {
    let mut found_cols = Vec::new();
    for (k, new) in keys.iter().zip(new_keys) {
        let c = found
            .column_by_name(k)
            .ok_or_else(|| EngineError::Internal(format!("lookup lost key `{k}`")))?;
        found_cols.push(arrow::compute::cast(c, new.data_type())?);
    }
    let positions = positions_of(new_keys, &found_cols)?;
    let matched = arrow::compute::is_not_null(&positions)?;
    let mut stored = HashMap::new();
    for c in wanted {
        let target = schema
            .field_with_name(c)
            .map_err(|_| EngineError::Internal(format!("no silver column `{c}`")))?;
        let col = found
            .column_by_name(c)
            .ok_or_else(|| EngineError::Internal(format!("lookup lost column `{c}`")))?;
        let col = arrow::compute::cast(col, target.data_type())?;
        stored.insert(c.clone(), take(col.as_ref(), &positions, None)?);
    }
    Ok((matched, stored))
}

impl RunContext {
    /// A new run: fresh id, timestamp now.
    pub fn new(dry_run: bool, full_refresh: bool) -> Self {
        Self {
            run_id: uuid::Uuid::new_v4().to_string(),
            run_timestamp_us: chrono::Utc::now().timestamp_micros(),
            dry_run,
            full_refresh,
        }
    }
}
