//! New snapshots: the manifests, manifest list and snapshot of a commit, made with the
//! `iceberg` crate's writers, and committed with the catalog's swap (`catalog.rs`).
//!
//! The crate's own snapshot producer only appends (and retries over other writers); smelt
//! needs to remove files too (copy-on-write) and never to retry over another writer.

use std::collections::{HashMap, HashSet};

use iceberg::TableUpdate;
use iceberg::spec::{
    DataFile, FormatVersion, MAIN_BRANCH, Manifest, ManifestContentType, ManifestFile,
    ManifestListWriter, ManifestWriterBuilder, Operation, SchemaRef, Snapshot, SnapshotRef,
    SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, Summary,
};
use iceberg::table::Table;
use smelt_spec::TableName;
use uuid::Uuid;

use crate::catalog::IcebergCatalog;
use crate::error::{Context, Error, Result};
use crate::manifests;

/// What one commit does to a table.
#[derive(Debug, Default)]
pub(crate) struct Change {
    /// Data files to add.
    pub added: Vec<DataFile>,
    /// Paths of the live data files to remove (rewritten copy-on-write).
    pub removed: HashSet<String>,
    /// Position-delete files to add (merge-on-read).
    pub added_deletes: Vec<DataFile>,
    /// Every delete file goes (a full overwrite, which removes every data file).
    pub drop_deletes: bool,
    /// A new current schema (columns added), added in the same metadata commit.
    pub schema: Option<iceberg::spec::SchemaRef>,
    /// Summary properties of the snapshot (`smelt.*`).
    pub summary: HashMap<String, String>,
    /// Table properties to set in the same metadata commit.
    pub properties: HashMap<String, String>,
}

/// Commits `change` to `table` as one snapshot — `append` when it removes no row, `delete`
/// when it only removes rows, `overwrite` otherwise — with the smelt summary and the table properties in the same
/// metadata swap; returns the table at the new snapshot.
pub(crate) async fn commit(
    catalog: &IcebergCatalog,
    name: &TableName,
    table: &Table,
    change: Change,
) -> Result<Table> {
    let metadata = table.metadata();
    check_writable(name, metadata)?;
    let w = Writing::new(name, table, change.schema.as_ref());

    let mut summary = SnapshotSummaryCollector::default();
    for file in &change.added {
        summary.add_file(
            file,
            w.schema.clone(),
            metadata.default_partition_spec().clone(),
        );
    }
    let mut manifests = Vec::new();
    let has_added = !change.added.is_empty();
    if has_added {
        manifests.push(w.write_added_manifest(change.added).await?);
    }
    if !change.added_deletes.is_empty() {
        manifests.push(
            w.write_delete_manifest(&change.added_deletes, &mut summary)
                .await?,
        );
    }
    let parent = metadata.current_snapshot();
    let removed = match parent {
        Some(parent) => {
            w.carry_parent_manifests(
                parent,
                change.drop_deletes,
                &change.removed,
                &mut summary,
                &mut manifests,
            )
            .await?
        }
        None => 0,
    };
    if removed != change.removed.len() {
        return Err(Error::internal(format!(
            "`{name}`: {} of the {} files to remove are not live in the snapshot read",
            change.removed.len() - removed,
            change.removed.len()
        )));
    }
    let list_path = w.write_manifest_list(parent, manifests).await?;

    let operation = operation(
        has_added,
        !change.removed.is_empty() || !change.added_deletes.is_empty(),
    );
    let properties = snapshot_properties(change.summary, &summary, parent, change.drop_deletes);
    let snapshot = w.snapshot(
        list_path,
        parent,
        Summary {
            operation,
            additional_properties: properties,
        },
    );
    let updates = table_updates(
        change.schema.as_ref(),
        snapshot,
        w.snapshot_id,
        change.properties,
    );
    catalog.commit(name, table, updates).await
}

/// What the files of one commit are written with: the table, the new snapshot's id and
/// sequence number, the commit's id in the file names, and the schema of the files.
struct Writing<'a> {
    /// The table's name, for errors.
    name: &'a TableName,
    /// The table at the snapshot read.
    table: &'a Table,
    /// The id of the new snapshot.
    snapshot_id: i64,
    /// The sequence number of the new snapshot.
    sequence: i64,
    /// The table's location, without a trailing `/`.
    location: String,
    /// The commit's id, in the names of the files it writes.
    commit: Uuid,
    /// The schema the manifests are written with: the change's new schema, else the
    /// table's current one.
    schema: SchemaRef,
}

