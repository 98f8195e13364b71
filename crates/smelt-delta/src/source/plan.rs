//! Which files (and which of their rows) make up a table's snapshot or its changes after a
//! version, read from the log.

use std::collections::{HashMap, HashSet};

use deltalake::kernel::{Action, Add, AddCDCFile, DeletionVectorDescriptor, Remove};
use deltalake::logstore::get_actions;
use futures::{StreamExt, TryStreamExt};
use smelt_core::change::{DELETE, INSERT};

use super::DeltaSource;
use crate::commit_time::CommitClock;
use crate::dv::minus;
use crate::error::{Context, Error, Result};
use crate::parquet::{FileRef, FileRows};

/// One data file to read, with the change metadata its rows get.
#[derive(Debug, Clone)]
pub(super) struct FileToRead {
    pub file: FileRef,
    /// `Some(kind)` for data files (every row is that kind); `None` for change data files,
    /// which carry their own `_change_type` column.
    pub kind: Option<&'static str>,
    pub version: i64,
    pub timestamp_us: i64,
}

/// Summary of one commit of the log.
#[derive(Debug, Default)]
pub(super) struct Commit {
    pub timestamp_us: i64,
    pub operation: String,
    /// A `WRITE` with a predicate (replaceWhere): rows replaced, not the whole table.
    predicate: bool,
    /// smelt wrote it with derived change data: no row was copied (`change_data: derived`).
    derived: bool,
    adds: Vec<Add>,
    pub removes: Vec<Remove>,
    cdc: Vec<AddCDCFile>,
}

impl DeltaSource {
    /// Commit `version`, `None` when its log entry is gone.
    pub(super) async fn read_commit(&self, version: i64) -> Result<Option<Commit>> {
        let Some(bytes) = self
            .table
            .log_store()
            .read_commit_entry(version as u64)
            .await
            .context(|| format!("reading the log of `{}` at version {version}", self.name))?
        else {
            return Ok(None);
        };
        let actions = get_actions(version as u64, &bytes)
            .context(|| format!("parsing the log of `{}` version {version}", self.name))?;
        let mut c = Commit::default();
        let mut in_commit_timestamp = None;
        for a in actions {
            match a {
                Action::CommitInfo(info) => {
                    in_commit_timestamp = info.in_commit_timestamp;
                    c.derived = info
                        .info
                        .get(smelt_engine::ports::keys::CHANGE_DATA)
                        .is_some_and(|v| v == "derived");
                    c.operation = info.operation.unwrap_or_default();
                    c.predicate = info
                        .operation_parameters
                        .as_ref()
                        .and_then(|p| p.get("predicate"))
                        .is_some_and(|p| !p.is_null());
                }
                Action::Add(add) => c.adds.push(add),
                Action::Remove(r) => c.removes.push(r),
                Action::Cdc(cdc) => c.cdc.push(cdc),
                _ => {}
            }
        }
        let name = self.name.to_string();
        let at = self
            .clock()
            .await?
            .time(&name, version, in_commit_timestamp)?
            .ok_or_else(|| {
                Error::user(
                    format!("version {version} of `{name}` appeared in its log after smelt listed the log"),
                    "another writer is changing the table's log under smelt (a restore or a log rewrite); run again",
                )
            })?;
        c.timestamp_us = at * 1000;
        Ok(Some(c))
    }

    /// Commit `version`, which must still be in the log.
    pub(super) async fn commit(&self, version: i64) -> Result<Commit> {
        if let Some(c) = self.read_commit(version).await? {
            return Ok(c);
        }
        let oldest = self.clock().await?.versions().next();
        Err(Error::user(
            format!(
                "the log of `{}` no longer has version {version} (log cleanup removed it){}",
                self.name,
                oldest
                    .map(|o| format!("; the oldest version still there is {o}"))
                    .unwrap_or_default()
            ),
            "the changes of the versions removed can no longer be read; rebuild what reads the table with `smelt run --full-refresh` (it reads the snapshot from the table's last checkpoint), and keep the log longer (`delta.logRetentionDuration`) than the time between runs",
        ))
    }

    /// The commit files of the log and their times, listed once.
    pub(super) async fn clock(&self) -> Result<&CommitClock> {
        self.clock
            .get_or_try_init(|| async {
                CommitClock::of(&self.table, &self.name.to_string()).await
            })
            .await
    }

    /// A file of the log with the rows `rows`, read as `kind`, committed `at` (version,
    /// time in µs).
    fn file(
        &self,
        path: String,
        size: i64,
        partition_values: HashMap<String, Option<String>>,
        rows: FileRows,
        kind: Option<&'static str>,
        (version, timestamp_us): (i64, i64),
    ) -> FileToRead {
        let partition_values = self.names.partition_values(partition_values);
        FileToRead {
            file: FileRef::from_log(path, size, partition_values, rows),
            kind,
            version,
            timestamp_us,
        }
    }

