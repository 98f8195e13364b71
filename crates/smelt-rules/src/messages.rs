//! Messages both engines print, written once.

use crate::Message;

/// The fix for a file that does not fit its flow.
pub const FIX_FILE: &str = "fix or replace the file (a new name loads as a new file), or move it out of the landing folder";

/// The fix for a value that does not cast under `on_cast_error: fail`.
pub const FIX_CAST: &str =
    "fix the value in bronze, or set `on_cast_error: null` to store NULL and count the failure";

/// `on_cast_error: fail`: `value` of column `column` does not cast to `target`; `context`
/// follows (where the value is, e.g. " (bronze `b` version 2, key Id=7)", and how many failed
/// in all). The row's place in a batch or file is not named: it means nothing to the user,
/// and it is not the same on both engines.
pub fn cannot_cast(column: &str, target: &str, value: &str, context: &str) -> String {
    format!("cannot cast column `{column}` to {target}: value {value:?}{context}")
}

/// An ingest run met more than `max` malformed rows; the first of them (in the order the
/// files and their lines were read) is line `line` of `url`, malformed for `reason`.
pub fn too_many_malformed(
    url: &str,
    max: usize,
    line: impl std::fmt::Display,
    reason: &str,
) -> Message {
    Message {
        text: format!(
            "{url}: more than {max} malformed rows in this run (the first: line {line}, {reason}); the files do not look like the flow says"
        ),
        hint: FIX_FILE.to_string(),
    }
}

/// The event log could not be read to find whether flow `flow`'s last write has its row
/// (a crash between the write and the event log's append loses it): the run goes on,
/// warned.
pub fn cannot_check_event_log(flow: &str, error: &dyn std::fmt::Display) -> String {
    format!("could not check the event log for flow `{flow}`: {error}")
}

/// SCD1 under `on_sequence_conflict: fail`: changes of key `key` (e.g. "Id = 7") share the
/// greatest sequence `sequence` (e.g. "seq=3") but differ; `conflicts` keys conflict in
/// all. `quarantine`: whether the engine offers `on_sequence_conflict: quarantine` (the
/// Spark engine does not).
pub fn sequence_conflict(key: &str, sequence: &str, conflicts: usize, quarantine: bool) -> Message {
    let or = if quarantine { " or `quarantine`" } else { "" };
    Message {
        text: format!(
            "changes of key {key} share the greatest sequence ({sequence}) but differ; {conflicts} key(s) conflict in all"
        ),
        hint: format!(
            "add a column to `sequence_by` that orders them, or set `on_sequence_conflict: last` (bronze order wins){or}"
        ),
    }
}

/// SCD2 under `on_sequence_conflict: fail`: `conflicts` keys have two changes of one
/// sequence with different data.
pub fn history_sequence_conflict(conflicts: usize) -> Message {
    Message {
        text: format!("{conflicts} key(s) have two changes with one sequence and different data"),
        hint: "add a column to `sequence_by` that orders them, or set `on_sequence_conflict: last`"
            .to_string(),
    }
}

/// The first change failing an expectation under `on_violation: fail`: expectation `name`
/// (`predicate`), the change's key (e.g. "Id=7"), bronze `from` and its version.
pub fn violation(name: &str, predicate: &str, key: &str, from: &str, version: &str) -> String {
    format!(
        "expectation `{name}` (`{predicate}`) failed for the change of key {key} in bronze `{from}` version {version}"
    )
}

/// A run stopped by `on_violation: fail`: its first [`violation`], and how many changes
/// failed expectations in all.
pub fn expectations_failed(first: &str, total: usize) -> Message {
    Message {
        text: format!("{first}; {total} change(s) failed expectations in all"),
        hint: "fix the change in bronze, or set `on_violation:` to `warn`, `drop` or `quarantine`"
            .to_string(),
    }
}

/// `smelt status` of an export flow that has not exported anything yet.
pub const NOT_EXPORTED_YET: &str = "not exported yet: run `smelt run`";

/// A column of a `replace_where` (or cast) target that the input lacks.
pub fn target_column_not_in_input(column: &str) -> Message {
    Message {
        text: format!("column `{column}` of the target is not in the input"),
        hint: "add the column to the input, or remove it from the target's CREATE TABLE".into(),
    }
}
