//! Silver's schema as a run writes it ([`silver_schema`]), and the checks of a flow against
//! it and bronze before anything is read: SCD2 columns, schema drift (bronze columns silver
//! lacks), every silver column from bronze, the keys, `column_list`.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use smelt_spec::{ApplyFlow, SchemaEvolution, did_you_mean};
use smelt_spec::{END_AT, START_AT};

use super::cast::source_change_schema;
use super::is_audit;
use crate::ports::LakeTable;
use crate::predicate::Predicate;
use crate::schema::{arrow_schema, is_widening, type_name};
use crate::{EngineError, Result};

/// The silver schema the flow writes and how the table must change to get there.
pub struct SilverSchema {
    /// The schema (wider types applied; columns to add not yet).
    pub schema: SchemaRef,
    /// DDL columns the table lacks, to add (`schema_evolution: add_new_columns`).
    pub missing: Vec<Field>,
    /// True when some column gets a wider type (`widen_types`).
    pub widen: bool,
}

/// The silver schema the flow writes: the existing table's (`existing`, `None` when silver
/// does not exist yet), checked against the DDL, or the DDL's. With `schema_evolution:
/// add_new_columns`, DDL columns the table lacks are to be added; with `widen_types`, DDL
/// types wider than the table's replace them.
pub fn silver_schema(flow: &ApplyFlow, existing: Option<SchemaRef>) -> Result<SilverSchema> {
    let declared = flow.silver.as_ref().map(arrow_schema);
    let mut missing = Vec::new();
    let mut widened: Vec<Field> = Vec::new();
    match (existing, declared) {
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
                                "column `{}` of `{}` is {} in the table but {} in {}",
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
                                "column `{}` is declared but missing from the existing table `{}`",
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

/// Whether the table's type `a` and the DDL's `b` store the same values: the string kinds,
/// the binary kinds, and timestamps with a time zone are alike.
pub(super) fn same_type(a: &DataType, b: &DataType) -> bool {
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

/// Silver's schema as one run writes it, checked against the flow and bronze, and the
/// flow's predicates compiled.
pub(super) struct FlowSchema {
    /// The schema: wider types applied, columns to add appended.
    pub(super) schema: SchemaRef,
    /// Columns to add to silver in this run: DDL columns the table lacks and, with
    /// `schema_evolution: add_new_columns`, bronze columns it lacks.
    pub(super) to_add: Vec<Field>,
    /// True when some column gets a wider type (`widen_types`).
    pub(super) widen: bool,
    /// Bronze columns silver lacks (schema drift), reported.
    pub(super) new_columns: Vec<Field>,
    /// `apply_as_deletes`, over the change batch.
    pub(super) as_deletes: Option<Predicate>,
    /// Silver columns without the update audit column and the SCD2 bounds: what `where`
    /// reads.
    pub(super) state_schema: SchemaRef,
    /// `where`, over `state_schema`.
    pub(super) filter: Option<Predicate>,
}

/// Resolves the schema one run of `flow` writes ([`silver_schema`] plus schema drift) and
/// checks the flow against it and `bronze` (the source's columns): SCD2 columns, every
/// silver column from bronze, the keys, `column_list`; compiles `apply_as_deletes` and
/// `where`. Fails with the first problem.
pub(super) fn resolve_schema(
    flow: &ApplyFlow,
    silver: &dyn LakeTable,
    bronze: &SchemaRef,
) -> Result<FlowSchema> {
    let (resolved, mut problems) = resolve_schema_all(flow, silver, bronze);
    match resolved {
        Some(resolved) if problems.is_empty() => Ok(resolved),
        _ => Err(problems.remove(0)),
    }
}

/// Silver's columns as one run writes them, checked against the flow and bronze: what
/// either engine derives before it reads a change (DESIGN §4, schema drift).
pub struct Drift {
    /// The schema: wider types applied, columns to add appended.
    pub schema: SchemaRef,
    /// Columns to add to silver in this run: DDL columns the table lacks and, with
    /// `schema_evolution: add_new_columns`, bronze columns it lacks.
    pub to_add: Vec<Field>,
    /// True when some column gets a wider type (`widen_types`).
    pub widen: bool,
    /// Bronze columns silver lacks (schema drift), reported.
    pub new_columns: Vec<Field>,
}

/// The schema one run of `flow` writes, from silver's (`existing`, `None` before its first
/// run) and bronze's, with every problem found in the order a run meets them: the DDL
/// against the table, SCD2 columns, schema drift, every silver column from bronze, the keys,
/// `column_list`. The schema is there unless the DDL and the table disagree (problems or
/// not: the flow's predicates are still checked against it).
pub fn drift(
    flow: &ApplyFlow,
    existing: Option<SchemaRef>,
    bronze: &SchemaRef,
) -> (Option<Drift>, Vec<EngineError>) {
    let mut problems = Vec::new();
    let SilverSchema {
        mut schema,
        missing: mut to_add,
        widen,
    } = match silver_schema(flow, existing) {
        Ok(s) => s,
        Err(e) => return (None, vec![e]),
    };
    if flow.scd == 2 {
        for c in [START_AT, END_AT] {
            if schema.field_with_name(c).is_err() {
                problems.push(EngineError::user(
                    format!(
                        "`scd: 2` needs column `{c}` in `{}`, which has none",
                        flow.into
                    ),
                    "the table was created for SCD type 1; write the history to a new table",
                ));
            }
        }
    }

    // Schema drift: bronze columns silver lacks are reported, and added on request (with
    // DDL columns the table lacks) in this run's commit.
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
        if is_audit(flow, f.name()) || bronze.field_with_name(f.name()).is_ok() {
            continue;
        }
        let hint = match did_you_mean(f.name(), bronze_names.iter().copied()) {
            Some(near) => format!(
                "bronze has `{near}`: rename the silver column, or add `{}` to bronze",
                f.name()
            ),
            None => format!("bronze columns are: {}", bronze_names.join(", ")),
        };
        problems.push(EngineError::user(
            format!(
                "silver column `{}` of `{}` is missing from bronze table `{}`",
                f.name(),
                flow.into,
                flow.from
            ),
            hint,
        ));
    }
    for k in &flow.keys {
        if schema.field_with_name(k).is_err() {
            problems.push(EngineError::user(
                format!("key column `{k}` is not a column of `{}`", flow.into),
                match did_you_mean(k, schema.fields().iter().map(|f| f.name().as_str())) {
                    Some(near) => format!("did you mean `{near}`?"),
                    None => "set `keys:` to columns of the silver table".to_string(),
                },
            ));
        }
    }

    for c in match &flow.update_columns {
        smelt_spec::UpdateColumns::All => &[][..],
        smelt_spec::UpdateColumns::Only(c) | smelt_spec::UpdateColumns::Except(c) => c,
    } {
        if schema.field_with_name(c).is_err() {
            problems.push(EngineError::user(
                format!(
                    "`column_list` names `{c}`, which is not a column of `{}`",
                    flow.into
                ),
                "list columns of the silver table",
            ));
        }
    }
    let drift = Drift {
        schema,
        to_add,
        widen,
        new_columns,
    };
    (Some(drift), problems)
}

/// [`resolve_schema`] with every problem found, in the order a run meets them; the schema
/// when there are none.
pub(super) fn resolve_schema_all(
    flow: &ApplyFlow,
    silver: &dyn LakeTable,
    bronze: &SchemaRef,
) -> (Option<FlowSchema>, Vec<EngineError>) {
    let (drift, mut problems) = drift(flow, silver.schema(), bronze);
    let Some(Drift {
        schema,
        to_add,
        widen,
        new_columns,
    }) = drift
    else {
        return (None, problems);
    };
    let as_deletes = flow.apply_as_deletes.as_deref().and_then(|sql| {
        Predicate::compile(sql, &source_change_schema(bronze), "`apply_as_deletes`")
            .map_err(|e| problems.push(e))
            .ok()
    });
    // What `where` sees (smelt_rules::predicate::state_scope), typed as silver.
    let sees = smelt_rules::predicate::state_scope(
        flow,
        schema.fields().iter().map(|f| f.name().as_str()),
    );
    let state_schema = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .filter(|f| sees.contains(f.name()))
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let filter_predicate = flow.filter.as_deref().and_then(|sql| {
        Predicate::compile(sql, &state_schema, "`where`")
            .map_err(|e| problems.push(e))
            .ok()
    });
    let resolved = problems.is_empty().then_some(FlowSchema {
        schema,
        to_add,
        widen,
        new_columns,
        as_deletes,
        state_schema,
        filter: filter_predicate,
    });
    (resolved, problems)
}