    /// True when the table has partition columns.
    fn partitioned(&self) -> Result<bool> {
        Ok(!self
            .table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?
            .metadata()
            .partition_columns()
            .is_empty())
    }

    async fn deleted(
        &self,
        path: &str,
        dv: Option<&DeletionVectorDescriptor>,
    ) -> Result<std::sync::Arc<[u64]>> {
        self.dvs.deleted(path, dv).await
    }

    /// The snapshot at `version`: its active files (less their deleted rows) in the order
    /// they were added, each with the version and time of the commit that added it. The
    /// file set comes from the last checkpoint and the commits after it; the order and
    /// stamps from the commits still in the log. Files whose commit is gone (log cleanup)
    /// come first, by modification time, stamped with the last version whose commit is gone and their
    /// modification time (the log no longer says when they were committed).
    pub(super) async fn plan_snapshot(&self) -> Result<Vec<FileToRead>> {
        let mut table = self.table.clone();
        if table.version() != Some(self.version as u64) {
            table
                .load_version(self.version as u64)
                .await
                .context(|| format!("reading `{}` at version {}", self.name, self.version))?;
        }
        let state = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        // The commits still in the log up to the snapshot (a run without gaps): they say
        // which commit added each file, and its place in the log. Files added before them
        // are known from the checkpoint alone.
        let present: HashSet<i64> = self.clock().await?.versions().collect();
        let mut first = self.version;
        while first > 0 && present.contains(&(first - 1)) {
            first -= 1;
        }
        let first = if present.contains(&first) {
            first
        } else {
            self.version + 1
        };
        let commits: Vec<Commit> = futures::stream::iter(first..=self.version)
            .map(|v| self.commit(v))
            .buffered(16)
            .try_collect()
            .await?;
        let mut added: HashMap<String, (i64, i64, usize)> = HashMap::new();
        let mut seq = 0;
        for (v, c) in (first..).zip(&commits) {
            let removed: HashSet<&str> = c.removes.iter().map(|r| r.path.as_str()).collect();
            for add in &c.adds {
                // The same path removed and added again is a new deletion vector, not a
                // new file: the file keeps the commit that first added it.
                if removed.contains(add.path.as_str()) {
                    continue;
                }
                seq += 1;
                added.insert(add.path.clone(), (v, c.timestamp_us, seq));
            }
        }
        let mut files = Vec::new();
        for view in state.log_data().iter() {
            let path = view.path().into_owned();
            let deleted = self
                .deleted(&path, view.deletion_vector_descriptor().as_ref())
                .await?;
            let mtime_us = view.modification_time() * 1000;
            // A file added before the commits still in the log: stamped with the last
            // version whose commit is gone (the checkpoint's, after a log cleanup).
            let (version, timestamp_us, seq) =
                added
                    .get(&path)
                    .copied()
                    .unwrap_or(((first - 1).max(0), mtime_us, 0));
            let file = self.file(
                path,
                view.size(),
                view.partition_values_map(),
                FileRows::Except(deleted),
                Some(INSERT),
                (version, timestamp_us),
            );
            // Those files first (by modification time), then the others in log order.
            files.push(((seq > 0, version, seq, mtime_us), file));
        }
        files.sort_by(|(a, fa), (b, fb)| a.cmp(b).then_with(|| fa.file.path.cmp(&fb.file.path)));
        Ok(files.into_iter().map(|(_, f)| f).collect())
    }

