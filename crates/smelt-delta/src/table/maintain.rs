//! Table maintenance: `optimize` (rewriting files heavy with deleted rows, and packing
//! small ones, in a commit that changes no data) and `vacuum` (deleting the files no
//! version still needed holds, through delta-rs' vacuum).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow::array::RecordBatch;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::operations::vacuum::VacuumMode;
use deltalake::protocol::DeltaOperation;
use smelt_engine::ports::keys;
use smelt_engine::ports::{OptimizePolicy, OptimizeStats, VacuumPlan, VacuumStats};

use super::batches::read_whole;
use super::prune::KeyRanges;
use super::{ActiveFile, DeltaLakeTable};
use crate::error::{Context, Error, Result};
use object_store::ObjectStoreExt;

impl DeltaLakeTable {
    /// `TableSink::optimize`: per partition, the files whose deleted share reaches the
    /// policy's, and the small files when there are two or more to pack, rewritten into
    /// files of up to the table's rows per file (deleted rows dropped).
    pub(super) async fn optimize(&mut self, policy: &OptimizePolicy) -> Result<OptimizeStats> {
        if !self.compact {
            return Err(Error::user(
                format!(
                    "`{}` is an ingest flow's bronze table: its files keep the order and the commit its rows were loaded in, which downstream flows read; smelt does not optimize it",
                    self.name
                ),
                "optimize the tables the flows reading it write",
            ));
        }
        let table = self.table()?.clone();
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        let schema = snapshot.snapshot().arrow_schema();
        // At most half a full file: packing two files under that leaves no small file
        // behind, so a second optimize has nothing to do.
        let small_rows = policy
            .small_file_rows
            .unwrap_or(self.rows_per_file / 4)
            .clamp(1, (self.rows_per_file / 2).max(1));
        let mut by_partition: BTreeMap<String, Partition> = BTreeMap::new();
        for f in self.active_files(&table).await? {
            let live = f.rows.unwrap_or(usize::MAX);
            let total = live.saturating_add(f.deleted.len()).max(1);
            let heavy = !f.deleted.is_empty()
                && f.deleted.len() as f64 / total as f64 >= policy.deleted_fraction;
            let mut part: Vec<_> = f.file.partition_values.iter().collect();
            part.sort();
            let entry = by_partition.entry(format!("{part:?}")).or_default();
            if heavy {
                entry.heavy.push(f);
            } else if live < small_rows {
                entry.small.push(f);
            } else {
                entry.rest.push(f);
            }
        }
        let mut stats = OptimizeStats::default();
        // Per partition: every file when `cluster` and their key ranges overlap; else the
        // heavy files, and the small ones when there are two files or more to write
        // together.
        let ranges = match policy.keys.first() {
            Some(first) if policy.cluster => KeyRanges::of(snapshot, first)?,
            _ => None,
        };
        let mut groups: Vec<(Vec<ActiveFile>, bool)> = Vec::new();
        for p in by_partition.into_values() {
            if ranges.as_ref().is_some_and(|r| r.overlap(&p.indices())) {
                stats.partitions_clustered += 1;
                groups.push((
                    p.heavy.into_iter().chain(p.small).chain(p.rest).collect(),
                    true,
                ));
                continue;
            }
            let mut group = p.heavy;
            if group.len() + p.small.len() >= 2 {
                group.extend(p.small);
            }
            if !group.is_empty() {
                groups.push((group, false));
            }
        }
        if groups.is_empty() {
            return Ok(stats);
        }
        let mut actions = Vec::new();
        for (group, cluster) in groups {
            for f in &group {
                stats.rows_purged += f.deleted.len() as u64;
                stats.files_removed += 1;
                let mut remove = f.remove.clone();
                remove.data_change = false;
                actions.push(Action::Remove(remove));
            }
            let files = group.into_iter().map(|f| f.file).collect();
            let adds = if !cluster {
                self.pack(files, &schema, &policy.keys, &mut stats).await?
            } else {
                let keys = &policy.keys;
                let done =
                    (self.rewrite_in_key_order(files, &schema, keys, policy.memory_limit)).await?;
                stats.rows_rewritten += done.rows;
                stats.bytes_spilled += done.bytes_spilled;
                done.adds
            };
            for mut add in adds {
                add.data_change = false;
                stats.files_added += 1;
                stats.bytes_written += add.size.max(0) as u64;
                actions.push(Action::Add(add));
            }
        }
        let props = CommitProperties::default()
            .with_metadata([(keys::OPERATION.to_string(), serde_json::json!("optimize"))])
            .with_max_retries(0);
        let operation = DeltaOperation::Optimize {
            predicate: None,
            target_size: self.rows_per_file as i64,
        };
        // The new files written, not committed: a crash leaves them to `vacuum`.
        smelt_engine::failpoint("before_optimize_commit")?;
        let committed = self.commit_actions(actions, operation, props).await?;
        stats.version = Some(committed.version);
        tracing::info!(table = %self.name, files = stats.files_removed, purged = stats.rows_purged, "optimized");
        Ok(stats)
    }

