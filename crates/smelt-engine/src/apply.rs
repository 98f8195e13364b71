//! One run of an `apply` flow (DESIGN §3): read → cast → latest per key → guard → write.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, RecordBatch, TimestampMicrosecondArray, UInt32Array,
};
use arrow::compute::kernels::zip::zip;
use arrow::compute::{filter, filter_record_batch, take};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;
use arrow::util::display::array_value_to_string;
use smelt_core::apply::{Scd1Input, merge_updates, plan_scd1};
use smelt_core::cast::cast_columns;
use smelt_core::change::{
    CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION, DELETE, INSERT, UPDATE_POSTIMAGE, timestamp_utc,
};
use smelt_core::dedupe::{
    Latest, latest_per_key_with_ties, partition_of, positions_of, sequence_conflicts,
};
use smelt_spec::pipeline::{COMMIT_TIMESTAMP as SEQ_COMMIT_TIMESTAMP, END_AT, START_AT};
use smelt_spec::{
    ApplyFlow, OnCastError, OnSequenceConflict, OnViolation, SchemaEvolution, SourceDeletes,
    did_you_mean,
};

mod scd2;

use crate::ports::{ChangeSource, Reporter, SilverTable, Watermark};
use crate::predicate::Predicate;
use crate::rejects::{Reason, Rejects};
use crate::report::FlowReport;
use crate::schema::{arrow_schema, is_widening, type_name};
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
    /// Replay a window (`--since`): read the bronze versions after this one, up to the
    /// source's version, whatever the watermark says. Safe because of the guard. The
    /// watermark moves forward only when the window leaves no gap after it.
    pub replay_after: Option<i64>,
    /// Memory the run may use for changes in flight, in bytes; `None`: no limit. Larger
    /// change sets are applied in key partitions spilled to local disk.
    pub memory_limit: Option<u64>,
}

/// The watermark application id of a flow.
pub fn app_id(flow: &str) -> String {
    format!("smelt/{flow}")
}

/// The tombstone table of a silver table: `<schema>.<table>__tombstones`.
pub fn tombstone_table(silver: &smelt_spec::TableName) -> smelt_spec::TableName {
    smelt_spec::TableName {
        schema: silver.schema.clone(),
        table: format!("{}__tombstones", silver.table),
    }
}

/// The column of a tombstone that says when the key was deleted (the run's time).
pub const DELETED_AT: &str = "_deleted_at";

/// The column of a cast change batch that marks deletes.
const IS_DELETE: &str = "_smelt_is_delete";

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
        self.add(name, ms);
        self.start = Instant::now();
    }
    /// Adds `ms` to phase `name` (phases repeat once per partition).
    fn add(&mut self, name: &str, ms: u64) {
        match self.done.iter_mut().find(|(n, _)| n == name) {
            Some((_, total)) => *total += ms,
            None => self.done.push((name.to_string(), ms)),
        }
    }
}

/// The silver schema the flow writes and how the table must change to get there.
pub struct SilverSchema {
    /// The schema (wider types applied; columns to add not yet).
    pub schema: SchemaRef,
    /// DDL columns the table lacks, to add (`schema_evolution: add_new_columns`).
    pub missing: Vec<Field>,
    /// True when some column gets a wider type (`widen_types`).
    pub widen: bool,
}

/// The silver schema the flow writes: the existing table's, checked against the DDL, or
/// the DDL's when silver does not exist yet. With `schema_evolution: add_new_columns`,
/// DDL columns the table lacks are to be added; with `widen_types`, DDL types wider than
/// the table's replace them.
pub fn silver_schema(
    flow_name: &str,
    flow: &ApplyFlow,
    silver: &dyn SilverTable,
) -> Result<SilverSchema> {
    let declared = flow.silver.as_ref().map(arrow_schema);
    let mut missing = Vec::new();
    let mut widened: Vec<Field> = Vec::new();
    match (silver.schema(), declared) {
        (Some(existing), Some(declared)) => {
            for f in declared.fields() {
                match existing.field_with_name(f.name()) {
                    Ok(e) if same_type(e.data_type(), f.data_type()) => {}
                    Ok(e) if flow.widen_types && is_widening(e.data_type(), f.data_type()) => {
                        widened.push(f.as_ref().clone().with_nullable(e.is_nullable()));
                    }
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
                            if is_widening(e.data_type(), f.data_type()) {
                                "set `widen_types: true` to rewrite silver with the wider type"
                            } else {
                                "make the DDL match the table, or rebuild silver with `smelt run --full-refresh` after dropping it"
                            },
                        ));
                    }
                    Err(_) if flow.schema_evolution == SchemaEvolution::AddNewColumns => {
                        missing.push(f.as_ref().clone().with_nullable(true));
                    }
                    Err(_) => {
                        return Err(EngineError::user(
                            format!(
                                "flow `{flow_name}`: column `{}` is declared but missing from the existing table `{}`",
                                f.name(),
                                flow.into
                            ),
                            "set `schema_evolution: add_new_columns` to add it, or drop the column from the DDL",
                        ));
                    }
                }
            }
            let widen = !widened.is_empty();
            let schema = if widen {
                Arc::new(Schema::new(
                    existing
                        .fields()
                        .iter()
                        .map(|f| {
                            widened
                                .iter()
                                .find(|w| w.name() == f.name())
                                .cloned()
                                .unwrap_or_else(|| f.as_ref().clone())
                        })
                        .collect::<Vec<_>>(),
                ))
            } else {
                existing
            };
            Ok(SilverSchema {
                schema,
                missing,
                widen,
            })
        }
        (Some(existing), None) => Ok(SilverSchema {
            schema: existing,
            missing,
            widen: false,
        }),
        (None, Some(declared)) => Ok(SilverSchema {
            schema: declared,
            missing,
            widen: false,
        }),
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

/// The tables an apply flow writes.
pub struct ApplyTables<'a> {
    /// The silver table.
    pub silver: &'a mut dyn SilverTable,
    /// Its tombstone table ([`tombstone_table`]): the keys deleted so far and the sequence
    /// of their delete. Created with the first delete.
    pub tombstones: &'a mut dyn SilverTable,
    /// Its rejects table ([`crate::rejects::rejects_table`]): quarantined changes.
    /// Created with the first reject.
    pub rejects: &'a mut dyn SilverTable,
}

