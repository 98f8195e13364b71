//! The errors that stop a run when the flow says `fail` (`on_cast_error`, `on_violation`,
//! `on_sequence_conflict`): each names the first offending change — read back from the
//! cluster's caches — its key and bronze version, and how many there are in all, in the
//! embedded engine's words.

use std::collections::BTreeMap;

use smelt_engine::EngineError;
use smelt_spec::ApplyFlow;

use super::shape::Shape;
use super::stage;
use crate::client::Rows;
use crate::session::Session;

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
    let sql = stage::first_failure(shape, i);
    let first = match s.read("find the first value that does not cast", sql).await {
        Ok(rows) => rows,
        Err(e) => return e,
    };
    let raw = text(&first, "raw").unwrap_or_default();
    EngineError::user(
        format!(
            "cannot cast column `{}` to {}: value \"{raw}\" (bronze `{}` version {}, key {}); {total} value(s) failed in all",
            column.name,
            column.ty,
            spec.from,
            version(&first),
            keys(shape, &first)
        ),
        "fix the value in bronze, or set `on_cast_error: null` to store NULL and count the failure",
    )
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
    let sql = stage::first_violation(shape, j);
    let first = match s
        .read("find the first change failing the expectation", sql)
        .await
    {
        Ok(rows) => rows,
        Err(e) => return e,
    };
    let total: usize = failed.values().sum();
    EngineError::user(
        format!(
            "expectation `{name}` (`{pred}`) failed for the change of key {} in bronze `{}` version {}; {total} change(s) failed expectations in all",
            keys(shape, &first),
            spec.from,
            version(&first),
        ),
        "fix the change in bronze, or set `on_violation:` to `warn`, `drop` or `quarantine`",
    )
}

/// `on_sequence_conflict: fail`: the first key (by key) whose latest changes conflict, and
/// their sequence.
pub(super) async fn conflict(
    s: &Session<'_>,
    spec: &ApplyFlow,
    shape: &Shape,
    conflicts: usize,
) -> EngineError {
    let sql = stage::first_conflict(shape);
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
    EngineError::user(
        format!(
            "changes of key {} share the greatest sequence ({}) but differ; {conflicts} key(s) conflict in all",
            keys(shape, &first),
            sequence.join(", "),
        ),
        "add a column to `sequence_by` that orders them, or set `on_sequence_conflict: last` (bronze order wins) or `quarantine`",
    )
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
