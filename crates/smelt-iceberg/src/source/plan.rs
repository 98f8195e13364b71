//! Which data files (and which kind of change) make up an Iceberg table's snapshot or its
//! changes after a sequence number, read from the snapshots' manifests.

use std::collections::HashMap;
use std::sync::Arc;

use futures::TryStreamExt;
use iceberg::spec::{
    DataContentType, ManifestContentType, ManifestStatus, Operation, PartitionSpecRef, SnapshotRef,
    Struct,
};
use iceberg::table::Table;
use smelt_core::change::{DELETE, INSERT};
use smelt_spec::TableName;

use crate::error::{Context, Error, Result};
use crate::manifests;

/// One data file to read, and the change its rows are.
#[derive(Debug, Clone)]
pub(crate) struct FileToRead {
    pub path: String,
    pub size: u64,
    pub records: u64,
    pub format: iceberg::spec::DataFileFormat,
    pub partition: Struct,
    pub spec: Option<PartitionSpecRef>,
    /// `insert` or `delete`.
    pub kind: &'static str,
    /// The sequence number of the snapshot the change belongs to (smelt's "version").
    pub version: i64,
    /// When that snapshot was committed, µs since the epoch.
    pub timestamp_us: i64,
    /// Delete files that apply (a snapshot read only).
    pub deletes: Vec<iceberg::scan::FileScanTaskDeleteFile>,
}

/// One snapshot of the range a run reads.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub snapshot: SnapshotRef,
    /// Operations that move rows without changing them (`replace`: compaction).
    pub moves_only: bool,
    /// `overwrite` or `delete`: rewrites or removes rows.
    pub rewrites: bool,
}

/// A part of the changes, read in order.
#[derive(Debug, Clone)]
pub(crate) enum Part {
    /// Every row of a file is one kind of change.
    File(FileToRead),
    /// A snapshot that removed data files and added others (a copy-on-write update, merge
    /// or overwrite): the rows found on both sides are carried over, not changed, and are
    /// left out; what remains of the removed rows are deletes (emitted when
    /// `emit_removed`), what remains of the added rows are inserts.
    Rewrite {
        removed: Vec<FileToRead>,
        added: Vec<FileToRead>,
        emit_removed: bool,
    },
}

impl Part {
    /// The files the part reads.
    pub fn files(&self) -> Box<dyn Iterator<Item = &FileToRead> + '_> {
        match self {
            Part::File(f) => Box::new(std::iter::once(f)),
            Part::Rewrite { removed, added, .. } => Box::new(removed.iter().chain(added)),
        }
    }
}

/// What a plan of changes holds.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    pub parts: Vec<Part>,
    /// Removed data files not read (deletes the flow does not apply).
    pub skipped_deletes: usize,
}

/// The snapshots after sequence number `after` up to `snapshot`, oldest first. Fails, naming
/// the fix, when some of them were expired.
pub(crate) fn steps(
    name: &TableName,
    table: &Table,
    snapshot: Option<&SnapshotRef>,
    after: i64,
) -> Result<Vec<Step>> {
    let Some(snapshot) = snapshot else {
        return Ok(Vec::new());
    };
    let metadata = table.metadata_ref();
    let mut chain: Vec<SnapshotRef> = Vec::new();
    let mut at = Some(snapshot.clone());
    while let Some(s) = at {
        if s.sequence_number() <= after {
            break;
        }
        at = match s.parent_snapshot_id() {
            Some(parent) => match metadata.snapshot_by_id(parent) {
                Some(p) => Some(p.clone()),
                None => {
                    return Err(Error::user(
                        format!(
                            "`{name}`: the snapshots after sequence number {after} are no longer all there (snapshot {parent}, the parent of {}, was expired)",
                            s.snapshot_id()
                        ),
                        "their changes can no longer be read; rebuild what reads the table with `smelt run --full-refresh`, and keep snapshots longer than the time between runs",
                    ));
                }
            },
            None => None,
        };
        chain.push(s);
    }
    chain.reverse();
    // A writer that expires a snapshot may also drop its child's parent link (pyiceberg
    // does): the oldest snapshot read then has no parent, and the sequence numbers between
    // the watermark and it were lost.
    if let Some(oldest) = chain.first()
        && oldest.parent_snapshot_id().is_none()
        && oldest.sequence_number() > after + 1
    {
        return Err(Error::user(
            format!(
                "`{name}`: the snapshots after sequence number {after} are no longer all there (the oldest left, snapshot {} at sequence number {}, has no parent: the ones before it were expired)",
                oldest.snapshot_id(),
                oldest.sequence_number()
            ),
            "their changes can no longer be read; rebuild what reads the table with `smelt run --full-refresh`, and keep snapshots longer than the time between runs",
        ));
    }
    Ok(chain
        .into_iter()
        .map(|snapshot| {
            let op = &snapshot.summary().operation;
            Step {
                moves_only: matches!(op, Operation::Replace),
                rewrites: matches!(op, Operation::Overwrite | Operation::Delete),
                snapshot,
            }
        })
        .collect())
}