/// Runs (or plans, with `ctx.dry_run`) one apply flow.
pub async fn run_apply(
    flow_name: &str,
    flow: &ApplyFlow,
    source: &dyn ChangeSource,
    tables: ApplyTables<'_>,
    ctx: &RunContext,
    reporter: &dyn Reporter,
) -> Result<FlowReport> {
    let ApplyTables {
        silver,
        tombstones,
        rejects: rejects_table,
    } = tables;
    let mut phases = Phases::new();
    let app = app_id(flow_name);
    let SilverSchema {
        mut schema,
        missing: mut to_add,
        widen,
    } = silver_schema(flow_name, flow, silver)?;
    let audit_ingest = flow.audit.ingest_timestamp.clone();
    let audit_update = flow.audit.update_timestamp.clone();
    // Columns smelt fills itself: the audit columns and, for SCD2, the history bounds.
    let is_audit = |n: &str| {
        Some(n) == audit_ingest.as_deref()
            || Some(n) == audit_update.as_deref()
            || (flow.scd == 2 && (n == START_AT || n == END_AT))
    };
    if flow.scd == 2 {
        for c in [START_AT, END_AT] {
            if schema.field_with_name(c).is_err() {
                return Err(EngineError::user(
                    format!(
                        "flow `{flow_name}`: `scd: 2` needs column `{c}` in `{}`, which has none",
                        flow.into
                    ),
                    "the table was created for SCD type 1; write the history to a new table",
                ));
            }
        }
    }

    // Schema drift: bronze columns silver lacks are reported, and added on request (with
    // DDL columns the table lacks) in this run's commit.
    let bronze = source.schema();
    let new_columns: Vec<Field> = bronze
        .fields()
        .iter()
        .filter(|f| schema.field_with_name(f.name()).is_err())
        .filter(|f| !to_add.iter().any(|a| a.name() == f.name()))
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    if flow.schema_evolution == SchemaEvolution::AddNewColumns {
        to_add.extend(new_columns.iter().cloned());
    }
    if !to_add.is_empty() {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(to_add.iter().cloned());
        schema = Arc::new(Schema::new(fields));
    }

    // Every silver column (except audit columns) must come from bronze.
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

    let as_deletes = flow
        .apply_as_deletes
        .as_deref()
        .map(|sql| {
            Predicate::compile(
                sql,
                &source_change_schema(&bronze),
                &format!("flow `{flow_name}`: `apply_as_deletes`"),
            )
        })
        .transpose()?;
    let state_schema = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .filter(|f| {
                let n = f.name().as_str();
                Some(n) != audit_update.as_deref() && n != START_AT && n != END_AT
            })
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let filter_predicate = flow
        .filter
        .as_deref()
        .map(|sql| Predicate::compile(sql, &state_schema, &format!("flow `{flow_name}`: `where`")))
        .transpose()?;
    for c in match &flow.update_columns {
        smelt_spec::UpdateColumns::All => &[][..],
        smelt_spec::UpdateColumns::Only(c) | smelt_spec::UpdateColumns::Except(c) => c,
    } {
        if schema.field_with_name(c).is_err() {
            return Err(EngineError::user(
                format!(
                    "flow `{flow_name}`: `column_list` names `{c}`, which is not a column of `{}`",
                    flow.into
                ),
                "list columns of the silver table",
            ));
        }
    }
    let tomb_schema = tombstone_schema(&schema, flow, audit_ingest.as_deref())?;
    // Tombstones follow silver's key and sequence types: after `widen_types` they are
    // widened too (checked every run, so a crash between the two widenings heals).
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
                            "flow `{flow_name}`: column `{}` of tombstone table `{}` is {}, but silver's is {}",
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
                        "flow `{flow_name}`: tombstone table `{}` has no column `{}`: it was written for other keys or sequence columns",
                        tombstones.table(),
                        f.name()
                    ),
                    "if the keys or `sequence_by` changed on purpose, drop the tombstone table and rebuild silver with `smelt run --full-refresh`",
                ));
            }
        }
    }

    let v = source.version();
    let stored = if silver.schema().is_none() {
        None
    } else {
        silver.watermark(&app).await?
    };
    // What to read after, and the watermark to commit.
    let (watermark, watermark_to) = match ctx.replay_after {
        Some(after) => {
            let Some(w) = stored else {
                return Err(EngineError::user(
                    format!(
                        "flow `{flow_name}`: `--since` replays a window into silver `{}`, which no run of this flow has written yet",
                        flow.into
                    ),
                    "run the flow once without `--since`",
                ));
            };
            (Some(after), if after <= w { w.max(v) } else { w })
        }
        None if ctx.full_refresh => (None, v),
        None => (stored, v),
    };
    let mut report = FlowReport {
        flow: flow_name.to_string(),
        kind: "apply".into(),
        from: flow.from.to_string(),
        into: flow.into.to_string(),
        run_id: ctx.run_id.clone(),
        mode: if ctx.replay_after.is_some() {
            "replay"
        } else if ctx.full_refresh && silver.schema().is_some() {
            "rebuild"
        } else if watermark.is_none() {
            "snapshot"
        } else {
            "incremental"
        }
        .to_string(),
        from_version: watermark,
        to_version: v,
        silver_version: silver.version(),
        new_columns: new_columns.iter().map(|f| f.name().clone()).collect(),
        columns_added: to_add.iter().map(|f| f.name().clone()).collect(),
        on_cast_error: match flow.on_cast_error {
            OnCastError::Null => "null",
            OnCastError::Fail => "fail",
            OnCastError::Quarantine => "quarantine",
        }
        .to_string(),
        ..FlowReport::default()
    };
    if let Some(w) = watermark {
        if w >= v && ctx.replay_after.is_some() {
            report.status = "up_to_date".into();
            phases.end("check");
            report.phases_ms = phases.done;
            return Ok(report);
        }
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

    // Memory plan: changes are cast as they stream in. When the cast change set would
    // not fit in its share of the memory limit, it is split by key hash into partitions
    // spilled to local disk (Arrow IPC) and applied one partition at a time; silver
    // commits once at the end either way.
    let partitions = partitions_for(source.bytes_to_read(watermark).await?, ctx.memory_limit);
    report.partitions = partitions;
    reporter.phase(flow_name, "read changes");
    let as_truncates = flow
        .apply_as_truncates
        .as_deref()
        .map(|sql| {
            Predicate::compile(
                sql,
                &source_change_schema(&bronze),
                &format!("flow `{flow_name}`: `apply_as_truncates`"),
            )
        })
        .transpose()?;
    let mut casting = CastPlan::new(&schema, &is_audit, as_deletes, flow.source_deletes);
    casting.as_truncates = as_truncates;
    let cast_sequence: Vec<String> = flow
        .sequence_by
        .iter()
        .map(|s| {
            if s == SEQ_COMMIT_TIMESTAMP {
                COMMIT_TIMESTAMP.to_string()
            } else {
                s.clone()
            }
        })
        .collect();
    casting.sequence = cast_sequence.clone();
    let mut truncates: Vec<RecordBatch> = Vec::new();
    for (name, sql) in &flow.expectations {
        let predicate = Predicate::compile(
            sql,
            &casting.schema,
            &format!("flow `{flow_name}`: expectation `{name}`"),
        )?;
        casting.expectations.push((name.clone(), predicate));
    }
    let mut store = PartitionStore::new(partitions, Arc::clone(&casting.schema))?;
    let mut cast_ms = 0u64;
    let mut first_failure: Option<CastFailure> = None;
    let mut first_violation: Option<String> = None;
    let mut rejects = Rejects::new(&ctx.run_id, flow_name, &flow.from, ctx.run_timestamp_us);
    let mut rows_seen = 0usize;
    let read_started = Instant::now();
    let changes = {
        let report = &mut report;
        let mut sink = |batch: RecordBatch| -> Result<()> {
            let started = Instant::now();
            report.changes_read += batch.num_rows();
            let cast = casting.cast(
                &batch,
                flow,
                rows_seen,
                &mut CastSink {
                    report,
                    first_failure: &mut first_failure,
                    first_violation: &mut first_violation,
                    rejects: &mut rejects,
                    truncates: &mut truncates,
                },
            )?;
            rows_seen += cast.num_rows();
            // A run that will fail only keeps counting failures.
            let failing = (flow.on_cast_error == OnCastError::Fail && first_failure.is_some())
                || first_violation.is_some();
            if !failing {
                store.push(cast, &flow.keys)?;
            }
            cast_ms += started.elapsed().as_millis() as u64;
            Ok(())
        };
        source.read_changes(watermark, &mut sink).await?
    };
    let read_ms = read_started.elapsed().as_millis() as u64;
    phases.add("read", read_ms.saturating_sub(cast_ms));
    phases.add("cast", cast_ms);
    report.files_read = changes.files_read;
    report.bytes_read = changes.bytes_read;
    report.delete_files_ignored = changes.skipped_delete_files;
    tracing::info!(flow = flow_name, after = ?watermark, to = v, rows = report.changes_read, files = changes.files_read, partitions, "read bronze changes");
    if let (OnCastError::Fail, Some(f)) = (flow.on_cast_error, first_failure) {
        let total = report.cast_failures_total();
        return Err(EngineError::Cast {
            flow: flow_name.to_string(),
            source: Box::new(smelt_core::CoreError::CastFailed {
                column: f.column,
                target: f.target,
                value: f.value,
                row: f.row,
                context: format!(
                    " (bronze `{}` version {}, key {}); {total} value(s) failed in all",
                    flow.from, f.version, f.key
                ),
            }),
        });
    }
    if let Some(message) = first_violation {
        let total: usize = report.expectations.values().sum();
        return Err(EngineError::user(
            format!("flow `{flow_name}`: {message}; {total} change(s) failed expectations in all"),
            "fix the change in bronze, or set `on_violation:` to `warn`, `drop` or `quarantine`",
        ));
    }

    // Truncates: the greatest one of this run empties silver as of its sequence, unless an
    // earlier run already truncated through a later one. Changes up to the greatest
    // truncate known are stale.
    let run_truncate = greatest(&truncates)?;
    drop(truncates);
    let stored_truncate = match &run_truncate {
        Some(t) => truncated_through(&*silver, t, flow_name)?,
        None if flow.apply_as_truncates.is_some()
            || silver.property(TRUNCATED_THROUGH).is_some() =>
        {
            // Types of the sequence columns, from an empty cast batch.
            let idx = cast_sequence
                .iter()
                .map(|n| casting.schema.index_of(n))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let like = RecordBatch::new_empty(Arc::clone(&casting.schema)).project(&idx)?;
            truncated_through(&*silver, like.columns(), flow_name)?
        }
        None => None,
    };
    let truncate_now = match (&run_truncate, &stored_truncate) {
        (Some(run), Some(stored)) => smelt_core::apply::newer_than(run, stored, 1)?.value(0),
        (Some(_), None) => true,
        _ => false,
    };
    let stale_through = if truncate_now {
        run_truncate.clone()
    } else {
        stored_truncate
    };
    if truncate_now && !ctx.dry_run {
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
    report.truncated = truncate_now;

    let work = PartitionWork {
        flow,
        schema: &schema,
        state_schema: &state_schema,
        tomb_schema: &tomb_schema,
        filter: filter_predicate.as_ref(),
        audit_ingest: audit_ingest.as_deref(),
        audit_update: audit_update.as_deref(),
        run_timestamp_us: ctx.run_timestamp_us,
        fresh: ctx.full_refresh || truncate_now,
        stale_through: stale_through.as_deref(),
        cast_sequence: &cast_sequence,
    };
    let mut tombstones_staged = false;
    if widen && !ctx.dry_run {
        // Its own commit, before the data: a crash after it leaves a table the DDL matches.
        reporter.phase(flow_name, "widen column types");
        let widened = Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .filter(|f| !to_add.iter().any(|a| a.name() == f.name()))
                .map(|f| f.as_ref().clone())
                .collect::<Vec<_>>(),
        ));
        failpoint("before_widen_commit")?;
        silver.widen(widened, &flow.keys).await?;
        report.types_widened = true;
    }
    if widen_tombstones && !ctx.dry_run {
        tombstones
            .widen(Arc::clone(&tomb_schema), &flow.keys)
            .await?;
        report.types_widened = true;
    }
    // Staged only: a plan sees the new columns (as NULL in stored rows) and writes nothing.
    if !to_add.is_empty() && silver.schema().is_some() {
        silver.add_columns(to_add.clone()).await?;
    }
    // A rebuild (or a truncate) replaces silver and its tombstones whole, in one commit each.
    if (ctx.full_refresh || truncate_now) && !ctx.dry_run {
        if silver.version().is_some() {
            silver.stage_overwrite().await?;
        }
        if tombstones.version().is_some() {
            tombstones.stage_overwrite().await?;
            tombstones_staged = true;
        }
    }
    for p in 0..partitions {
        if partitions > 1 {
            reporter.phase(
                flow_name,
                &format!("apply changes (key partition {} of {partitions})", p + 1),
            );
        } else {
            reporter.phase(flow_name, "apply changes");
        }
        let started = Instant::now();
        let batch = store.take(p)?;
        phases.add("dedupe", started.elapsed().as_millis() as u64);
        let planned = if flow.scd == 2 {
            work.plan_scd2(batch, &*silver, &*tombstones, &mut report, &mut phases)
                .await?
        } else {
            work.plan(
                batch,
                &*silver,
                &*tombstones,
                &mut rejects,
                &mut report,
                &mut phases,
            )
            .await?
        };
        if ctx.dry_run {
            continue;
        }
        let started = Instant::now();
        if planned.rows.num_rows() > 0 || planned.removes.num_rows() > 0 {
            reporter.phase(flow_name, "write silver");
            if silver.schema().is_none() {
                silver.create(Arc::clone(&schema)).await?;
            }
            silver
                .stage(planned.rows, &planned.replaces, &flow.keys)
                .await?;
            if planned.removes.num_rows() > 0 {
                silver.stage_deletes(planned.removes).await?;
            }
        }
        if planned.tombstones.num_rows() > 0 {
            if tombstones.schema().is_none() {
                tombstones.create(Arc::clone(&tomb_schema)).await?;
            }
            tombstones
                .stage(planned.tombstones, &planned.tombstone_replaces, &flow.keys)
                .await?;
            tombstones_staged = true;
        }
        if planned.tombstone_removes.num_rows() > 0 {
            tombstones.stage_deletes(planned.tombstone_removes).await?;
            tombstones_staged = true;
        }
        phases.add("write", started.elapsed().as_millis() as u64);
    }

    report.quarantined = rejects.len();
    if ctx.dry_run {
        report.status = "planned".into();
        report.phases_ms = phases.done;
        return Ok(report);
    }

    let mut watermark_out = Watermark {
        app_id: app,
        version: watermark_to,
        run_id: ctx.run_id.clone(),
        report: None,
        extra: Vec::new(),
    };
    let started = Instant::now();
    // Rejects commit first, then tombstones, then silver with its watermark. A crash in
    // between reruns the range: rejects of versions the rejects table has recorded are
    // not written again.
    if !rejects.is_empty() {
        reporter.phase(flow_name, "write rejects");
        let done = rejects_table.watermark(&watermark_out.app_id).await?;
        let rows = rejects.between(done, watermark_to)?;
        if rows.num_rows() > 0 {
            if rejects_table.schema().is_none() {
                rejects_table.create(rows.schema()).await?;
            }
            let replaces = BooleanArray::from(vec![false; rows.num_rows()]);
            rejects_table.stage(rows, &replaces, &[]).await?;
            failpoint("before_rejects_commit")?;
            rejects_table.commit(&[], &watermark_out).await?;
        }
    }
    // Tombstones commit before silver: a crash before the silver commit reruns the same range,
    // which finds its tombstones written and leaves them as they are (the guard is
    // strict), while a crash after it would lose them.
    if tombstones_staged {
        reporter.phase(flow_name, "commit tombstones");
        failpoint("before_tombstones_commit")?;
        tombstones.commit(&flow.keys, &watermark_out).await?;
    }
    reporter.phase(flow_name, "commit silver");
    if silver.schema().is_none() {
        silver.create(Arc::clone(&schema)).await?;
    }
    failpoint("before_silver_commit")?;
    // The report as of this commit (file counts come after), for the event log.
    report.status = "applied".into();
    watermark_out.report = serde_json::to_string(&report).ok();
    let stats = silver.commit(&flow.keys, &watermark_out).await?;
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
    phases.add("write", started.elapsed().as_millis() as u64);
    if let Some(retention) = flow.tombstone_retention
        && tombstones.version().is_some()
    {
        let started = Instant::now();
        let before = ctx.run_timestamp_us - retention.as_micros().min(i64::MAX as u128) as i64;
        report.tombstones_expired = tombstones.expire(DELETED_AT, before).await?;
        phases.add("expire tombstones", started.elapsed().as_millis() as u64);
    }
    report.phases_ms = phases.done;
    reporter.done(flow_name);
    Ok(report)
}

