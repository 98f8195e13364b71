//! The policy enums of the pipeline file: what a flow does when a value, a change or a
//! source misbehaves (`on_cast_error`, `on_violation`, `schema_evolution`, …). No
//! dependencies: every flow module may use them.

use serde::Deserialize;

/// What to do with a value that cannot be cast to its silver type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnCastError {
    /// Store NULL (BigQuery SAFE_CAST); the failure is counted in the report.
    #[default]
    Null,
    /// Abort the run before anything is written, naming the column, value and row.
    Fail,
    /// Leave the change out and write it to the rejects table (`<silver>__rejects`) with
    /// the column, raw value and target type.
    Quarantine,
}

/// What to do with a change that fails an expectation (`expect:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnViolation {
    /// Apply it anyway; count the violation per expectation.
    #[default]
    Warn,
    /// Leave it out; counted.
    Drop,
    /// Leave it out and write it to the rejects table.
    Quarantine,
    /// Abort the run before anything is written, naming the expectation and the row.
    Fail,
}

/// What to do when two changes of one key have the same (greatest) sequence and
/// different data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnSequenceConflict {
    /// The later one in bronze order wins (commit version, file, row); counted.
    #[default]
    Last,
    /// Neither is applied this run: all of them go to the rejects table.
    Quarantine,
    /// Abort the run before anything is written, naming the key and sequence.
    Fail,
}

/// How an apply flow removes the stored rows it replaces or deletes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// The files holding them are rewritten without them.
    #[default]
    CopyOnWrite,
    /// They are marked deleted (Iceberg position-delete files); no data file is rewritten.
    MergeOnRead,
}

/// How a merge-on-read apply flow gives change-feed readers the rows it replaces and
/// deletes (`change_data`), when silver keeps a change feed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeData {
    /// Written: change data files hold each replaced row's pre-image and each new row, as
    /// Delta writers that write change data do (readers see `update_preimage` and
    /// `update_postimage`).
    #[default]
    Written,
    /// Derived: no change data file; readers derive the changes from the commit's
    /// deletion vectors (the rows they remove are deletes) and new files (inserts). The
    /// guard reads the key and sequence columns of stored rows only.
    Derived,
}

/// Whether an apply flow optimizes its tables after its commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizeMode {
    /// Only `smelt optimize` does.
    #[default]
    Off,
    /// After each run that commits, the files past `smelt optimize`'s default thresholds
    /// (a fifth of their rows deleted; small files) are rewritten, in a commit of their own.
    Auto,
}

/// What new columns (in bronze, or declared in the DDL but missing from silver) do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaEvolution {
    /// Reported only; a DDL column missing from silver is an error.
    #[default]
    None,
    /// Added to silver in the run's commit: typed as in the DDL, else as in bronze (STRING).
    AddNewColumns,
}

/// What bronze Change Data Feed deletes do to silver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceDeletes {
    /// Ignored: bronze retention (DELETE, TRUNCATE) never deletes silver.
    #[default]
    Ignore,
    /// A bronze delete deletes the key from silver (guarded by sequence, like any change).
    Apply,
}

/// Which silver columns an update of an existing key sets (an insert sets them all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum UpdateColumns {
    /// Every column.
    #[default]
    All,
    /// Only these (`column_list`); the others keep their stored values.
    Only(Vec<String>),
    /// All but these (`except_column_list`).
    Except(Vec<String>),
}

impl UpdateColumns {
    /// True when an update sets column `name`.
    pub fn updates(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(c) => c.iter().any(|c| c == name),
            Self::Except(c) => !c.iter().any(|c| c == name),
        }
    }
}

/// What an append flow does with a source commit that rewrites rows (update, delete,
/// merge, overwrite).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRewrite {
    /// Fail the run, naming the version.
    #[default]
    Fail,
    /// Skip that commit: none of its rows are appended.
    Skip,
    /// Rebuild the target from the source snapshot in this run.
    FullRefresh,
}

/// What to do with a file loaded before that has changed since (same path, other size or
/// modification time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnChangedFile {
    /// Report it and leave it (its first version stays loaded).
    #[default]
    Ignore,
    /// Load it again (its rows are appended once more, with the new modification time).
    Reload,
    /// Fail the run, naming the file.
    Fail,
}