    /// The live rows of `files` (one partition's, in log order) packed into files of up to
    /// the table's rows per file, one output file's worth in memory at a time, each file's
    /// rows in the order of `keys` (if any).
    async fn pack(
        &self,
        files: Vec<crate::parquet::FileRef>,
        schema: &arrow::datatypes::SchemaRef,
        keys: &[String],
        stats: &mut OptimizeStats,
    ) -> Result<Vec<deltalake::kernel::Add>> {
        let store = self.table()?.object_store();
        let name = self.name.to_string();
        let mut adds = Vec::new();
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0;
        for file in files {
            let rows = read_whole(Arc::clone(&store), &name, &file, None, None, schema).await?;
            stats.rows_rewritten += rows.num_rows() as u64;
            pending_rows += rows.num_rows();
            pending.push(rows);
            if pending_rows >= self.rows_per_file {
                adds.extend(self.flush(schema, &mut pending, keys).await?);
                pending_rows = 0;
            }
        }
        adds.extend(self.flush(schema, &mut pending, keys).await?);
        Ok(adds)
    }

    /// Writes the rows in `pending` (then empties it) as data files, in the order of `keys`.
    async fn flush(
        &self,
        schema: &arrow::datatypes::SchemaRef,
        pending: &mut Vec<RecordBatch>,
        keys: &[String],
    ) -> Result<Vec<deltalake::kernel::Add>> {
        if pending.iter().all(|b| b.num_rows() == 0) {
            pending.clear();
            return Ok(Vec::new());
        }
        let merged = arrow::compute::concat_batches(schema, pending.iter())?;
        pending.clear();
        self.write_data(&merged, keys).await
    }

    /// `TableSink::vacuum`: delta-rs' vacuum, full mode, lists the candidates (files the
    /// current version does not hold that left the table, or were written and never
    /// committed, before the retention); smelt keeps every file a commit still readable
    /// references (inside the retention, or from the oldest version a flow has still to
    /// read: data, change data and deletion vector files, those of removes included) and
    /// every file written in the last hour that no commit of that hour holds (a run
    /// writing now), and deletes the rest.
    pub(super) async fn vacuum(&mut self, plan: &VacuumPlan) -> Result<VacuumStats> {
        let table = self.table()?.clone();
        let now = chrono::Utc::now().timestamp_millis();
        let kept_after = now - plan.retain_ms.max(0);
        let (_, metrics) = table
            .clone()
            .vacuum()
            .with_retention_period(chrono::Duration::milliseconds(now - kept_after))
            .with_enforce_retention_duration(false)
            .with_mode(VacuumMode::Full)
            .with_dry_run(true)
            .await
            .context(|| format!("vacuuming `{}`", self.name))?;
        // delta-rs names a file by its path from the store's root or in the table (both,
        // for one file, at times): in the table, once each.
        let root = table
            .log_store()
            .root_url()
            .path()
            .trim_matches('/')
            .to_string();
        let mut candidates: Vec<String> = metrics
            .files_deleted
            .into_iter()
            .map(|f| {
                let f = f.trim_start_matches('/');
                f.strip_prefix(&root)
                    .map(|rest| rest.trim_start_matches('/'))
                    .unwrap_or(f)
                    .to_string()
            })
            .collect();
        candidates.sort();
        candidates.dedup();
        let mut stats = VacuumStats {
            files: Vec::new(),
            kept_after_ms: kept_after,
        };
        if candidates.is_empty() {
            return Ok(stats);
        }
        let refs = self
            .referenced(
                &table,
                kept_after,
                plan.keep_from_version,
                now - ORPHAN_MIN_AGE_MS,
            )
            .await?;
        let store = table.object_store();
        for file in candidates {
            if refs.readable.contains(&file) {
                continue;
            }
            let location = store_path(&file);
            if !refs.recent.contains(&file) {
                // Written in the last hour and in no commit of that hour: a run's, still
                // writing (or one that crashed just now).
                match store.head(&location).await {
                    Ok(meta) if meta.last_modified.timestamp_millis() > now - ORPHAN_MIN_AGE_MS => {
                        continue;
                    }
                    Ok(_) => {}
                    Err(object_store::Error::NotFound { .. }) => continue,
                    Err(e) => {
                        return Err(Error::Store {
                            context: format!("vacuuming `{}`: reading `{file}`", self.name),
                            source: e,
                        });
                    }
                }
            }
            if !plan.dry_run {
                match store.delete(&location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => {
                        return Err(Error::Store {
                            context: format!("vacuuming `{}`: deleting `{file}`", self.name),
                            source: e,
                        });
                    }
                }
            }
            stats.files.push(file);
            if !plan.dry_run && stats.files.len() == 1 {
                // One file deleted, the others still to go: deleting again is harmless.
                smelt_engine::failpoint("before_vacuum_rest")?;
            }
        }
        if !plan.dry_run && !stats.files.is_empty() {
            tracing::info!(table = %self.name, files = stats.files.len(), "vacuumed");
        }
        Ok(stats)
    }