/// The table property holding the sequence a truncate emptied silver through (JSON array of
/// the sequence values as text); older changes are stale forever after.
pub const TRUNCATED_THROUGH: &str = "smelt.truncatedThrough";

/// The change batch schema: bronze columns, then the change metadata.
fn source_change_schema(bronze: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = bronze.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(smelt_core::change::metadata_fields());
    Arc::new(Schema::new(fields))
}

/// The greatest row (lexicographic over the columns) of `batches`, as one-row arrays.
fn greatest(batches: &[RecordBatch]) -> Result<Option<Vec<ArrayRef>>> {
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let all = arrow::compute::concat_batches(&first.schema(), batches)?;
    let Some(best) = smelt_core::apply::greatest(all.columns())? else {
        return Ok(None);
    };
    Ok(Some(
        all.columns().iter().map(|c| c.slice(best, 1)).collect(),
    ))
}

/// The sequence silver was truncated through, read back from [`TRUNCATED_THROUGH`] into
/// the types of `like` (one-row arrays).
fn truncated_through(
    silver: &dyn SilverTable,
    like: &[ArrayRef],
    flow_name: &str,
) -> Result<Option<Vec<ArrayRef>>> {
    let Some(text) = silver.property(TRUNCATED_THROUGH) else {
        return Ok(None);
    };
    let bad = || {
        EngineError::user(
            format!(
                "flow `{flow_name}`: table property `{TRUNCATED_THROUGH}` of `{}` is not what smelt wrote: {text}",
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

/// Column `name` of a batch the run built itself (a cast change batch): missing is a bug.
fn column(batch: &RecordBatch, name: &str) -> Result<ArrayRef> {
    batch
        .column_by_name(name)
        .cloned()
        .ok_or_else(|| EngineError::Internal(format!("cast batch without `{name}`")))
}

/// The tombstone table's columns: the keys, the sequence columns as silver stores them,
/// and [`DELETED_AT`].
fn tombstone_schema(
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
fn stored_sequence_names(flow: &ApplyFlow, audit_ingest: Option<&str>) -> Vec<String> {
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
            replay_after: None,
            memory_limit: default_memory_limit(),
        }
    }
}

/// Half of the machine's memory (Linux `/proc/meminfo`), or `None` where unknown.
pub fn default_memory_limit() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024 / 2)
}

/// Memory per byte of bronze Parquet when changes are applied in one piece, measured on
/// seed 000's product2: 78 MB of bronze Parquet peaked at 1.37 GiB of RSS (17.6×, runtime
/// and Parquet writers included).
const MEMORY_PER_PARQUET_BYTE: u64 = 16;

/// How many key partitions a change set of `bytes` (bronze Parquet) needs to stay within
/// `limit`. Half the limit goes to the partition being applied; the other half to the
/// bronze row group being decoded, the silver files being rewritten and the runtime.
pub fn partitions_for(bytes: u64, limit: Option<u64>) -> usize {
    let Some(limit) = limit else {
        return 1;
    };
    let need = bytes.saturating_mul(MEMORY_PER_PARQUET_BYTE);
    need.div_ceil((limit / 2).max(1)).clamp(1, 1024) as usize
}

/// The first value that failed to cast, for `on_cast_error: fail`.
struct CastFailure {
    column: String,
    target: String,
    value: String,
    /// Among the run's upserts.
    row: usize,
    version: String,
    key: String,
}

/// Casts bronze change batches to the flow's silver types as they stream in, and marks
/// the deletes among them.
struct CastPlan {
    /// Silver columns (audit columns excepted) in silver types, then `_commit_timestamp`
    /// and [`IS_DELETE`].
    schema: SchemaRef,
    targets: Vec<(String, DataType)>,
    /// `apply_as_deletes`, over the change batch.
    as_deletes: Option<Predicate>,
    source_deletes: SourceDeletes,
    /// `expect:`, over the cast batch.
    expectations: Vec<(String, Predicate)>,
    /// `apply_as_truncates`, over the change batch.
    as_truncates: Option<Predicate>,
    /// The sequence columns in the cast batch.
    sequence: Vec<String>,
}

/// Where [`CastPlan::cast`] reports what it found.
struct CastSink<'a> {
    report: &'a mut FlowReport,
    first_failure: &'a mut Option<CastFailure>,
    /// The first expectation failure under `on_violation: fail`, as a message.
    first_violation: &'a mut Option<String>,
    rejects: &'a mut Rejects,
    /// The sequence columns of every truncate seen.
    truncates: &'a mut Vec<RecordBatch>,
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

    /// The changes of `batch` that apply — inserts and update post-images, and with
    /// `source_deletes: apply` deletes; the rest is counted as ignored — cast, with
    /// [`IS_DELETE`] set for deletes and for rows matching `apply_as_deletes`. Failures are
    /// counted per column among the upserts (a delete needs only its key and sequence);
    /// the first one is kept.
    fn cast(
        &self,
        batch: &RecordBatch,
        flow: &ApplyFlow,
        offset: usize,
        sink: &mut CastSink<'_>,
    ) -> Result<RecordBatch> {
        let report = &mut *sink.report;
        let first = &mut *sink.first_failure;
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
        if self.source_deletes == SourceDeletes::Apply {
            let source_delete = is(DELETE)?;
            keep = arrow::compute::or(&keep, &source_delete)?;
            delete = arrow::compute::or(&delete, &source_delete)?;
        }
        // Filters copy every column: skip them when they keep everything (append-only bronze).
        let (batch, delete) = if keep.true_count() == batch.num_rows() {
            (batch.clone(), delete)
        } else {
            (
                filter_record_batch(batch, &keep)?,
                filter(&delete, &keep)?.as_boolean().clone(),
            )
        };
        report.ignored += keep.len() - batch.num_rows();
        // Truncates are upserts matching `apply_as_truncates`; like deletes they need only
        // their sequence.
        let truncate = match &self.as_truncates {
            Some(p) => arrow::compute::and_not(&p.evaluate(&batch)?, &delete)?,
            None => BooleanArray::from(vec![false; batch.num_rows()]),
        };
        let not_upsert = arrow::compute::or(&delete, &truncate)?;
        let raw = |name: &str| -> Result<&ArrayRef> {
            batch
                .column_by_name(name)
                .ok_or_else(|| EngineError::Internal(format!("change batch without `{name}`")))
        };
        let inputs: Vec<(ArrayRef, DataType)> = self
            .targets
            .iter()
            .map(|(n, t)| Ok((Arc::clone(raw(n)?), t.clone())))
            .collect::<Result<_>>()?;
        let outputs = cast_columns(&inputs, flow.tz.as_deref())?;
        let mut columns = Vec::with_capacity(self.targets.len() + 1);
        // Upserts left out of the apply: quarantined or dropped.
        let mut quarantined_casts = vec![false; batch.num_rows()];
        let key_of = |row: usize| -> Result<String> {
            Ok(flow
                .keys
                .iter()
                .map(|k| Ok(format!("{k}={}", array_value_to_string(raw(k)?, row)?)))
                .collect::<Result<Vec<_>>>()?
                .join(", "))
        };
        for ((name, target), out) in self.targets.iter().zip(outputs) {
            let failed: Vec<usize> = if not_upsert.true_count() == 0 {
                out.failed_rows
            } else {
                out.failed_rows
                    .into_iter()
                    .filter(|&r| !not_upsert.value(r))
                    .collect()
            };
            if !failed.is_empty() && flow.on_cast_error == OnCastError::Quarantine {
                let rows = UInt32Array::from_iter_values(failed.iter().map(|&r| r as u32));
                let target_type = type_name(target);
                sink.rejects.add(
                    &batch,
                    &rows,
                    &Reason {
                        rule: "cast",
                        column: Some(name),
                        target_type: Some(&target_type),
                        reason: &format!("the value cannot be cast to {target_type}"),
                    },
                )?;
                for &r in &failed {
                    quarantined_casts[r] = true;
                }
            }
            if !failed.is_empty() {
                *report.cast_failures.entry(name.clone()).or_default() += failed.len();
                if first.is_none() {
                    let row = failed[0];
                    let key = key_of(row)?;
                    *first = Some(CastFailure {
                        column: name.clone(),
                        target: type_name(target),
                        value: array_value_to_string(raw(name)?, row)?,
                        row: offset + row,
                        version: array_value_to_string(raw(COMMIT_VERSION)?, row)?,
                        key,
                    });
                }
            }
            columns.push(if out.array.data_type() == target {
                out.array
            } else {
                arrow::compute::cast(&out.array, target)?
            });
        }
        columns.push(arrow::compute::cast(
            raw(COMMIT_TIMESTAMP)?,
            &timestamp_utc(),
        )?);
        columns.push(arrow::compute::cast(
            raw(COMMIT_VERSION)?,
            &DataType::Int64,
        )?);
        let upsert = arrow::compute::not(&not_upsert)?;
        columns.push(Arc::new(delete));
        let cast = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let mut left_out = BooleanArray::from(quarantined_casts);
        if truncate.true_count() > 0 {
            let idx = self
                .sequence
                .iter()
                .map(|n| self.schema.index_of(n))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            sink.truncates
                .push(filter_record_batch(&cast.project(&idx)?, &truncate)?);
            report.truncates += truncate.true_count();
            left_out = arrow::compute::or(&left_out, &truncate)?;
        }
        let row_numbers = UInt32Array::from_iter_values(0..cast.num_rows() as u32);

        // Expectations hold for upserts (a delete carries only its key and sequence).
        for (name, predicate) in &self.expectations {
            let holds = predicate.evaluate(&cast)?;
            let violated =
                arrow::compute::and_not(&arrow::compute::and_not(&upsert, &holds)?, &left_out)?;
            let count = violated.true_count();
            if count == 0 {
                continue;
            }
            *report.expectations.entry(name.clone()).or_default() += count;
            let rows = filter(&row_numbers, &violated)?;
            let rows = rows.as_primitive::<arrow::datatypes::UInt32Type>();
            match flow.on_violation {
                OnViolation::Warn => {}
                OnViolation::Drop => {
                    report.dropped += count;
                    left_out = arrow::compute::or(&left_out, &violated)?;
                }
                OnViolation::Quarantine => {
                    sink.rejects.add(
                        &batch,
                        rows,
                        &Reason {
                            rule: name,
                            column: None,
                            target_type: None,
                            reason: &format!("expectation `{name}` failed: {}", predicate.text()),
                        },
                    )?;
                    left_out = arrow::compute::or(&left_out, &violated)?;
                }
                OnViolation::Fail => {
                    if sink.first_violation.is_none() {
                        let r = rows.value(0) as usize;
                        let key = key_of(r)?;
                        *sink.first_violation = Some(format!(
                            "expectation `{name}` (`{}`) failed for the change of key {key} in bronze `{}` version {}",
                            predicate.text(),
                            flow.from,
                            array_value_to_string(raw(COMMIT_VERSION)?, r)?
                        ));
                    }
                }
            }
        }
        if left_out.true_count() > 0 {
            return Ok(filter_record_batch(
                &cast,
                &arrow::compute::not(&left_out)?,
            )?);
        }
        Ok(cast)
    }
}

