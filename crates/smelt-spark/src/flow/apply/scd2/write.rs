//! What an SCD2 run counts and writes, from `smelt_events` ([`super::sql`]): the report's
//! counts (one row per key), the new tombstones (added: a key keeps one per delete that
//! closes nothing), and silver — the versions of the keys whose history changed merged in
//! one statement by key and `__START_AT`, or a rebuild's overwrite.

use super::events::rows_written;
use super::names::Names;
use crate::flow::apply::Shape;
use crate::flow::apply::shape::DELETED_AT;
use crate::sql::ident;
use crate::views::{EVENTS, HCHANGES};

/// What the run does (collected): keys inserted (no stored version) and updated (their
/// history changed), changes dropped as stale (replays, earlier changes of one sequence, and
/// the changes of keys whose history they leave as it was), versions closed by deletes,
/// keys with conflicting changes, tombstones written.
pub(crate) fn counts() -> String {
    format!(
        "SELECT count_if(__changed AND NOT __had) AS inserted, \
         count_if(__changed AND __had) AS updated, \
         sum(__dropped + IF(__kc > 0 AND NOT __changed, __kc - __tombch, 0)) AS stale, \
         sum(IF(__changed, __closed, 0)) AS deleted, count_if(__conflict = 1) AS conflicts, \
         sum(IF(__kc > 0, __tombs, 0)) AS tombstones FROM {EVENTS} WHERE __first"
    )
}

/// The changes rejected (a NULL key), filtered (`where`) and kept (collected).
pub(crate) fn change_counts() -> String {
    format!(
        "SELECT count_if(__rej) AS rejected, \
         count_if(__wf AND NOT __rej) AS filtered, count_if(NOT __rej) AS kept FROM {HCHANGES}"
    )
}

/// The new tombstones: deletes that close no version, as the tombstone table's columns.
fn tombstone_rows(shape: &Shape, run_us: i64) -> String {
    let cols: Vec<String> = shape
        .tombstone_columns()
        .iter()
        .map(|(name, ty, _)| {
            let value = if let Some(j) = shape
                .keys
                .iter()
                .position(|&k| &shape.silver.columns[k].name == name)
            {
                format!("__k{j}")
            } else if name == DELETED_AT {
                format!("timestamp_micros({run_us}L)")
            } else {
                "__seq".to_string()
            };
            format!("CAST({value} AS {ty}) AS {}", ident(name))
        })
        .collect();
    format!(
        "SELECT {} FROM {EVENTS} WHERE __kc > 0 AND __newtomb",
        cols.join(", ")
    )
}

/// The run's tombstones added to the table (by key and sequence: a rerun adds none twice).
pub(crate) fn merge_tombstones(table: &str, shape: &Shape, run_us: i64) -> String {
    let mut on: Vec<String> = shape
        .keys
        .iter()
        .map(|&i| format!("t.{0} <=> s.{0}", shape.name(i)))
        .collect();
    let seq = &shape.seq[0];
    if !seq.is_key {
        on.push(format!("t.{0} <=> s.{0}", ident(&seq.stored)));
    }
    format!(
        "MERGE INTO {table} AS t USING ({}) AS s ON {}\nWHEN NOT MATCHED THEN INSERT *",
        tombstone_rows(shape, run_us),
        on.join(" AND ")
    )
}

/// A rebuild's tombstones: the table replaced by the run's.
pub(crate) fn overwrite_tombstones(table: &str, shape: &Shape, run_us: i64) -> String {
    format!("INSERT OVERWRITE {table} {}", tombstone_rows(shape, run_us))
}

/// The rows written ([`rows_written`]) merged into silver in one statement, by key and
/// `__START_AT`: a rebuilt version updates the stored one starting where it does or is
/// inserted; a stored version no rebuilt one starts at is deleted.
pub(crate) fn merge_silver(table: &str, shape: &Shape, run_us: i64) -> String {
    let (Some(n), Some(rows)) = (Names::new(shape), rows_written(shape, run_us)) else {
        return String::new();
    };
    let cols: Vec<String> = (0..shape.silver.columns.len())
        .map(|i| shape.name(i))
        .collect();
    let on: Vec<String> = shape
        .keys
        .iter()
        .chain([&n.history.start])
        .map(|&i| format!("t.{0} <=> s.{0}", shape.name(i)))
        .collect();
    let set: Vec<String> = cols.iter().map(|c| format!("t.{c} = s.{c}")).collect();
    let values: Vec<String> = cols.iter().map(|c| format!("s.{c}")).collect();
    format!(
        "MERGE INTO {table} AS t\nUSING ({rows}) AS s\nON {}\n\
         WHEN MATCHED AND s.__op = 'delete' THEN DELETE\n\
         WHEN MATCHED THEN UPDATE SET {}\n\
         WHEN NOT MATCHED AND s.__op = 'upsert' THEN INSERT ({}) VALUES ({})",
        on.join(" AND "),
        set.join(", "),
        cols.join(", "),
        values.join(", ")
    )
}

/// A rebuild's silver: the table replaced by the rebuilt versions.
pub(crate) fn overwrite_silver(table: &str, shape: &Shape, run_us: i64) -> String {
    let cols: Vec<String> = (0..shape.silver.columns.len())
        .map(|i| shape.name(i))
        .collect();
    let rows = rows_written(shape, run_us).unwrap_or_default();
    format!(
        "INSERT OVERWRITE {table} SELECT {} FROM ({rows}) r WHERE __op = 'upsert'",
        cols.join(", ")
    )
}
