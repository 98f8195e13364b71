//! Table maintenance: `optimize` (rewriting files heavy with deleted rows, and packing
//! small ones, in a commit that changes no data) and `vacuum` (deleting the files no
//! version still needed holds, through delta-rs' vacuum).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::logstore::get_actions;
use deltalake::operations::vacuum::VacuumMode;
use deltalake::protocol::DeltaOperation;
use smelt_engine::ports::{OptimizePolicy, OptimizeStats, VacuumPlan, VacuumStats};

use super::lookup::read_whole;
use super::{ActiveFile, DeltaSilver};
use crate::error::{Context, Result};

/// Files written this long before the oldest commit a flow still has to read are kept too
/// (a commit's files are written before it lands).
const WRITE_MARGIN_MS: i64 = 60 * 60 * 1000;

impl DeltaSilver {
    /// `TableSink::optimize`: per partition, the files whose deleted share reaches the
    /// policy's, and the small files when there are two or more to pack, rewritten into
    /// files of up to the table's rows per file (deleted rows dropped).
    pub(super) async fn optimize(&mut self, policy: &OptimizePolicy) -> Result<OptimizeStats> {
        let table = self.table()?.clone();
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        let schema = snapshot.snapshot().arrow_schema();
        let small_rows = policy
            .small_file_rows
            .unwrap_or(self.rows_per_file / 4)
            .max(1);
        let mut by_partition: BTreeMap<String, (Vec<ActiveFile>, Vec<ActiveFile>)> =
            BTreeMap::new();
        for f in self.active_files(&table).await? {
            let live = f.rows.unwrap_or(usize::MAX);
            let total = live.saturating_add(f.deleted.len()).max(1);
            let heavy = !f.deleted.is_empty()
                && f.deleted.len() as f64 / total as f64 >= policy.deleted_fraction;
            let mut part: Vec<_> = f.file.partition_values.iter().collect();
            part.sort();
            let entry = by_partition.entry(format!("{part:?}")).or_default();
            if heavy {
                entry.0.push(f);
            } else if live < small_rows {
                entry.1.push(f);
            }
        }
        // Per partition: the heavy files, and the small ones when there are two files or
        // more to write together.
        let groups: Vec<Vec<ActiveFile>> = by_partition
            .into_values()
            .map(|(mut heavy, small)| {
                if heavy.len() + small.len() >= 2 {
                    heavy.extend(small);
                }
                heavy
            })
            .filter(|g| !g.is_empty())
            .collect();
        let mut stats = OptimizeStats::default();
        if groups.is_empty() {
            return Ok(stats);
        }
        let store = table.object_store();
        let name = self.name.to_string();
        let mut actions = Vec::new();
        // One output file's worth of rows at a time, never the whole group.
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0;
        for group in groups {
            for f in group {
                let rows =
                    read_whole(Arc::clone(&store), &name, &f.file, None, None, &schema).await?;
                stats.rows_purged += f.deleted.len() as u64;
                stats.rows_rewritten += rows.num_rows() as u64;
                stats.files_removed += 1;
                let mut remove = f.remove;
                remove.data_change = false;
                actions.push(Action::Remove(remove));
                pending_rows += rows.num_rows();
                pending.push(rows);
                if pending_rows >= self.rows_per_file {
                    self.flush(&schema, &mut pending, &mut actions, &mut stats)
                        .await?;
                    pending_rows = 0;
                }
            }
            // Partitions are not mixed in one file.
            self.flush(&schema, &mut pending, &mut actions, &mut stats)
                .await?;
            pending_rows = 0;
        }
        let props = CommitProperties::default()
            .with_metadata([("smelt.operation".to_string(), serde_json::json!("optimize"))])
            .with_max_retries(0);
        let operation = DeltaOperation::Optimize {
            predicate: None,
            target_size: self.rows_per_file as i64,
        };
        let committed = self.commit_actions(actions, operation, props).await?;
        stats.version = Some(committed.version);
        tracing::info!(table = %self.name, files = stats.files_removed, purged = stats.rows_purged, "optimized");
        Ok(stats)
    }

    /// Writes the rows in `pending` (then empties it) as data files that change no data.
    async fn flush(
        &self,
        schema: &arrow::datatypes::SchemaRef,
        pending: &mut Vec<RecordBatch>,
        actions: &mut Vec<Action>,
        stats: &mut OptimizeStats,
    ) -> Result<()> {
        if pending.iter().all(|b| b.num_rows() == 0) {
            pending.clear();
            return Ok(());
        }
        let merged = arrow::compute::concat_batches(schema, pending.iter())?;
        pending.clear();
        for mut add in self.write_data(&merged, &[]).await? {
            add.data_change = false;
            stats.files_added += 1;
            stats.bytes_written += add.size.max(0) as u64;
            actions.push(Action::Add(add));
        }
        Ok(())
    }

    /// `TableSink::vacuum`: delta-rs' vacuum (full mode: also files no version ever held,
    /// such as a crashed run's), with the retention stretched back to keep every file the
    /// oldest commit a flow still has to read may need.
    pub(super) async fn vacuum(&mut self, plan: &VacuumPlan) -> Result<VacuumStats> {
        let table = self.table()?.clone();
        let now = chrono::Utc::now().timestamp_millis();
        let mut kept_after = now - plan.retain_ms.max(0);
        if let Some(version) = plan.keep_from_version
            && table.version().is_some_and(|v| version <= v as i64)
        {
            let at = self.commit_time(&table, version).await?;
            kept_after = kept_after.min(at.map_or(0, |at| at - WRITE_MARGIN_MS));
        }
        let (table, metrics) = table
            .vacuum()
            .with_retention_period(chrono::Duration::milliseconds(now - kept_after))
            .with_enforce_retention_duration(false)
            .with_mode(VacuumMode::Full)
            .with_dry_run(plan.dry_run)
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
        self.table = Some(table);
        let mut files: Vec<String> = metrics
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
        files.sort();
        files.dedup();
        Ok(VacuumStats {
            files,
            kept_after_ms: kept_after,
        })
    }

    /// The commit time (ms) of `version`; `None` when its log entry is gone.
    async fn commit_time(
        &self,
        table: &deltalake::DeltaTable,
        version: i64,
    ) -> Result<Option<i64>> {
        let Some(bytes) = table
            .log_store()
            .read_commit_entry(version as u64)
            .await
            .context(|| format!("reading the log of `{}`", self.name))?
        else {
            return Ok(None);
        };
        Ok(get_actions(version as u64, &bytes)
            .context(|| format!("reading the log of `{}`", self.name))?
            .into_iter()
            .find_map(|a| match a {
                Action::CommitInfo(info) => info.in_commit_timestamp.or(info.timestamp),
                _ => None,
            }))
    }
}
