//! The statements that write: each carries the flow's watermark as Delta's idempotent-write
//! session confs (`txnAppId` = `smelt/<flow>`, `txnVersion` = the bronze version read), so
//! Delta itself skips a statement a killed run already committed; silver's commit also
//! carries the run's report in its `userMetadata`. Order: tombstones, then silver, as
//! embedded; tombstone expiry after, in a commit of its own.

use smelt_rules::scd1::Action;

use crate::flow::apply::scd1::latest::named;
use crate::flow::apply::shape::{DELETED_AT, Shape};
use crate::sql::ident;
use crate::views::STAGE;

/// The tombstone rows of the stage, as the tombstone table's columns.
fn tombstone_rows(shape: &Shape, run_us: i64) -> String {
    let mut cols: Vec<String> = shape.keys.iter().map(|&i| shape.name(i)).collect();
    for (j, s) in shape.seq.iter().enumerate() {
        if !s.is_key {
            cols.push(format!("__tomb{j} AS {}", ident(&s.stored)));
        }
    }
    cols.push(format!(
        "timestamp_micros({run_us}L) AS {}",
        ident(DELETED_AT)
    ));
    format!("SELECT {} FROM {STAGE} WHERE __tomb", cols.join(", "))
}

fn on(shape: &Shape) -> String {
    shape
        .keys
        .iter()
        .map(|&i| format!("t.{0} <=> s.{0}", shape.name(i)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The tombstones of the run's deletes merged in: one per key, the newest.
pub(crate) fn merge_tombstones(table: &str, shape: &Shape, run_us: i64) -> String {
    format!(
        "MERGE INTO {table} AS t USING ({}) AS s ON {}\n\
         WHEN MATCHED THEN UPDATE SET *\nWHEN NOT MATCHED THEN INSERT *",
        tombstone_rows(shape, run_us),
        on(shape)
    )
}

/// A rebuild's tombstones: the table replaced by the run's.
pub(crate) fn overwrite_tombstones(table: &str, shape: &Shape, run_us: i64) -> String {
    format!("INSERT OVERWRITE {table} {}", tombstone_rows(shape, run_us))
}

/// The stage merged into silver: deletes, updates (changed or not: the sequence and ingest
/// time move), inserts; keys matched null-safely.
pub(crate) fn merge_silver(table: &str, shape: &Shape) -> String {
    let cols: Vec<String> = (0..shape.silver.columns.len())
        .map(|i| shape.name(i))
        .collect();
    let set: Vec<String> = cols.iter().map(|c| format!("t.{c} = s.{c}")).collect();
    let values: Vec<String> = cols.iter().map(|c| format!("s.{c}")).collect();
    let (delete, insert) = (Action::Delete.name(), Action::Insert.name());
    format!(
        "MERGE INTO {table} AS t\n\
         USING (SELECT * FROM {STAGE} WHERE __action IN ({})) AS s\n\
         ON {}\n\
         WHEN MATCHED AND s.__action = '{delete}' THEN DELETE\n\
         WHEN MATCHED THEN UPDATE SET {}\n\
         WHEN NOT MATCHED AND s.__action = '{insert}' THEN INSERT ({}) VALUES ({})",
        named(|a| a.writes_row() || a == Action::Delete),
        on(shape),
        set.join(", "),
        cols.join(", "),
        values.join(", ")
    )
}

/// A rebuild's silver: the table replaced by the stage's inserts.
pub(crate) fn overwrite_silver(table: &str, shape: &Shape) -> String {
    let cols: Vec<String> = (0..shape.silver.columns.len())
        .map(|i| shape.name(i))
        .collect();
    format!(
        "INSERT OVERWRITE {table} SELECT {} FROM {STAGE} WHERE __action = '{}'",
        cols.join(", "),
        Action::Insert.name()
    )
}