/// Cast changes waiting to be applied: in memory, or split by key hash into partitions
/// spilled to local disk as Arrow IPC files.
enum PartitionStore {
    Memory {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    Spill {
        schema: SchemaRef,
        dir: tempfile::TempDir,
        writers: Vec<Option<FileWriter<BufWriter<File>>>>,
    },
}

fn spill_error(dir: &Path, e: impl std::error::Error + Send + Sync + 'static) -> EngineError {
    EngineError::Storage {
        context: format!(
            "spilling changes to `{}` (set TMPDIR to a disk with room, or raise --memory-limit)",
            dir.display()
        ),
        source: Box::new(e),
    }
}

impl PartitionStore {
    fn new(partitions: usize, schema: SchemaRef) -> Result<Self> {
        if partitions <= 1 {
            return Ok(Self::Memory {
                schema,
                batches: Vec::new(),
            });
        }
        let dir = tempfile::Builder::new()
            .prefix("smelt-spill-")
            .tempdir()
            .map_err(|e| spill_error(&std::env::temp_dir(), e))?;
        Ok(Self::Spill {
            schema,
            dir,
            writers: (0..partitions).map(|_| None).collect(),
        })
    }

    fn push(&mut self, batch: RecordBatch, keys: &[String]) -> Result<()> {
        match self {
            Self::Memory { batches, .. } => batches.push(batch),
            Self::Spill {
                schema,
                dir,
                writers,
            } => {
                let key_arrays: Vec<ArrayRef> = keys
                    .iter()
                    .map(|k| {
                        batch.column_by_name(k).cloned().ok_or_else(|| {
                            EngineError::Internal(format!("cast batch without key `{k}`"))
                        })
                    })
                    .collect::<Result<_>>()?;
                let parts = partition_of(&key_arrays, writers.len())?;
                // Group rows by partition with one stable counting sort and one take; each
                // partition is then a zero-copy slice, in input order.
                let mut starts = vec![0usize; writers.len() + 1];
                for &p in parts.values() {
                    starts[p as usize + 1] += 1;
                }
                for p in 0..writers.len() {
                    starts[p + 1] += starts[p];
                }
                let mut next = starts.clone();
                let mut order = vec![0u32; parts.len()];
                for (row, &p) in parts.values().iter().enumerate() {
                    order[next[p as usize]] = row as u32;
                    next[p as usize] += 1;
                }
                let grouped = arrow::compute::take_record_batch(&batch, &UInt32Array::from(order))?;
                for (p, writer) in writers.iter_mut().enumerate() {
                    let (start, end) = (starts[p], starts[p + 1]);
                    if start == end {
                        continue;
                    }
                    let part = grouped.slice(start, end - start);
                    if writer.is_none() {
                        let path = dir.path().join(format!("part-{p}.arrow"));
                        let file = File::create(&path).map_err(|e| spill_error(dir.path(), e))?;
                        *writer = Some(FileWriter::try_new(BufWriter::new(file), schema)?);
                    }
                    writer
                        .as_mut()
                        .expect("just set")
                        .write(&part)
                        .map_err(|e| spill_error(dir.path(), e))?;
                }
            }
        }
        Ok(())
    }

