//! The errors that stop a run when the flow says `fail` (`on_cast_error`, `on_violation`,
//! `on_sequence_conflict`): each names the first offending change — read back from the
//! cluster's caches — its key and bronze version, and how many there are in all, in the
//! embedded engine's words.

use std::collections::BTreeMap;

use smelt_engine::EngineError;
use smelt_spec::ApplyFlow;

use smelt_rules::order::read_order;

use super::scd1::latest;
use super::shape::{Shape, key_texts};
use crate::client::Rows;
use crate::session::Session;
use crate::sql::order_by;
use crate::views::CHANGES;

/// `on_cast_error: fail`: the first value of the first failing column that does not cast.
pub(super) async fn cast(
    s: &Session<'_>,
    spec: &ApplyFlow,
    shape: &Shape,
    failures: &BTreeMap<String, usize>,
) -> EngineError {
    let i = shape
        .cast_columns()
        .find(|&i| failures.contains_key(&shape.silver.columns[i].name))
        .unwrap_or(0);
    let column = &shape.silver.columns[i];
    let total: usize = failures.values().sum();
    let sql = first_failure(shape, i);
    let first = match s.read("find the first value that does not cast", sql).await {
        Ok(rows) => rows,
        Err(e) => return e,
    };
    let raw = text(&first, "raw").unwrap_or_default();
    EngineError::Cast {
        source: Box::new(smelt_core::CoreError::CastFailed {
            column: column.name.clone(),
            target: column.ty.to_string(),
            value: raw,
            context: format!(
                " (bronze `{}` version {}, key {}); {total} value(s) failed in all",
                spec.from,
                version(&first),
                keys(shape, &first)
            ),
        }),
    }
}

/// `on_violation: fail`: the first expectation (in the file's order) that changes fail, and
/// the first change failing it.
pub(super) async fn violation(
    s: &Session<'_>,
    spec: &ApplyFlow,
    shape: &Shape,
    failed: &BTreeMap<String, usize>,
) -> EngineError {
    let (j, (name, pred)) = spec
        .expectations
        .iter()
        .enumerate()
        .find(|(_, (name, _))| failed.contains_key(name))
        .unwrap_or((0, &spec.expectations[0]));
    let sql = first_violation(shape, j);
    let first = match s
        .read("find the first change failing the expectation", sql)
        .await
    {
        Ok(rows) => rows,
        Err(e) => return e,
    };
    let total: usize = failed.values().sum();
    let first = smelt_rules::messages::violation(
        name,
        pred,
        &keys(shape, &first),
        &spec.from.to_string(),
        &version(&first).to_string(),
    );
    EngineError::rule(smelt_rules::messages::expectations_failed(&first, total))
}

/// `on_sequence_conflict: fail`: the first key (by key) whose latest changes conflict, and
/// their sequence.
pub(super) async fn conflict(
    s: &Session<'_>,
    spec: &ApplyFlow,
    shape: &Shape,
    conflicts: usize,
) -> EngineError {
    let sql = latest::first_conflict(shape);
    let first = match s
        .read("find the first key whose changes conflict", sql)
        .await
    {
        Ok(rows) => rows,
        Err(e) => return e,
    };
    let sequence: Vec<String> = spec
        .sequence_by
        .iter()
        .enumerate()
        .map(|(j, name)| format!("{name}={}", null_or(text(&first, &format!("__tomb{j}")))))
        .collect();
    // `on_sequence_conflict: quarantine` is refused on Spark: not offered.
    EngineError::rule(smelt_rules::messages::sequence_conflict(
        &keys(shape, &first),
        &sequence.join(", "),
        conflicts,
        false,
    ))
}

/// Column `name` of the first row of `rows`, as text.
fn text(rows: &Rows, name: &str) -> Option<String> {
    rows.strings(name).first().cloned().flatten()
}

fn null_or(value: Option<String>) -> String {
    value.unwrap_or_else(|| "NULL".into())
}

/// The bronze version of the first row of `rows` (`-1` when unknown).
fn version(rows: &Rows) -> i64 {
    rows.ints("_commit_version")
        .first()
        .copied()
        .flatten()
        .unwrap_or(-1)
}

/// The keys of the first row of `rows` (named as silver's keys), as `Id=value, …`.
fn keys(shape: &Shape, rows: &Rows) -> String {
    shape
        .keys
        .iter()
        .map(|&k| {
            let name = &shape.silver.columns[k].name;
            format!("{name}={}", null_or(text(rows, name)))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first change (in read order) failing expectation `j`, for `on_violation: fail`
/// (collected): its version and its keys as text.
fn first_violation(shape: &Shape, j: usize) -> String {
    format!(
        "SELECT _commit_version, {} FROM {CHANGES} WHERE __x{j} \
         ORDER BY {} LIMIT 1",
        key_texts(shape).join(", "),
        order_by(&read_order()),
    )
}

/// The first change whose column `i` fails to cast, for `on_cast_error: fail` (collected).
fn first_failure(shape: &Shape, i: usize) -> String {
    let keys = key_texts(shape);
    format!(
        "SELECT CAST({} AS STRING) AS raw, _commit_version, {} FROM {CHANGES} \
         WHERE __kind = 'upsert' AND __f{i} ORDER BY {} LIMIT 1",
        shape.name(i),
        keys.join(", "),
        order_by(&read_order()),
    )
}
