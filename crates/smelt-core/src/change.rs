//! The change model: what a table-format adapter hands to the core.
//!
//! A change batch holds the bronze columns (as stored, usually all `Utf8`) followed by the
//! three metadata columns below, in *input order*: commit version ascending, then the
//! order of files in the commit, then row order inside a file. Later input position wins
//! ties (DESIGN §3.4), so adapters must keep that order.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, TimeUnit};

/// Change kind column (Delta Change Data Feed name).
pub const CHANGE_TYPE: &str = "_change_type";
/// Bronze commit version column (`Int64`).
pub const COMMIT_VERSION: &str = "_commit_version";
/// Bronze commit timestamp column (`Timestamp(µs, "UTC")`).
pub const COMMIT_TIMESTAMP: &str = "_commit_timestamp";

/// `_change_type` of an appended or inserted row.
pub const INSERT: &str = "insert";
/// `_change_type` of an update post-image.
pub const UPDATE_POSTIMAGE: &str = "update_postimage";
/// `_change_type` of an update pre-image (always ignored by apply flows).
pub const UPDATE_PREIMAGE: &str = "update_preimage";
/// `_change_type` of a deleted row.
pub const DELETE: &str = "delete";

/// The UTC microsecond timestamp type smelt uses for every `TIMESTAMP` column.
pub fn timestamp_utc() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")))
}

/// The metadata fields appended to every change batch, in order.
pub fn metadata_fields() -> Vec<Field> {
    vec![
        Field::new(CHANGE_TYPE, DataType::Utf8, false),
        Field::new(COMMIT_VERSION, DataType::Int64, false),
        Field::new(COMMIT_TIMESTAMP, timestamp_utc(), false),
    ]
}

/// True when `name` is one of the change metadata columns.
pub fn is_metadata(name: &str) -> bool {
    matches!(name, CHANGE_TYPE | COMMIT_VERSION | COMMIT_TIMESTAMP)
}