impl<'a> Writing<'a> {
    /// Picks the new snapshot's id, sequence number and commit id for `table`, with
    /// `schema` (the change's new schema, if any) or else the table's current schema.
    fn new(name: &'a TableName, table: &'a Table, schema: Option<&SchemaRef>) -> Self {
        let metadata = table.metadata();
        let snapshot_id = new_snapshot_id(table);
        let sequence = metadata.next_sequence_number();
        let location = metadata.location().trim_end_matches('/').to_string();
        let commit = Uuid::new_v4();
        let schema = schema
            .cloned()
            .unwrap_or_else(|| metadata.current_schema().clone());
        Writing {
            name,
            table,
            snapshot_id,
            sequence,
            location,
            commit,
            schema,
        }
    }

    /// Writes the manifest of the data files the commit adds.
    async fn write_added_manifest(&self, added: Vec<DataFile>) -> Result<ManifestFile> {
        let (name, location, commit) = (self.name, &self.location, self.commit);
        let path = format!("{location}/metadata/{commit}-m0.avro");
        let output = self
            .table
            .file_io()
            .new_output(&path)
            .context(|| format!("writing `{path}`"))?;
        let spec = self
            .table
            .metadata()
            .default_partition_spec()
            .as_ref()
            .clone();
        let mut writer =
            ManifestWriterBuilder::new(output, Some(self.snapshot_id), self.schema.clone(), spec)
                .build_v2_data();
        for file in added {
            writer
                .add_file(file, self.sequence)
                .context(|| format!("writing the manifest of `{name}`"))?;
        }
        writer
            .write_manifest_file()
            .await
            .context(|| format!("writing the manifest of `{name}`"))
    }

    /// Writes the manifest of the position-delete files the commit adds, counting them in
    /// `summary`.
    async fn write_delete_manifest(
        &self,
        added_deletes: &[DataFile],
        summary: &mut SnapshotSummaryCollector,
    ) -> Result<ManifestFile> {
        let (name, location, commit) = (self.name, &self.location, self.commit);
        let metadata = self.table.metadata();
        let path = format!("{location}/metadata/{commit}-d0.avro");
        let output = self
            .table
            .file_io()
            .new_output(&path)
            .context(|| format!("writing `{path}`"))?;
        let mut writer = ManifestWriterBuilder::new(
            output,
            Some(self.snapshot_id),
            self.schema.clone(),
            metadata.default_partition_spec().as_ref().clone(),
        )
        .build_v2_deletes();
        for file in added_deletes {
            summary.add_file(
                file,
                self.schema.clone(),
                metadata.default_partition_spec().clone(),
            );
        }
        for file in added_deletes.iter().cloned() {
            writer
                .add_file(file, self.sequence)
                .context(|| format!("writing the delete manifest of `{name}`"))?;
        }
        writer
            .write_manifest_file()
            .await
            .context(|| format!("writing the delete manifest of `{name}`"))
    }

    /// Adds the manifests of `parent` to `manifests` for the new snapshot: its delete
    /// manifests dropped with `drop_deletes`, a data manifest holding a live file of
    /// `removed` written again without it (see [`Writing::rewrite_manifest`]), the others
    /// as they are. Returns how many files of `removed` it found live.
    async fn carry_parent_manifests(
        &self,
        parent: &SnapshotRef,
        drop_deletes: bool,
        removed: &HashSet<String>,
        summary: &mut SnapshotSummaryCollector,
        manifests: &mut Vec<ManifestFile>,
    ) -> Result<usize> {
        let (name, table) = (self.name, self.table);
        let mut found = 0;
        let list = manifests::list(name, table, parent).await?;
        for (n, manifest) in list.entries().iter().enumerate() {
            if drop_deletes && manifest.content == ManifestContentType::Deletes {
                continue;
            }
            if removed.is_empty() || manifest.content != ManifestContentType::Data {
                manifests.push(manifest.clone());
                continue;
            }
            let loaded = manifests::load(name, table, manifest).await?;
            let hit = loaded
                .entries()
                .iter()
                .any(|e| e.is_alive() && removed.contains(e.file_path()));
            if !hit {
                manifests.push(manifest.clone());
                continue;
            }
            let (rewritten, found_here) =
                self.rewrite_manifest(n, &loaded, removed, summary).await?;
            found += found_here;
            manifests.push(rewritten);
        }
        Ok(found)
    }

