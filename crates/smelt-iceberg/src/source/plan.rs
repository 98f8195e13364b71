//! Which data files (and which kind of change) make up an Iceberg table's snapshot or its
//! changes after a sequence number, read from the snapshots' manifests.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use iceberg::spec::{
    DataContentType, ManifestContentType, ManifestStatus, Operation, PartitionSpecRef, SnapshotRef,
    Struct,
};
use iceberg::table::Table;
use smelt_core::change::{DELETE, INSERT};
use smelt_spec::TableName;

use crate::deletes::{self as delete_files, EqualityDeleteFile, PositionDeleteFile};
use crate::error::{Error, Result};
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
    /// Delete files that apply: a snapshot read, and a removed file read without the rows
    /// deleted before it was removed.
    pub deletes: Vec<iceberg::scan::FileScanTaskDeleteFile>,
    /// Which rows, by position in the file.
    pub rows: Rows,
}

impl FileToRead {
    /// The data file of manifest `entry` (of partition spec `spec`), all its rows read as
    /// `kind` changes of `version`, committed at `timestamp_us`.
    fn of(
        entry: &iceberg::spec::ManifestEntry,
        spec: &Option<PartitionSpecRef>,
        kind: &'static str,
        version: i64,
        timestamp_us: i64,
    ) -> Self {
        FileToRead {
            path: entry.file_path().to_string(),
            size: entry.file_size_in_bytes(),
            records: entry.record_count(),
            format: entry.file_format(),
            partition: entry.data_file().partition().clone(),
            spec: spec.clone(),
            kind,
            version,
            timestamp_us,
            deletes: Vec::new(),
            rows: Rows::All,
        }
    }
}

/// Which rows of a data file a read keeps.
#[derive(Debug, Clone, Default)]
pub(crate) enum Rows {
    /// Every row.
    #[default]
    All,
    /// Only these positions (sorted): the rows position deletes name.
    Only(Arc<Vec<u64>>),
    /// All but these positions (sorted): a file its own snapshot deletes rows of.
    Except(Arc<Vec<u64>>),
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
    /// A snapshot that added equality-delete files: the rows of `rows_of` (the parent
    /// snapshot's live files, stamped as the snapshot's deletes) that they match.
    EqualityDeletes {
        deletes: Vec<EqualityDeleteFile>,
        rows_of: Vec<FileToRead>,
    },
}