/// The files each of `steps` added (inserts) and removed (deletes, read only when
/// `read_removed` or when the snapshot also added files), in snapshot, manifest and entry
/// order; a snapshot's removed files come before its added ones.
pub(crate) async fn plan_changes(
    name: &TableName,
    table: &Table,
    steps: &[Step],
    read_removed: bool,
) -> Result<Changes> {
    let mut changes = Changes::default();
    for step in steps {
        if step.moves_only {
            continue;
        }
        let snapshot = &step.snapshot;
        let id = snapshot.snapshot_id();
        let (version, at) = (snapshot.sequence_number(), snapshot.timestamp_ms() * 1000);
        let list = manifests::list(name, table, snapshot).await?;
        let mut inserts = Vec::new();
        let mut deletes = Vec::new();
        for manifest in list.entries().iter().filter(|m| m.added_snapshot_id == id) {
            if manifest.content == ManifestContentType::Deletes {
                return Err(Error::user(
                    format!(
                        "`{name}` snapshot {id} ({}) deletes rows with delete files (merge-on-read); smelt does not read row-level deletes as changes yet",
                        step.snapshot.summary().operation.as_str()
                    ),
                    "write the table copy-on-write (`write.delete.mode`, `write.update.mode`, `write.merge.mode` = `copy-on-write`), or rebuild what reads it with `smelt run --full-refresh` after such snapshots",
                ));
            }
            let loaded = manifests::load(name, table, manifest).await?;
            let spec: Option<PartitionSpecRef> =
                Some(Arc::new(loaded.metadata().partition_spec().clone()));
            for entry in loaded.entries() {
                if entry.snapshot_id() != Some(id) || entry.content_type() != DataContentType::Data
                {
                    continue;
                }
                let kind = match entry.status() {
                    ManifestStatus::Added => INSERT,
                    ManifestStatus::Deleted => DELETE,
                    ManifestStatus::Existing => continue,
                };
                let file = FileToRead {
                    path: entry.file_path().to_string(),
                    size: entry.file_size_in_bytes(),
                    records: entry.record_count(),
                    format: entry.file_format(),
                    partition: entry.data_file().partition().clone(),
                    spec: spec.clone(),
                    kind,
                    version,
                    timestamp_us: at,
                    deletes: Vec::new(),
                };
                if kind == INSERT {
                    inserts.push(file);
                } else {
                    deletes.push(file);
                }
            }
        }
        if !deletes.is_empty() && !inserts.is_empty() {
            changes.parts.push(Part::Rewrite {
                removed: deletes,
                added: inserts,
                emit_removed: read_removed,
            });
            continue;
        }
        if read_removed {
            changes.parts.extend(deletes.into_iter().map(Part::File));
        } else {
            changes.skipped_deletes += deletes.len();
        }
        changes.parts.extend(inserts.into_iter().map(Part::File));
    }
    Ok(changes)
}

/// The live data files of `snapshot`, with the delete files that apply, in the order they
/// were added (sequence number, then manifest and entry order), each stamped with the
/// sequence number and time of the snapshot that added it.
pub(crate) async fn plan_snapshot(
    name: &TableName,
    table: &Table,
    snapshot: &SnapshotRef,
) -> Result<Vec<FileToRead>> {
    let metadata = table.metadata_ref();
    let id = snapshot.snapshot_id();
    let scan = table
        .scan()
        .snapshot_id(id)
        .build()
        .context(|| format!("planning a read of `{name}` at snapshot {id}"))?;
    let tasks: Vec<iceberg::scan::FileScanTask> = scan
        .plan_files()
        .await
        .context(|| format!("planning a read of `{name}` at snapshot {id}"))?
        .try_collect()
        .await
        .context(|| format!("planning a read of `{name}` at snapshot {id}"))?;
    let mut deletes: HashMap<String, Vec<iceberg::scan::FileScanTaskDeleteFile>> = HashMap::new();
    for task in tasks {
        deletes
            .entry(task.data_file_path.clone())
            .or_default()
            .extend(task.deletes);
    }
    // The oldest snapshot still there stamps files whose snapshot was expired.
    let oldest_ms = metadata
        .snapshots()
        .map(|s| s.timestamp_ms())
        .min()
        .unwrap_or(snapshot.timestamp_ms());
    let list = manifests::list(name, table, snapshot).await?;
    let mut files = Vec::new();
    for manifest in list.entries() {
        if manifest.content != ManifestContentType::Data {
            continue;
        }
        let loaded = manifests::load(name, table, manifest).await?;
        let spec: Option<PartitionSpecRef> =
            Some(Arc::new(loaded.metadata().partition_spec().clone()));
        for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
            let Some(deletes) = deletes.remove(entry.file_path()) else {
                // Planned away (nothing to read): not a file of the snapshot's rows.
                continue;
            };
            let version = entry.sequence_number().unwrap_or(0);
            let at_ms = entry
                .snapshot_id()
                .and_then(|s| metadata.snapshot_by_id(s))
                .map(|s| s.timestamp_ms())
                .unwrap_or(oldest_ms);
            files.push(FileToRead {
                path: entry.file_path().to_string(),
                size: entry.file_size_in_bytes(),
                records: entry.record_count(),
                format: entry.file_format(),
                partition: entry.data_file().partition().clone(),
                spec: spec.clone(),
                kind: INSERT,
                version,
                timestamp_us: at_ms * 1000,
                deletes,
            });
        }
    }
    // Stable: manifest and entry order within one sequence number.
    files.sort_by_key(|f| f.version);
    Ok(files)
}
