//! Commits: the assembly of a run's commit and the choice of its `DeltaOperation`
//! (`commit`, `commit_staged`), committing actions (`commit_actions`), creating the table
//! with its first commit (`create_with`). The watermark they carry is `watermark.rs`'s.

use std::collections::HashSet;

use arrow::datatypes::SchemaRef;
use deltalake::DeltaTable;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, Protocol, StructType};
use deltalake::logstore::get_actions;
use deltalake::protocol::{DeltaOperation, SaveMode};
use smelt_engine::ports::{TableSink, Watermark, WriteStats};

use super::DeltaLakeTable;
use crate::error::{Context, Error, Result};

/// The table property that turns deletion vectors on.
const DELETION_VECTORS: &str = "delta.enableDeletionVectors";
/// The table property that turns the change feed on.
const CHANGE_FEED: &str = "delta.enableChangeDataFeed";

impl DeltaLakeTable {
    /// Commits `actions` with the watermark and reloads the table at the new version.
    pub(super) async fn commit_actions(
        &mut self,
        actions: Vec<Action>,
        operation: DeltaOperation,
        props: CommitProperties,
    ) -> Result<WriteStats> {
        let stats = count_actions(&actions);
        let mut table = self.table()?.clone();
        let snapshot = table
            .snapshot()
            .context(|| format!("reading `{}`", self.name))?;
        crate::features::check_writable(&self.name.to_string(), snapshot)?;
        let commit = CommitBuilder::from(props)
            .with_actions(actions)
            .build(Some(snapshot), table.log_store(), operation)
            .await
            .map_err(|e| self.commit_error(e, "committing to"))?;
        table
            .update_incremental(Some(commit.version()))
            .await
            .context(|| format!("reloading `{}`", self.name))?;
        self.table = Some(table);
        Ok(WriteStats {
            version: commit.version() as i64,
            ..stats
        })
    }

    /// `TableSink::commit`: the staged commit, then the ledgers.
    pub(super) async fn commit(
        &mut self,
        keys: &[String],
        watermark: &Watermark,
    ) -> smelt_engine::Result<WriteStats> {
        let stats = self.commit_staged(keys, watermark).await?;
        let place = self
            .table
            .as_ref()
            .map(|t| crate::ledger::Place::of(&self.lake, &self.name, t));
        let Some(place) = place else {
            return Ok(stats);
        };
        if !watermark.extra.is_empty() {
            // Committed, its ledger entry not yet written beside the table.
            smelt_engine::failpoint("before_delta_ledger")?;
        }
        crate::ledger::record(
            &place,
            self.table.as_ref(),
            &self.name,
            watermark,
            stats.version,
        )
        .await;
        Ok(stats)
    }