    /// Files (and rows) that make up the changes in `(after, version]`, and how many
    /// files' deletes were left out (flows that do not apply bronze deletes).
    pub(super) async fn plan_changes(&self, after: i64) -> Result<(Vec<FileToRead>, usize)> {
        let mut skipped_deletes = 0;
        let mut files = Vec::new();
        for v in (after + 1)..=self.version {
            if self.skipped.lock().expect("not poisoned").contains(&v) {
                continue;
            }
            let c = self.commit(v).await?;
            let at = c.timestamp_us;
            // `dataChange = false` (OPTIMIZE, REORG, compaction) moves rows, changes none.
            let adds: Vec<Add> = c.adds.into_iter().filter(|a| a.data_change).collect();
            let removes: Vec<Remove> = c.removes.into_iter().filter(|r| r.data_change).collect();
            if !c.cdc.is_empty() {
                for cdc in c.cdc {
                    files.push(self.file(
                        cdc.path,
                        cdc.size,
                        cdc.partition_values,
                        FileRows::All,
                        None,
                        (v, at),
                    ));
                }
                continue;
            }
            let mut deletes = Vec::new();
            let mut inserts = Vec::new();
            // Files whose rows this commit deletes, and of those the files removed whole
            // (not added again with a deletion vector).
            let mut deleted_files = 0;
            let mut whole = 0;
            // Deletion vectors are read only where rows are read: deletes the flow applies,
            // and a RESTORE's re-added files (a vector that deletes fewer rows brings rows
            // back).
            let restore = c.operation == "RESTORE";
            for r in &removes {
                let re_added = adds.iter().find(|a| a.path == r.path);
                whole += usize::from(re_added.is_none());
                let read = self.read_removed || (restore && re_added.is_some());
                if !read {
                    deleted_files += 1;
                    continue;
                }
                let old = self.deleted(&r.path, r.deletion_vector.as_ref()).await?;
                let (rows, size, partition_values) = match re_added {
                    // A new deletion vector on the same file: the rows it adds are deleted,
                    // the rows it no longer holds come back.
                    Some(a) => {
                        let new = self.deleted(&a.path, a.deletion_vector.as_ref()).await?;
                        let back = minus(&old, &new);
                        if !back.is_empty() {
                            inserts.push(self.file(
                                a.path.clone(),
                                a.size,
                                a.partition_values.clone(),
                                FileRows::Only(back.into()),
                                Some(INSERT),
                                (v, at),
                            ));
                        }
                        let gone = minus(&new, &old);
                        if gone.is_empty() {
                            continue;
                        }
                        (
                            FileRows::Only(gone.into()),
                            a.size,
                            a.partition_values.clone(),
                        )
                    }
                    // The whole file goes: the rows its vector had not deleted yet.
                    None => {
                        let partition_values = match &r.partition_values {
                            Some(values) => values.clone(),
                            None if self.partitioned()? => {
                                return Err(Error::user(
                                    format!(
                                        "`{}` version {v} removes `{}` without its partition values: smelt cannot tell the deleted rows' partition columns",
                                        self.name, r.path
                                    ),
                                    "the writer omitted `extendedFileMetadata`; set `source_deletes: ignore`, or rebuild what reads the table with `smelt run --full-refresh`",
                                ));
                            }
                            None => Default::default(),
                        };
                        (
                            FileRows::Except(old),
                            r.size.unwrap_or_default(),
                            partition_values,
                        )
                    }
                };
                deleted_files += 1;
                if self.read_removed {
                    deletes.push(self.file(
                        r.path.clone(),
                        size,
                        partition_values,
                        rows,
                        Some(DELETE),
                        (v, at),
                    ));
                }
            }
            let replaced: HashSet<&str> = removes.iter().map(|r| r.path.as_str()).collect();
            let mut new_files = 0;
            for a in adds.iter().filter(|a| !replaced.contains(a.path.as_str())) {
                new_files += 1;
                let deleted = self.deleted(&a.path, a.deletion_vector.as_ref()).await?;
                inserts.push(self.file(
                    a.path.clone(),
                    a.size,
                    a.partition_values.clone(),
                    FileRows::Except(deleted),
                    Some(INSERT),
                    (v, at),
                ));
            }
            let overwrite =
                (c.operation == "WRITE" && !c.predicate) || c.operation.starts_with("CREATE");
            // Rows only marked in deletion vectors (or a smelt commit that says so) were not
            // copied: the new files' rows are inserts, as the protocol reads them.
            let derived = c.derived || whole == 0;
            if deleted_files > 0 && new_files > 0 && !overwrite && !derived {
                return Err(self.rewrite_without_change_data(v, &c.operation));
            }
            // Deletes without change data are ignored by apply flows (bronze retention
            // must never delete silver), so they are not read, unless the flow applies
            // bronze deletes.
            if self.read_removed {
                files.append(&mut deletes);
            } else {
                skipped_deletes += deleted_files;
            }
            files.append(&mut inserts);
        }
        Ok((files, skipped_deletes))
    }

    /// The error of commit `version` (operation `operation`) that rewrites rows without
    /// change data: which rows changed cannot be told.
    fn rewrite_without_change_data(&self, version: i64, operation: &str) -> Error {
        Error::user(
            format!(
                "`{}` version {version} rewrites rows ({}) but has no change data: smelt cannot tell which rows changed",
                self.name,
                if operation.is_empty() {
                    "unknown operation"
                } else {
                    operation
                }
            ),
            format!(
                "turn on the change feed (`ALTER TABLE {} SET OPTIONS (enable_change_history = TRUE)`, Spark: `delta.enableChangeDataFeed = true`) before rewriting the table, then rebuild what reads it once with `smelt run --full-refresh`",
                self.name
            ),
        )
    }
}
