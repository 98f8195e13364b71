//! The rejects table of an apply flow on Spark (`<silver>__rejects`): its columns and the
//! statements that create it and write a run's quarantined changes.

use smelt_rules::tables;
use smelt_spec::{ApplyFlow, OnCastError, OnViolation};

use super::shape::Shape;
use crate::delta::ddl::create_table;
use crate::sql::{ident, string_literal};
use crate::views::CHANGES;

/// The rejects table's `CREATE TABLE IF NOT EXISTS` (no change feed unless a flow reads
/// it: `feed`).
pub(crate) fn create_rejects(table: &str, feed: bool) -> String {
    let cols = crate::sql::side_table(&smelt_rules::tables::REJECTS_COLUMNS);
    create_table(table, &cols, feed)
}

/// Who the rejects rows of a run are from.
pub(crate) struct RejectsOf<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) flow: &'a str,
    pub(crate) source: &'a str,
    pub(crate) run_us: i64,
}

/// The rejects rows, with the raw row as JSON (bronze's columns, NULLs written): under
/// `on_cast_error: quarantine` one per upsert and column that does not cast, with the raw
/// value; under `on_violation: quarantine` one per change and expectation it fails (the
/// first only, as it is left out then).
pub(crate) fn insert_rejects(
    table: &str,
    spec: &ApplyFlow,
    shape: &Shape,
    bronze_columns: &[String],
    of: &RejectsOf<'_>,
) -> String {
    let fields: Vec<String> = bronze_columns
        .iter()
        .map(|c| format!("{}, {}", string_literal(c), ident(c)))
        .collect();
    let raw_row = format!(
        "to_json(named_struct({}), map('ignoreNullFields', 'false'))",
        fields.join(", ")
    );
    let from = |rule: String,
                column: String,
                raw: String,
                ty: String,
                reason: String,
                cond: String| {
        format!(
            "SELECT {}, {}, {}, _commit_version, _commit_timestamp, {rule}, {column}, {raw}, {ty}, {reason}, {raw_row}, timestamp_micros({}L) \
             FROM {CHANGES} WHERE {cond}",
            string_literal(of.run_id),
            string_literal(of.flow),
            string_literal(of.source),
            of.run_us,
        )
    };
    let null = || "CAST(NULL AS STRING)".to_string();
    let casts = spec.on_cast_error == OnCastError::Quarantine;
    let mut parts: Vec<String> = shape
        .cast_columns()
        .filter(|_| casts)
        .filter(|&i| shape.silver.columns[i].ty != smelt_spec::ColumnType::String)
        .map(|i| {
            let c = &shape.silver.columns[i];
            let ty = c.ty.to_string();
            from(
                string_literal(tables::RULE_CAST),
                string_literal(&c.name),
                format!("CAST({} AS STRING)", ident(&c.name)),
                string_literal(&ty),
                string_literal(&tables::cast_reason(&ty)),
                format!("__kind = 'upsert' AND __f{i}"),
            )
        })
        .collect();
    if spec.on_violation == OnViolation::Quarantine {
        for (j, (name, pred)) in spec.expectations.iter().enumerate() {
            parts.push(from(
                string_literal(name),
                null(),
                null(),
                null(),
                string_literal(&tables::expectation_reason(name, pred)),
                format!("__x{j}"),
            ));
        }
    }
    format!("INSERT INTO {table} {}", parts.join(" UNION ALL "))
}
