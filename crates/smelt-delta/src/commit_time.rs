//! When a Delta commit happened: one definition for every reader of a commit's time — the
//! change rows' `_commit_timestamp`, replay windows, `TIMESTAMP AS OF`, `table_changes` by
//! time, `DESCRIBE HISTORY` — as the Delta protocol and Spark define it:
//!
//! * the commit's in-commit timestamp (`commitInfo.inCommitTimestamp`) from the version the
//!   table enabled them on (`delta.enableInCommitTimestamps`, and
//!   `delta.inCommitTimestampEnablementVersion` when enabled after creation);
//! * before that, or without them, the modification time of the commit's log file, made
//!   monotonic across versions as Delta's history does: a version not later than the one
//!   before it is 1 ms after it.
//!
//! `commitInfo.timestamp` is not a commit's time: writers set it before they commit, so it
//! can be earlier than the previous commit, and some writers omit `commitInfo` altogether.
//! Copying a table without keeping modification times (`cp` without `-p`, a git checkout,
//! some object-store copies) therefore moves the commit times of a table without in-commit
//! timestamps to the copy's time, as it does for Spark.

use std::collections::BTreeMap;

use deltalake::DeltaTable;
use futures::TryStreamExt;

use crate::error::{Error, Result};

/// Table property that turns in-commit timestamps on.
const ICT_ENABLED: &str = "delta.enableInCommitTimestamps";
/// Table property naming the first version with in-commit timestamps, when they were
/// enabled after the table was created.
const ICT_ENABLEMENT_VERSION: &str = "delta.inCommitTimestampEnablementVersion";

/// The commit files of a table's log and their times.
#[derive(Debug, Default, Clone)]
pub(crate) struct CommitClock {
    /// Every commit file still in the log: version → modification time (ms), made
    /// monotonic from the oldest one listed.
    file_times: BTreeMap<i64, i64>,
    /// The first version whose time is its in-commit timestamp.
    ict_from: Option<i64>,
}

impl CommitClock {
    /// Lists the log of `table` (one listing) and reads whether, and from which version,
    /// the table has in-commit timestamps.
    pub(crate) async fn of(table: &DeltaTable, name: &str) -> Result<Self> {
        let store = table.object_store();
        let prefix = object_store::path::Path::from("_delta_log");
        let files: Vec<_> = store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|source| Error::Store {
                context: format!("listing the log of `{name}`"),
                source,
            })?;
        let mut listed: Vec<(i64, i64)> = files
            .iter()
            .filter_map(|meta| {
                let (digits, rest) = meta.location.filename()?.split_at_checked(20)?;
                let version = digits.parse::<i64>().ok()?;
                (rest == ".json").then(|| (version, meta.last_modified.timestamp_millis()))
            })
            .collect();
        listed.sort_unstable();
        let ict_from = table.snapshot().ok().and_then(|state| {
            let config = state.metadata().configuration();
            let enabled = config
                .get(ICT_ENABLED)
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            enabled.then(|| {
                config
                    .get(ICT_ENABLEMENT_VERSION)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            })
        });
        Ok(Self {
            file_times: monotonic(listed).into_iter().collect(),
            ict_from,
        })
    }

    /// The versions with a commit file in the log, oldest first.
    pub(crate) fn versions(&self) -> impl Iterator<Item = i64> + '_ {
        self.file_times.keys().copied()
    }

    /// True when `version`'s time is its in-commit timestamp (read from its `commitInfo`),
    /// not its log file's time.
    pub(crate) fn in_commit(&self, version: i64) -> bool {
        self.ict_from.is_some_and(|from| version >= from)
    }

    /// The time (ms since the epoch) of `version`, whose `commitInfo` carries
    /// `in_commit_timestamp`; `Ok(None)` when its log entry is gone.
    pub(crate) fn time(
        &self,
        name: &str,
        version: i64,
        in_commit_timestamp: Option<i64>,
    ) -> Result<Option<i64>> {
        let Some(file_time) = self.file_times.get(&version).copied() else {
            return Ok(None);
        };
        if self.in_commit(version) {
            return in_commit_timestamp.map(Some).ok_or_else(|| {
                Error::user(
                    format!(
                        "version {version} of `{name}` has no in-commit timestamp, though the table enables them (`{ICT_ENABLED}`) from version {}",
                        self.ict_from.unwrap_or_default()
                    ),
                    "the table's log is damaged or was written by a tool that ignores the `inCommitTimestamp` table feature",
                )
            });
        }
        Ok(Some(file_time))
    }
}

/// `listed` (version, ms) in version order, each time made later than the one before:
/// a time not after its predecessor's becomes the predecessor's plus 1 ms (Delta's
/// `DeltaHistoryManager.monotonizeCommitTimestamps`).
fn monotonic(mut listed: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    for i in 1..listed.len() {
        let before = listed[i - 1].1;
        if listed[i].1 <= before {
            listed[i].1 = before + 1;
        }
    }
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_made_monotonic_from_the_oldest_listed() {
        // A clock step back at version 3, two files with the same time at 5 and 6.
        let listed = vec![(2, 1_000), (3, 900), (4, 1_500), (5, 2_000), (6, 2_000)];
        assert_eq!(
            monotonic(listed),
            vec![(2, 1_000), (3, 1_001), (4, 1_500), (5, 2_000), (6, 2_001)]
        );
        // A run of equal times (a copy that did not keep them) becomes 1 ms apart.
        assert_eq!(
            monotonic(vec![(0, 7), (1, 7), (2, 7)]),
            vec![(0, 7), (1, 8), (2, 9)]
        );
        assert!(monotonic(Vec::new()).is_empty());
    }

    #[test]
    fn in_commit_timestamps_count_from_their_enablement_version() {
        let clock = CommitClock {
            file_times: [(0, 10), (1, 20), (2, 30)].into_iter().collect(),
            ict_from: Some(2),
        };
        assert_eq!(clock.time("t", 1, Some(999)).unwrap(), Some(20));
        assert_eq!(clock.time("t", 2, Some(999)).unwrap(), Some(999));
        let err = clock.time("t", 2, None).unwrap_err().to_string();
        assert!(
            err.contains("version 2 of `t` has no in-commit timestamp"),
            "{err}"
        );
        // A version whose log entry is gone has no time.
        assert_eq!(clock.time("t", 7, None).unwrap(), None);
    }
}