    /// Writes the parent's manifest number `n` (`loaded`) again for the new snapshot: its
    /// live files in `removed` as deleted entries (taken off `summary`), the others as
    /// existing. Returns the new manifest and how many of its files it deleted.
    async fn rewrite_manifest(
        &self,
        n: usize,
        loaded: &Manifest,
        removed: &HashSet<String>,
        summary: &mut SnapshotSummaryCollector,
    ) -> Result<(ManifestFile, usize)> {
        let (name, location, commit) = (self.name, &self.location, self.commit);
        let (snapshot_id, schema) = (self.snapshot_id, &self.schema);
        let metadata = self.table.metadata();
        let mut found = 0;
        // The manifest again: its removed files as deleted entries, the others existing.
        let path = format!("{location}/metadata/{commit}-m{}.avro", n + 1);
        let output = self
            .table
            .file_io()
            .new_output(&path)
            .context(|| format!("writing `{path}`"))?;
        let spec = loaded.metadata().partition_spec().clone();
        let mut writer =
            ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), spec)
                .build_v2_data();
        for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
            let seq = entry.sequence_number().unwrap_or(0);
            let file_seq = entry.file_sequence_number.or(Some(seq));
            let file = entry.data_file().clone();
            let written = if removed.contains(entry.file_path()) {
                found += 1;
                summary.remove_file(
                    &file,
                    schema.clone(),
                    metadata.default_partition_spec().clone(),
                );
                writer.add_delete_file(file, seq, file_seq)
            } else {
                let added_by = entry.snapshot_id().unwrap_or(snapshot_id);
                writer.add_existing_file(file, added_by, seq, file_seq)
            };
            written.context(|| format!("rewriting a manifest of `{name}`"))?;
        }
        let rewritten = writer
            .write_manifest_file()
            .await
            .context(|| format!("rewriting a manifest of `{name}`"))?;
        Ok((rewritten, found))
    }

    /// Writes the new snapshot's manifest list, of `manifests`; returns its path.
    async fn write_manifest_list(
        &self,
        parent: Option<&SnapshotRef>,
        manifests: Vec<ManifestFile>,
    ) -> Result<String> {
        let (name, location, commit) = (self.name, &self.location, self.commit);
        let snapshot_id = self.snapshot_id;
        let list_path = format!("{location}/metadata/snap-{snapshot_id}-0-{commit}.avro");
        let out = self
            .table
            .file_io()
            .new_output(&list_path)
            .context(|| format!("writing `{list_path}`"))?
            .writer()
            .await
            .context(|| format!("writing `{list_path}`"))?;
        let mut list = ManifestListWriter::v2(
            out,
            snapshot_id,
            parent.map(|p| p.snapshot_id()),
            self.sequence,
        );
        list.add_manifests(manifests.into_iter())
            .context(|| format!("writing the manifest list of `{name}`"))?;
        list.close()
            .await
            .context(|| format!("writing the manifest list of `{name}`"))?;
        Ok(list_path)
    }

    /// The new snapshot, child of `parent`, with its manifest list at `list_path` and
    /// `summary`, stamped now.
    fn snapshot(
        &self,
        list_path: String,
        parent: Option<&SnapshotRef>,
        summary: Summary,
    ) -> Snapshot {
        Snapshot::builder()
            .with_manifest_list(list_path)
            .with_snapshot_id(self.snapshot_id)
            .with_parent_snapshot_id(parent.map(|p| p.snapshot_id()))
            .with_sequence_number(self.sequence)
            .with_summary(summary)
            .with_schema_id(self.schema.schema_id())
            .with_timestamp_ms(chrono_now_ms())
            .build()
    }
}

/// The operation of a snapshot that adds data files (`has_added`) and removes rows
/// (`removes`) or not.
fn operation(has_added: bool, removes: bool) -> Operation {
    // `append` adds rows only; `delete` only removes some; `overwrite` does both.
    match (has_added, removes) {
        (_, false) => Operation::Append,
        (false, true) => Operation::Delete,
        (true, true) => Operation::Overwrite,
    }
}

/// The summary properties of the new snapshot: the smelt ones (`smelt`), then the
/// `added-*`/`deleted-*` entries of `summary`, then the `total-*` entries over `parent`'s;
/// with `drop_deletes`, no delete file is left.
fn snapshot_properties(
    smelt: HashMap<String, String>,
    summary: &SnapshotSummaryCollector,
    parent: Option<&SnapshotRef>,
    drop_deletes: bool,
) -> HashMap<String, String> {
    let mut properties = smelt;
    let added = summary.build();
    let totals = totals(
        parent.map(|p| &p.summary().additional_properties),
        &added,
        drop_deletes,
    );
    properties.extend(added);
    properties.extend(totals);
    properties
}

