//! The side tables both engines write, column by column: the event log, an apply flow's
//! rejects, and the tombstones' time of delete. The embedded engine makes Arrow schemas of
//! them, the Spark engine `CREATE TABLE` statements; both read and write the same tables.

/// The kind of a side table's column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Text.
    Text,
    /// A 64-bit integer.
    Int,
    /// A UTC instant, in microseconds.
    Timestamp,
}

/// A column of a side table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Its name.
    pub name: &'static str,
    /// Its kind.
    pub kind: Kind,
    /// Whether it may be NULL.
    pub nullable: bool,
}

const fn col(name: &'static str, kind: Kind, nullable: bool) -> Column {
    Column {
        name,
        kind,
        nullable,
    }
}

/// The event log's schema and table: `_smelt.event_log`.
pub const EVENT_LOG: (&str, &str) = ("_smelt", "event_log");

/// The event log's columns, one row per flow run (all nullable).
pub const EVENT_LOG_COLUMNS: [Column; 26] = {
    use Kind::{Int, Text, Timestamp};
    [
        col("run_id", Text, true),
        col("flow", Text, true),
        col("status", Text, true),
        col("started_at", Timestamp, true),
        col("finished_at", Timestamp, true),
        col("source", Text, true),
        col("target", Text, true),
        col("from_version", Int, true),
        col("to_version", Int, true),
        col("silver_version", Int, true),
        col("changes_read", Int, true),
        col("ignored", Int, true),
        col("duplicates_collapsed", Int, true),
        col("stale", Int, true),
        col("inserted", Int, true),
        col("updated", Int, true),
        col("unchanged", Int, true),
        col("deleted", Int, true),
        col("rejected", Int, true),
        col("cast_failures", Int, true),
        col("files_read", Int, true),
        col("bytes_read", Int, true),
        col("files_written", Int, true),
        col("bytes_written", Int, true),
        col("error", Text, true),
        col("report", Text, true),
    ]
};

/// The column of the rejects table holding the bronze version of the rejected change.
pub const SOURCE_VERSION: &str = "source_version";

/// An apply flow's rejects table (`<silver>__rejects`): one row per change quarantined and
/// rule it broke.
pub const REJECTS_COLUMNS: [Column; 12] = {
    use Kind::{Int, Text, Timestamp};
    [
        col("run_id", Text, false),
        col("flow", Text, false),
        col("source_table", Text, false),
        col(SOURCE_VERSION, Int, false),
        col("source_commit_timestamp", Timestamp, true),
        col("rule", Text, false),
        col("column_name", Text, true),
        col("raw_value", Text, true),
        col("target_type", Text, true),
        col("reason", Text, false),
        col("raw_row", Text, false),
        col("rejected_at", Timestamp, false),
    ]
};

/// The rejects' `rule` of a change whose value does not cast (`on_cast_error: quarantine`).
pub const RULE_CAST: &str = "cast";

/// The rejects' `rule` of changes of one key that share the greatest sequence but differ
/// (`on_sequence_conflict: quarantine`).
pub const RULE_SEQUENCE_CONFLICT: &str = "sequence_conflict";

/// The rejects' `reason` of a value that does not cast to `target_type` (the rule
/// [`RULE_CAST`]).
pub fn cast_reason(target_type: &str) -> String {
    format!("the value cannot be cast to {target_type}")
}

/// The rejects' `reason` of a change failing expectation `name` (`predicate`, as written in
/// the pipeline file); its rule is the expectation's name.
pub fn expectation_reason(name: &str, predicate: &str) -> String {
    format!("expectation `{name}` failed: {predicate}")
}

/// The rejects' `reason` of [`RULE_SEQUENCE_CONFLICT`].
pub const SEQUENCE_CONFLICT_REASON: &str =
    "changes of one key share the greatest sequence but differ; none was applied";

/// The tombstones' column holding the time of the run that wrote each (what
/// `tombstone_retention` expires by).
pub const DELETED_AT: &str = "_deleted_at";