    /// The changes of partition `p`, in input order, as one batch.
    fn take(&mut self, p: usize) -> Result<RecordBatch> {
        match self {
            Self::Memory { schema, batches } => concat_freeing(schema, std::mem::take(batches)),
            Self::Spill {
                schema,
                dir,
                writers,
            } => {
                let Some(mut writer) = writers[p].take() else {
                    return Ok(RecordBatch::new_empty(Arc::clone(schema)));
                };
                writer.finish().map_err(|e| spill_error(dir.path(), e))?;
                drop(writer);
                let path = dir.path().join(format!("part-{p}.arrow"));
                let file = File::open(&path).map_err(|e| spill_error(dir.path(), e))?;
                let reader = FileReader::try_new(BufReader::new(file), None)
                    .map_err(|e| spill_error(dir.path(), e))?;
                let batches = reader
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| spill_error(dir.path(), e))?;
                let _ = std::fs::remove_file(&path);
                concat_freeing(schema, batches)
            }
        }
    }
}

/// Concatenates `batches` column by column, freeing each column of the inputs once it is
/// copied: the peak is the inputs plus one column, not twice the inputs.
fn concat_freeing(schema: &SchemaRef, batches: Vec<RecordBatch>) -> Result<RecordBatch> {
    if batches.len() == 1 {
        return Ok(batches.into_iter().next().expect("one batch"));
    }
    if batches.is_empty() {
        return Ok(RecordBatch::new_empty(Arc::clone(schema)));
    }
    let mut inputs: Vec<Vec<ArrayRef>> =
        batches.into_iter().map(|b| b.columns().to_vec()).collect();
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (i, field) in schema.fields().iter().enumerate() {
        let empty = arrow::array::new_empty_array(field.data_type());
        let parts: Vec<ArrayRef> = inputs
            .iter_mut()
            .map(|b| std::mem::replace(&mut b[i], Arc::clone(&empty)))
            .collect();
        let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
        columns.push(arrow::compute::concat(&refs)?);
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// Applies one partition of cast changes: latest per key, guard against silver and the
/// tombstones, the rows to write and delete.
struct PartitionWork<'a> {
    flow: &'a ApplyFlow,
    schema: &'a SchemaRef,
    /// Silver columns without the update audit column: what `where` reads.
    state_schema: &'a SchemaRef,
    tomb_schema: &'a SchemaRef,
    filter: Option<&'a Predicate>,
    audit_ingest: Option<&'a str>,
    audit_update: Option<&'a str>,
    run_timestamp_us: i64,
    /// A rebuild or a truncate: what silver and the tombstones store is not looked at.
    fresh: bool,
    /// Changes with a sequence up to this one (a truncate's) are stale.
    stale_through: Option<&'a [ArrayRef]>,
    /// The sequence columns of the cast batch.
    cast_sequence: &'a [String],
}

/// What one partition writes.
struct Planned {
    /// Rows to write (silver schema).
    rows: RecordBatch,
    /// Per row: it replaces a stored row.
    replaces: BooleanArray,
    /// Keys of stored rows to delete.
    removes: RecordBatch,
    /// Tombstones to write (tombstone schema).
    tombstones: RecordBatch,
    /// Per tombstone: it replaces a stored tombstone.
    tombstone_replaces: BooleanArray,
    /// Keys whose stored tombstones are deleted (SCD2 stages a key's tombstones whole).
    tombstone_removes: RecordBatch,
}

/// The stored rows of `table` for `keys`, lined up with them: `matched[i]` and the
/// `wanted` columns (NULL where unmatched). No table: nothing matches.
async fn lookup_aligned(
    table: Option<&dyn SilverTable>,
    table_schema: &SchemaRef,
    keys: &[String],
    new_keys: &[ArrayRef],
    wanted: &[String],
) -> Result<(BooleanArray, HashMap<String, ArrayRef>)> {
    let m = new_keys.first().map_or(0, |k| k.len());
    if let Some(table) = table.filter(|t| t.version().is_some())
        && m > 0
    {
        let key_schema = Arc::new(Schema::new(
            keys.iter()
                .map(|k| Ok(table_schema.field_with_name(k)?.clone().with_nullable(true)))
                .collect::<Result<Vec<_>>>()?,
        ));
        let keys_batch = RecordBatch::try_new(key_schema, new_keys.to_vec())?;
        let found = table.lookup(keys_batch, wanted).await?;
        align(new_keys, &found, keys, wanted, table_schema)
    } else {
        let empty: HashMap<String, ArrayRef> = wanted
            .iter()
            .map(|c| {
                Ok((
                    c.clone(),
                    arrow::array::new_null_array(table_schema.field_with_name(c)?.data_type(), m),
                ))
            })
            .collect::<Result<_>>()?;
        Ok((BooleanArray::from(vec![false; m]), empty))
    }
}

impl PartitionWork<'_> {
    /// The rows to write and delete, and the tombstones to write.
    /// `where` over the keys' latest state (`value_of` gives each state column): `None`
    /// without one, else `delete` with the failing keys added, and the failing keys that
    /// were not deletes already (counted as filtered).
    fn filter_out(
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

    async fn plan(
        &self,
        batch: RecordBatch,
        silver: &dyn SilverTable,
        tombstones: &dyn SilverTable,
        rejects: &mut Rejects,
        report: &mut FlowReport,
        phases: &mut Phases,
    ) -> Result<Planned> {
        let started = Instant::now();
        let flow = self.flow;
        let schema = self.schema;
        // Changes a truncate came after are stale.
        let batch = match self.stale_through {
            Some(through) if batch.num_rows() > 0 => {
                let n = batch.num_rows();
                let seq: Vec<ArrayRef> = self
                    .cast_sequence
                    .iter()
                    .map(|c| column(&batch, c))
                    .collect::<Result<_>>()?;
                let zeros = UInt32Array::from(vec![0u32; n]);
                let bound: Vec<ArrayRef> = through
                    .iter()
                    .map(|t| take(t.as_ref(), &zeros, None))
                    .collect::<std::result::Result<_, _>>()?;
                let after = smelt_core::apply::newer_than(&seq, &bound, n)?;
                report.stale += n - after.true_count();
                if after.true_count() == n {
                    batch
                } else {
                    filter_record_batch(&batch, &after)?
                }
            }
            _ => batch,
        };
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
            let latest = if n == 0 {
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
                                rule: "sequence_conflict",
                                column: None,
                                target_type: None,
                                reason: "changes of one key share the greatest sequence but differ; none was applied",
                            },
                        )?;
                        winners = filter(&winners, &arrow::compute::not(&conflicts.conflicted)?)?
                            .as_primitive::<arrow::datatypes::UInt32Type>()
                            .clone();
                    }
                    OnSequenceConflict::Fail => {
                        return Err(EngineError::user(
                            format!(
                                "flow `{}`: changes of key {} share the greatest sequence ({}) but differ; {conflicted} key(s) conflict in all",
                                report.flow,
                                describe(&flow.keys, &key_arrays)?,
                                describe(&flow.sequence_by, &seq_arrays)?,
                            ),
                            "add a column to `sequence_by` that orders them, or set `on_sequence_conflict: last` (bronze order wins) or `quarantine`",
                        ));
                    }
                }
            }

            // NULL in a NOT NULL key column cannot be stored: reject (counted), never
            // half-write.
            let mut keep = BooleanArray::from(vec![true; winners.len()]);
            for (k, array) in flow.keys.iter().zip(&key_arrays) {
                let field = schema.field_with_name(k)?;
                if !field.is_nullable() {
                    let valid = take(&arrow::compute::is_not_null(array)?, &winners, None)?;
                    keep = arrow::compute::and(&keep, valid.as_boolean())?;
                }
            }
            report.rejected += winners.len() - keep.true_count();
            filter(&winners, &keep)?
                .as_primitive::<arrow::datatypes::UInt32Type>()
                .clone()
        };
        // Taking every row in order is the identity (a first load without duplicates): no copy.
        let batch = if winners.len() == n {
            batch
        } else {
            let all = batch;
            arrow::compute::take_record_batch(&all, &winners)?
        };
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
        let mut wanted: Vec<String> = flow.keys.clone();
        for c in stored_seq_names
            .iter()
            .chain(&data_names)
            .chain(self.audit_update.map(str::to_string).iter())
        {
            if !wanted.contains(c) {
                wanted.push(c.clone());
            }
        }
        let new_keys: Vec<ArrayRef> = flow.keys.iter().map(|k| col(k)).collect::<Result<_>>()?;
        let (silver, tombstones) = if self.fresh {
            (None, None)
        } else {
            (Some(silver), Some(tombstones))
        };
        let (matched, stored) =
            lookup_aligned(silver, schema, &flow.keys, &new_keys, &wanted).await?;
        let tomb_wanted: Vec<String> = self
            .tomb_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .filter(|n| n != DELETED_AT)
            .collect();
        let (tomb_matched, tomb_stored) = lookup_aligned(
            tombstones,
            self.tomb_schema,
            &flow.keys,
            &new_keys,
            &tomb_wanted,
        )
        .await?;
        let tomb_seq: Vec<ArrayRef> = stored_seq_names
            .iter()
            .map(|c| Arc::clone(&tomb_stored[c]))
            .collect();
        let stored_seq: Vec<ArrayRef> = stored_seq_names
            .iter()
            .map(|c| Arc::clone(&stored[c]))
            .collect();
        let raw_data: Vec<ArrayRef> = data_names.iter().map(|c| col(c)).collect::<Result<_>>()?;
        let stored_data: Vec<ArrayRef> =
            data_names.iter().map(|c| Arc::clone(&stored[c])).collect();
        let updates: Vec<bool> = data_names
            .iter()
            .map(|c| flow.update_columns.updates(c))
            .collect();
        let new_data = merge_updates(
            &matched,
            &raw_data,
            &stored_data,
            &updates,
            flow.ignore_null_updates,
        )?;
        drop(raw_data);
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

        let plan = plan_scd1(&Scd1Input {
            matched: &matched,
            new_sequence: &new_seq,
            stored_sequence: &stored_seq,
            new_data: &new_data,
            stored_data: &stored_data,
            delete: Some(&delete),
            tombstone: Some((&tomb_matched, &tomb_seq)),
        })?;
        report.inserted += plan.counts.inserted;
        report.updated += plan.counts.updated;
        report.unchanged += plan.counts.unchanged;
        report.deleted += plan.counts.deleted;
        report.stale += plan.counts.stale;
        report.tombstones_written += plan.tombstone.true_count();
        // Filtered out: upserts that fail `where` and get past the guard (a stale one is
        // counted as stale only).
        if let Some(filtered) = filtered {
            let acted = arrow::compute::or(&plan.remove, &plan.tombstone)?;
            report.filtered += arrow::compute::and(&filtered, &acted)?.true_count();
        }

        // The rows to write, in silver column order.
        let run_ts: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![self.run_timestamp_us; m]).with_timezone("UTC"),
        );
        let conform = |array: ArrayRef, f: &Field| -> Result<ArrayRef> {
            Ok(if array.data_type() == f.data_type() {
                array
            } else {
                arrow::compute::cast(&array, f.data_type())?
            })
        };
        let mut columns = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            let array: ArrayRef = if Some(f.name().as_str()) == self.audit_update {
                if plan.changed.true_count() == m {
                    Arc::clone(&run_ts)
                } else {
                    zip(&plan.changed, &run_ts, &stored[f.name()])?
                }
            } else {
                value_of(f.name())?
            };
            columns.push(conform(array, f)?);
        }
        let removes = {
            let keys = RecordBatch::try_new(
                Arc::new(Schema::new(
                    flow.keys
                        .iter()
                        .map(|k| Ok(schema.field_with_name(k)?.clone()))
                        .collect::<Result<Vec<_>>>()?,
                )),
                new_keys.clone(),
            )?;
            filter_record_batch(&keys, &plan.remove)?
        };
        let (tombstones, tombstone_replaces) = if plan.tombstone.true_count() == 0 {
            (
                RecordBatch::new_empty(Arc::clone(self.tomb_schema)),
                BooleanArray::from(Vec::<bool>::new()),
            )
        } else {
            let mut tomb_columns = Vec::new();
            for f in self.tomb_schema.fields() {
                let array = if f.name() == DELETED_AT {
                    Arc::clone(&run_ts)
                } else if let Some(i) = stored_seq_names.iter().position(|s| s == f.name()) {
                    Arc::clone(&new_seq[i])
                } else {
                    col(f.name())?
                };
                tomb_columns.push(conform(array, f)?);
            }
            let all = RecordBatch::try_new(Arc::clone(self.tomb_schema), tomb_columns)?;
            (
                filter_record_batch(&all, &plan.tombstone)?,
                filter(&tomb_matched, &plan.tombstone)?.as_boolean().clone(),
            )
        };
        // Free what only the plan needed before the filtered copy below.
        drop((stored, stored_seq, stored_data, new_data, new_seq, batch));
        let rows = RecordBatch::try_new(Arc::clone(schema), columns)?;
        let (rows, replaces) = if plan.write.true_count() == rows.num_rows() {
            (rows, matched)
        } else {
            let all = rows;
            (
                filter_record_batch(&all, &plan.write)?,
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