    /// [`TableSink::commit`](smelt_engine::ports::TableSink::commit) without the
    /// ledgers.
    async fn commit_staged(
        &mut self,
        keys: &[String],
        watermark: &Watermark,
    ) -> smelt_engine::Result<WriteStats> {
        let props =
            Self::commit_properties(watermark, self.feed_on() && !self.writes_change_data());
        let mut staged = std::mem::take(&mut self.staged);
        let protocol = self.features_to_turn_on(&mut staged)?.map(Action::Protocol);
        if let Some(schema) = self.pending.take() {
            return Ok(self
                .create_with(schema, staged.adds, staged.properties, props)
                .await?);
        }
        // New columns or properties: the table's metadata, changed, in this commit.
        let metadata = if staged.evolved.is_some() || !staged.properties.is_empty() {
            let snapshot = self
                .table()?
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?;
            let mut metadata = snapshot.metadata().clone();
            if let Some(evolved) = &staged.evolved {
                let columns: StructType =
                    evolved.as_ref().try_into_kernel().map_err(Error::Arrow)?;
                metadata = deltalake::kernel::MetadataExt::with_schema(metadata, &columns)
                    .map_err(deltalake::DeltaTableError::from)
                    .context(|| format!("adding columns to `{}`", self.name))?;
            }
            for (k, v) in &staged.properties {
                metadata =
                    deltalake::kernel::MetadataExt::add_config_key(metadata, k.clone(), v.clone())
                        .map_err(deltalake::DeltaTableError::from)
                        .context(|| format!("setting `{k}` on `{}`", self.name))?;
            }
            Some(Action::Metadata(metadata))
        } else {
            None
        };
        if staged.overwrite {
            let table = self.table()?;
            let snapshot = table
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?;
            let mut actions: Vec<Action> = protocol.into_iter().chain(metadata).collect();
            actions.extend(
                snapshot
                    .log_data()
                    .iter()
                    .map(|f| Action::Remove(f.remove_action(true))),
            );
            actions.extend(staged.adds.into_iter().map(Action::Add));
            let operation = DeltaOperation::Write {
                mode: SaveMode::Overwrite,
                partition_by: None,
                predicate: None,
            };
            return Ok(self.commit_actions(actions, operation, props).await?);
        }
        let mut actions: Vec<Action> = protocol.into_iter().chain(metadata).collect();
        if !staged.replaced.is_empty() || !staged.deleted.is_empty() {
            for r in self
                .replace(&staged.replaced, &staged.deleted, keys)
                .await?
            {
                actions.push(Action::Remove(r.remove));
                actions.extend(r.adds.into_iter().map(Action::Add));
                actions.extend(r.cdc.into_iter().map(Action::Cdc));
            }
        }
        let mut rows_removed = 0;
        if let Some(predicate) = &staged.delete_where
            && self.table.is_some()
        {
            let (rewrites, rows) = self.delete_where(predicate).await?;
            rows_removed = rows;
            for r in rewrites {
                actions.push(Action::Remove(r.remove));
                actions.extend(r.adds.into_iter().map(Action::Add));
                actions.extend(r.cdc.into_iter().map(Action::Cdc));
            }
        }
        let rewrote = actions.iter().any(|a| matches!(a, Action::Remove(_)));
        // Derived change data: files folded in a commit that changes data would read as
        // their rows deleted and inserted again.
        let derived = self.feed_on() && !self.writes_change_data();
        if !staged.adds.is_empty() && self.compact && !derived {
            let rewritten: HashSet<String> = actions
                .iter()
                .filter_map(|a| match a {
                    Action::Remove(r) => Some(r.path.clone()),
                    _ => None,
                })
                .collect();
            actions.extend(self.compact(&rewritten, keys).await?);
        }
        actions.extend(staged.adds.into_iter().map(Action::Add));
        actions.extend(staged.cdc.into_iter().map(Action::Cdc));
        let operation = if let Some(predicate) = &staged.delete_where {
            DeltaOperation::Write {
                mode: SaveMode::Overwrite,
                partition_by: None,
                predicate: Some(predicate.text().to_string()),
            }
        } else if rewrote {
            DeltaOperation::Merge {
                predicate: None,
                merge_predicate: Some(
                    keys.iter()
                        .map(|k| format!("target.`{k}` <=> source.`{k}`"))
                        .collect::<Vec<_>>()
                        .join(" AND "),
                ),
                matched_predicates: vec![],
                not_matched_predicates: vec![],
                not_matched_by_source_predicates: vec![],
            }
        } else {
            DeltaOperation::Write {
                mode: SaveMode::Append,
                partition_by: None,
                predicate: None,
            }
        };
        let mut stats = self.commit_actions(actions, operation, props).await?;
        stats.rows_removed = rows_removed;
        Ok(stats)
    }

    /// The features this commit turns on, as table properties added to `staged` and the
    /// protocol that allows them (`None`: the table's allows them already): the change feed
    /// wanted on a table without one (the commit writes change data already), deletion
    /// vectors from the first commit written merge-on-read.
    fn features_to_turn_on(&self, staged: &mut super::Staged) -> Result<Option<Protocol>> {
        let mut protocol = None;
        if self.table.is_some() && self.change_feed && !self.feed_property() {
            staged
                .properties
                .push((CHANGE_FEED.to_string(), "true".to_string()));
            let snapshot = self
                .table()?
                .snapshot()
                .context(|| format!("reading `{}`", self.name))?;
            protocol = crate::features::with_change_feed(snapshot.protocol())?;
        }
        if self.merge_on_read {
            let on = self
                .property(DELETION_VECTORS)
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            if !on {
                staged
                    .properties
                    .push((DELETION_VECTORS.to_string(), "true".to_string()));
            }
            if let Some(table) = &self.table {
                let snapshot = table
                    .snapshot()
                    .context(|| format!("reading `{}`", self.name))?;
                let current = protocol.as_ref().unwrap_or(snapshot.protocol());
                protocol = crate::features::with_deletion_vectors(current)?.or(protocol);
            }
        }
        Ok(protocol)
    }

