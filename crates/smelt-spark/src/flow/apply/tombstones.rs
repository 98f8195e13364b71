//! The tombstones of an apply flow on Spark (`<silver>__tombstones`): created, expired.

use super::shape::{DELETED_AT, Shape};
use crate::delta::ddl::create_table_with;
use crate::sql::ident;

/// The tombstones' `CREATE TABLE IF NOT EXISTS` (with deletion vectors on where `mor`; no
/// change feed: nothing reads them).
pub(crate) fn create_tombstones(table: &str, shape: &Shape, mor: bool) -> String {
    create_table_with(table, &shape.tombstone_columns(), mor, false)
}

/// Tombstones older than the retention, removed.
pub(crate) fn expire_tombstones(table: &str, before_us: i64) -> String {
    format!(
        "DELETE FROM {table} WHERE {} < timestamp_micros({before_us}L)",
        ident(DELETED_AT)
    )
}