impl Part {
    /// The files the part reads.
    pub fn files(&self) -> Box<dyn Iterator<Item = &FileToRead> + '_> {
        match self {
            Part::File(f) => Box::new(std::iter::once(f)),
            Part::Rewrite { removed, added, .. } => Box::new(removed.iter().chain(added)),
            Part::EqualityDeletes { rows_of, .. } => Box::new(rows_of.iter()),
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
        // (A table's first snapshot has sequence number 1: reading after any number below 1
        // reads it whole.)
        && oldest.sequence_number() > after.max(0) + 1
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
/// `read_removed` or when the snapshot also added files), and the rows its delete files
/// delete (read only when `read_removed`), in snapshot, manifest and entry order; a
/// snapshot's deletes come before its inserts.
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
        let mut position_deletes = Vec::new();
        let mut equality_deletes = Vec::new();
        for manifest in list.entries().iter().filter(|m| m.added_snapshot_id == id) {
            let loaded = manifests::load(name, table, manifest).await?;
            let spec: Option<PartitionSpecRef> =
                Some(Arc::new(loaded.metadata().partition_spec().clone()));
            for entry in loaded.entries() {
                if entry.snapshot_id() != Some(id) {
                    continue;
                }
                let is_delete = entry.content_type() != DataContentType::Data;
                if is_delete && entry.status() == ManifestStatus::Added {
                    refuse_unread(name, id, entry.data_file())?;
                }
                match (entry.content_type(), entry.status()) {
                    (DataContentType::PositionDeletes, ManifestStatus::Added) => {
                        position_deletes.push(PositionDeleteFile {
                            path: entry.file_path().to_string(),
                            size: entry.file_size_in_bytes(),
                            format: entry.file_format(),
                        });
                        continue;
                    }
                    (DataContentType::EqualityDeletes, ManifestStatus::Added) => {
                        equality_deletes.push(EqualityDeleteFile {
                            path: entry.file_path().to_string(),
                            size: entry.file_size_in_bytes(),
                            format: entry.file_format(),
                            ids: entry.data_file().equality_ids().unwrap_or_default(),
                        });
                        continue;
                    }
                    (DataContentType::Data, _) => {}
                    // A delete file dropped (its data file rewritten or compacted).
                    _ => continue,
                }
                let kind = match entry.status() {
                    ManifestStatus::Added => INSERT,
                    ManifestStatus::Deleted => DELETE,
                    ManifestStatus::Existing => continue,
                };
                let file = FileToRead::of(entry, &spec, kind, version, at);
                if kind == INSERT {
                    inserts.push(file);
                } else {
                    deletes.push(file);
                }
            }
        }
        let parent = snapshot
            .parent_snapshot_id()
            .and_then(|p| table.metadata().snapshot_by_id(p).cloned());
        // The delete files live just before, per data file (planned once per snapshot): a
        // removed file is read without the rows they deleted, and a position they removed
        // is not deleted again.
        let live = match &parent {
            Some(parent)
                if !deletes.is_empty() || (read_removed && !position_deletes.is_empty()) =>
            {
                delete_files::live_deletes(name, table, parent).await?
            }
            _ => HashMap::new(),
        };
        for file in &mut deletes {
            file.deletes = live.get(&file.path).cloned().unwrap_or_default();
        }
        if !position_deletes.is_empty() {
            let mut marks = delete_files::read(name, table, &position_deletes).await?;
            // Rows of files the snapshot itself adds (Flink deletes within a checkpoint) were
            // never visible: those files are read without them.
            for file in &mut inserts {
                if let Some(at) = marks.iter().position(|(p, _)| *p == file.path) {
                    file.rows = Rows::Except(marks.remove(at).1);
                }
            }
            if read_removed {
                changes.parts.extend(
                    deleted_rows(name, table, snapshot, marks, &live)
                        .await?
                        .into_iter()
                        .map(Part::File),
                );
            } else {
                changes.skipped_deletes += position_deletes.len();
            }
        }
        if !equality_deletes.is_empty() {
            if read_removed {
                // The rows they delete are among those live just before (data files added
                // by the snapshot itself have its sequence number: not deleted).
                let mut rows_of = match &parent {
                    Some(parent) => plan_snapshot(name, table, parent).await?,
                    None => Vec::new(),
                };
                for file in &mut rows_of {
                    (file.kind, file.version, file.timestamp_us) = (DELETE, version, at);
                }
                changes.parts.push(Part::EqualityDeletes {
                    deletes: equality_deletes,
                    rows_of,
                });
            } else {
                changes.skipped_deletes += equality_deletes.len();
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

/// The rows that `marks` (the positions the position-delete files of `snapshot` name, per
/// data file) delete, as delete reads of those data files (in the order first named). A
/// position the parent's delete files (`live`, per data file) had already deleted is left
/// out: a writer may list it again in a new delete file (Spark's file-scoped deletes).
async fn deleted_rows(
    name: &TableName,
    table: &Table,
    snapshot: &SnapshotRef,
    mut marks: Vec<(String, Arc<Vec<u64>>)>,
    live: &HashMap<String, Vec<iceberg::scan::FileScanTaskDeleteFile>>,
) -> Result<Vec<FileToRead>> {
    if !live.is_empty() {
        let mut earlier = Vec::new();
        let mut seen = HashSet::new();
        for (path, _) in &marks {
            for d in live.get(path).into_iter().flatten() {
                if d.file_type == DataContentType::PositionDeletes
                    && seen.insert(d.file_path.clone())
                {
                    earlier.push(PositionDeleteFile {
                        path: d.file_path.clone(),
                        size: d.file_size_in_bytes,
                        format: iceberg::spec::DataFileFormat::Parquet,
                    });
                }
            }
        }
        let before: HashMap<String, Arc<Vec<u64>>> = delete_files::read(name, table, &earlier)
            .await?
            .into_iter()
            .collect();
        for (path, positions) in &mut marks {
            if let Some(gone) = before.get(path) {
                let left: Vec<u64> = positions
                    .iter()
                    .copied()
                    .filter(|p| gone.binary_search(p).is_err())
                    .collect();
                *positions = Arc::new(left);
            }
        }
        marks.retain(|(_, p)| !p.is_empty());
    }
    let mut wanted: HashMap<&str, Arc<Vec<u64>>> = marks
        .iter()
        .map(|(path, p)| (path.as_str(), p.clone()))
        .collect();
    let mut found: HashMap<String, FileToRead> = HashMap::new();
    let list = manifests::list(name, table, snapshot).await?;
    for manifest in list.entries() {
        if manifest.content != ManifestContentType::Data || wanted.is_empty() {
            continue;
        }
        let loaded = manifests::load(name, table, manifest).await?;
        let spec: Option<PartitionSpecRef> =
            Some(Arc::new(loaded.metadata().partition_spec().clone()));
        for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
            let Some(positions) = wanted.remove(entry.file_path()) else {
                continue;
            };
            found.insert(
                entry.file_path().to_string(),
                FileToRead {
                    rows: Rows::Only(positions),
                    ..FileToRead::of(
                        entry,
                        &spec,
                        DELETE,
                        snapshot.sequence_number(),
                        snapshot.timestamp_ms() * 1000,
                    )
                },
            );
        }
    }
    marks
        .into_iter()
        .map(|(path, _)| {
            found.remove(&path).ok_or_else(|| {
                Error::user(
                    format!(
                        "`{name}` snapshot {} deletes rows of `{path}` by position, but that data file is not live in the snapshot",
                        snapshot.snapshot_id()
                    ),
                    "the table's writer broke the Iceberg spec; rebuild what reads it with `smelt run --full-refresh`",
                )
            })
        })
        .collect()
}

/// Refuses a delete file smelt cannot read as changes, naming it and the fix: one not in
/// Parquet (Avro or ORC delete files, format 3 deletion vectors), and equality deletes
/// scoped to a partition.
fn refuse_unread(name: &TableName, snapshot: i64, file: &iceberg::spec::DataFile) -> Result<()> {
    let fix = "compact the table's deletes into its data files (Spark: `CALL system.rewrite_data_files(...)` with `delete-file-threshold`), or rebuild what reads it with `smelt run --full-refresh` after such snapshots";
    if file.file_format() != iceberg::spec::DataFileFormat::Parquet {
        return Err(Error::user(
            format!(
                "`{name}` snapshot {snapshot} adds delete file `{}` in {:?}; smelt reads Parquet delete files only",
                file.file_path(),
                file.file_format()
            ),
            fix,
        ));
    }
    if file.content_type() == DataContentType::EqualityDeletes
        && (!file.partition().fields().is_empty()
            || file.equality_ids().is_none_or(|ids| ids.is_empty()))
    {
        return Err(Error::user(
            format!(
                "`{name}` snapshot {snapshot} adds equality delete file `{}` scoped to a partition (or without columns); smelt reads equality deletes of unpartitioned tables only",
                file.file_path()
            ),
            fix,
        ));
    }
    Ok(())
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
    let tasks = manifests::scan_tasks(name, table, snapshot, None).await?;
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
                deletes,
                ..FileToRead::of(entry, &spec, INSERT, version, at_ms * 1000)
            });
        }
    }
    // Stable: manifest and entry order within one sequence number.
    files.sort_by_key(|f| f.version);
    Ok(files)
}