    /// The files the commits vacuum must keep readable reference: those committed at or
    /// after `kept_after` (ms) or from `keep_from_version` on; and those committed at or
    /// after `recent_after`.
    async fn referenced(
        &self,
        table: &deltalake::DeltaTable,
        kept_after: i64,
        keep_from_version: Option<i64>,
        recent_after: i64,
    ) -> Result<References> {
        let mut refs = References::default();
        let Some(latest) = table.version() else {
            return Ok(refs);
        };
        let root = crate::dv::table_root(table);
        let name = self.name.to_string();
        let clock = crate::commit_time::CommitClock::of(table, &name).await?;
        for version in (0..=latest).rev() {
            let Some(actions) = self.actions_at(table, version).await? else {
                // Cleaned up: older versions cannot be read any more.
                break;
            };
            let ict = actions.iter().find_map(|a| match a {
                Action::CommitInfo(info) => info.in_commit_timestamp,
                _ => None,
            });
            // Delta's commit time; a commit listed after the clock counts as inside every
            // window.
            let at = clock.time(&name, version as i64, ict)?.unwrap_or(i64::MAX);
            let readable =
                at >= kept_after || keep_from_version.is_some_and(|v| version as i64 >= v);
            let recent = at >= recent_after;
            if !readable && !recent {
                break;
            }
            for path in paths_of(&actions, &root) {
                if recent {
                    refs.recent.insert(path.clone());
                }
                if readable {
                    refs.readable.insert(path);
                }
            }
        }
        Ok(refs)
    }
}

/// One partition's files for optimize: heavy with deleted rows, small, the others.
#[derive(Default)]
struct Partition {
    heavy: Vec<ActiveFile>,
    small: Vec<ActiveFile>,
    rest: Vec<ActiveFile>,
}

impl Partition {
    /// Its files' places in the log's file list.
    fn indices(&self) -> Vec<usize> {
        (self.heavy.iter().chain(&self.small).chain(&self.rest))
            .map(|f| f.index)
            .collect()
    }
}

/// Files written less than this long ago (ms) that no commit of that time holds are kept:
/// a run may be writing them.
const ORPHAN_MIN_AGE_MS: i64 = 60 * 60 * 1000;

/// What the commits vacuum keeps readable reference.
#[derive(Default)]
struct References {
    /// Files of commits inside the retention or a flow has still to read.
    readable: HashSet<String>,
    /// Files of commits of the last hour.
    recent: HashSet<String>,
}

/// The files one commit names (as store paths in the table): data files added and removed,
/// change data files, and the deletion vector files of both.
fn paths_of(actions: &[Action], root: &url::Url) -> Vec<String> {
    let mut out = Vec::new();
    let mut dv = |d: &Option<deltalake::kernel::DeletionVectorDescriptor>| {
        if let Some(path) = d.as_ref().and_then(|d| crate::dv::file_of(d, root)) {
            out.push(path);
        }
    };
    let mut files = Vec::new();
    for a in actions {
        match a {
            Action::Add(add) => {
                files.push(add.path.clone());
                dv(&add.deletion_vector);
            }
            Action::Remove(r) => {
                files.push(r.path.clone());
                dv(&r.deletion_vector);
            }
            Action::Cdc(c) => files.push(c.path.clone()),
            _ => {}
        }
    }
    out.extend(files.iter().map(|p| store_path(p).to_string()));
    out
}

/// A path of the log (or a vacuum candidate) as a store path, as smelt reads files.
fn store_path(path: &str) -> object_store::path::Path {
    object_store::path::Path::parse(path).unwrap_or_else(|_| object_store::path::Path::from(path))
}