/// The metadata updates of the commit: the new schema made current (if any), `snapshot`
/// (id `snapshot_id`) added and made the main branch's head, and the table `properties`
/// set (if any).
fn table_updates(
    schema: Option<&SchemaRef>,
    snapshot: Snapshot,
    snapshot_id: i64,
    properties: HashMap<String, String>,
) -> Vec<TableUpdate> {
    let mut updates = Vec::new();
    if let Some(schema) = schema {
        updates.push(TableUpdate::AddSchema {
            schema: schema.as_ref().clone(),
        });
        updates.push(TableUpdate::SetCurrentSchema { schema_id: -1 });
    }
    updates.extend([
        TableUpdate::AddSnapshot { snapshot },
        TableUpdate::SetSnapshotRef {
            ref_name: MAIN_BRANCH.to_string(),
            reference: SnapshotReference::new(
                snapshot_id,
                SnapshotRetention::branch(None, None, None),
            ),
        },
    ]);
    if !properties.is_empty() {
        updates.push(TableUpdate::SetProperties {
            updates: properties,
        });
    }
    updates
}

/// Refuses a table smelt cannot write correctly, naming why: format versions 1 and 3, and
/// partitioned tables (smelt's data and delete files carry no partition).
pub(crate) fn check_writable(
    name: &TableName,
    metadata: &iceberg::spec::TableMetadata,
) -> Result<()> {
    if metadata.format_version() == FormatVersion::V3 {
        return Err(Error::user(
            format!("`{name}` is an Iceberg format version 3 table; smelt writes version 2 tables"),
            "write the flow's output to a format version 2 table (a new table smelt creates is one)",
        ));
    }
    if !metadata.default_partition_spec().is_unpartitioned() {
        return Err(Error::user(
            format!(
                "`{name}` is partitioned ({}); smelt writes unpartitioned Iceberg tables only",
                metadata
                    .default_partition_spec()
                    .fields()
                    .iter()
                    .map(|f| format!("{}({})", f.transform, f.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "write the flow's output to an unpartitioned table (smelt creates one when the table does not exist)",
        ));
    }
    if metadata.format_version() == FormatVersion::V1 {
        return Err(Error::user(
            format!("`{name}` is an Iceberg format version 1 table; smelt writes version 2 tables"),
            "upgrade the table to format version 2 (`ALTER TABLE … SET TBLPROPERTIES ('format-version' = '2')` in Spark)",
        ));
    }
    Ok(())
}

/// The `total-*` summary entries after applying `added` (the `added-*`, `deleted-*` and
/// `removed-*` entries) to the parent's totals, as Iceberg writers keep them; with
/// `no_deletes_left`, the parent's delete files all went.
fn totals(
    parent: Option<&HashMap<String, String>>,
    added: &HashMap<String, String>,
    no_deletes_left: bool,
) -> HashMap<String, String> {
    let get = |m: Option<&HashMap<String, String>>, k: &str| {
        m.and_then(|m| m.get(k))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    [
        ("total-data-files", "added-data-files"),
        ("total-records", "added-records"),
        ("total-files-size", "added-files-size"),
        ("total-delete-files", "added-delete-files"),
        ("total-position-deletes", "added-position-deletes"),
        ("total-equality-deletes", "added-equality-deletes"),
    ]
    .into_iter()
    .map(|(total, add)| {
        let before = match total {
            "total-delete-files" | "total-position-deletes" | "total-equality-deletes"
                if no_deletes_left =>
            {
                0
            }
            _ => get(parent, total),
        };
        let gone = match total {
            "total-data-files" => get(Some(added), "deleted-data-files"),
            "total-records" => get(Some(added), "deleted-records"),
            "total-files-size" => get(Some(added), "removed-files-size"),
            _ => 0,
        };
        (
            total.to_string(),
            (before + get(Some(added), add))
                .saturating_sub(gone)
                .to_string(),
        )
    })
    .collect()
}

/// A positive snapshot id not used by the table (as the `iceberg` crate makes them).
fn new_snapshot_id(table: &Table) -> i64 {
    loop {
        let (a, b) = Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) >> 1) as i64;
        if id != 0 && table.metadata().snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