    /// Creates the table and writes its first rows and the watermark in one commit.
    async fn create_with(
        &mut self,
        schema: SchemaRef,
        adds: Vec<Add>,
        properties: Vec<(String, String)>,
        props: CommitProperties,
    ) -> Result<WriteStats> {
        self.lake.prepare(&self.name)?;
        let mut stats = WriteStats {
            version: 0,
            files_added: adds.len(),
            files_removed: 0,
            bytes_written: adds.iter().map(|a| a.size.max(0) as u64).sum(),
            rows_removed: 0,
            files_marked: 0,
        };
        let columns: StructType = schema.as_ref().try_into_kernel().map_err(Error::Arrow)?;
        let table = self.lake.handle(&self.name).await?;
        let feed = self.change_feed.then_some("true");
        let table = table
            .create()
            .with_columns(columns.fields().cloned())
            .with_table_name(self.name.table.clone())
            .with_save_mode(SaveMode::ErrorIfExists)
            .with_configuration_property(deltalake::TableProperty::EnableChangeDataFeed, feed)
            .with_configuration(properties.into_iter().map(|(k, v)| (k, Some(v))))
            .with_actions(adds.into_iter().map(Action::Add))
            .with_commit_properties(props)
            .await
            .map_err(|e| self.commit_error(e, "creating silver table"))?;
        stats.version = table.version().map(|v| v as i64).unwrap_or_default();
        self.table = Some(table);
        Ok(stats)
    }

    /// The error of a commit: another writer's commit that landed first is a user error
    /// that says what happened and what to do.
    fn commit_error(&self, e: deltalake::DeltaTableError, doing: &str) -> Error {
        use deltalake::DeltaTableError as E;
        use deltalake::kernel::transaction::TransactionError as T;
        let lost_race = match &e {
            E::VersionAlreadyExists(_)
            | E::Transaction {
                source: T::MaxCommitAttempts(_) | T::VersionAlreadyExists(_),
            } => true,
            // Creating a table another writer created since this run looked
            // (`CreateError::TableAlreadyExists`, which delta-rs does not export).
            E::GenericError { source } => source.to_string().contains("table already exists"),
            _ => false,
        };
        if lost_race {
            return Error::user(
                format!(
                    "`{}` changed while this run was writing it: another writer committed first, and this run's commit was refused (nothing of it was written to `{}`)",
                    self.name, self.name
                ),
                "run again: the rerun reads what the other writer committed and applies only what is left. Two runs of one flow at once cannot both commit",
            );
        }
        Error::Delta {
            context: format!("{doing} `{}`", self.name),
            source: e,
        }
    }

    /// The actions of commit `version` of `table`; `None` when its log entry is gone.
    pub(super) async fn actions_at(
        &self,
        table: &DeltaTable,
        version: u64,
    ) -> Result<Option<Vec<Action>>> {
        let reading = || format!("reading the log of `{}`", self.name);
        let Some(bytes) = table
            .log_store()
            .read_commit_entry(version)
            .await
            .context(reading)?
        else {
            return Ok(None);
        };
        Ok(Some(get_actions(version, &bytes).context(reading)?))
    }
}

/// What `actions` write: a file added again beside its own remove with a deletion vector
/// (merge-on-read marking rows) counts as marked, its vector's bytes as written; a data
/// file added counts as written, a remove as rewritten.
fn count_actions(actions: &[Action]) -> WriteStats {
    let removed: std::collections::HashSet<&str> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Remove(r) => Some(r.path.as_str()),
            _ => None,
        })
        .collect();
    let mut stats = WriteStats::default();
    let mut vector_files = std::collections::HashSet::new();
    for a in actions {
        match a {
            Action::Add(add) => match &add.deletion_vector {
                Some(dv) if removed.contains(add.path.as_str()) => {
                    stats.files_marked += 1;
                    // The vector, its size and checksum; the vector file's version byte once.
                    stats.bytes_written += dv.size_in_bytes.max(0) as u64 + 8;
                    if vector_files.insert(dv.path_or_inline_dv.as_str()) {
                        stats.bytes_written += 1;
                    }
                }
                _ => {
                    stats.files_added += 1;
                    stats.bytes_written += add.size.max(0) as u64;
                }
            },
            Action::Remove(_) => stats.files_removed += 1,
            _ => {}
        }
    }
    // Each marked file's remove is not a rewrite.
    stats.files_removed = stats.files_removed.saturating_sub(stats.files_marked);
    stats
}
