//! New snapshots: the manifests, manifest list and snapshot of a commit, made with the
//! `iceberg` crate's writers, and committed with the catalog's swap (`catalog.rs`).
//!
//! The crate's own snapshot producer only appends (and retries over other writers); smelt
//! needs to remove files too (copy-on-write) and never to retry over another writer.

use std::collections::{HashMap, HashSet};

use iceberg::TableUpdate;
use iceberg::spec::{
    DataFile, FormatVersion, MAIN_BRANCH, ManifestContentType, ManifestListWriter,
    ManifestWriterBuilder, Operation, Snapshot, SnapshotReference, SnapshotRetention,
    SnapshotSummaryCollector, Summary,
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
    let snapshot_id = new_snapshot_id(table);
    let sequence = metadata.next_sequence_number();
    let location = metadata.location().trim_end_matches('/').to_string();
    let commit = Uuid::new_v4();
    let io = table.file_io();
    let schema = change
        .schema
        .clone()
        .unwrap_or_else(|| metadata.current_schema().clone());
    let spec = metadata.default_partition_spec().as_ref().clone();

    let mut summary = SnapshotSummaryCollector::default();
    for file in &change.added {
        summary.add_file(
            file,
            schema.clone(),
            metadata.default_partition_spec().clone(),
        );
    }
    let mut manifests = Vec::new();
    let has_added = !change.added.is_empty();
    if has_added {
        let path = format!("{location}/metadata/{commit}-m0.avro");
        let output = io
            .new_output(&path)
            .context(|| format!("writing `{path}`"))?;
        let mut writer =
            ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), spec)
                .build_v2_data();
        for file in change.added {
            writer
                .add_file(file, sequence)
                .context(|| format!("writing the manifest of `{name}`"))?;
        }
        manifests.push(
            writer
                .write_manifest_file()
                .await
                .context(|| format!("writing the manifest of `{name}`"))?,
        );
    }
    if !change.added_deletes.is_empty() {
        let path = format!("{location}/metadata/{commit}-d0.avro");
        let output = io
            .new_output(&path)
            .context(|| format!("writing `{path}`"))?;
        let mut writer = ManifestWriterBuilder::new(
            output,
            Some(snapshot_id),
            schema.clone(),
            metadata.default_partition_spec().as_ref().clone(),
        )
        .build_v2_deletes();
        for file in &change.added_deletes {
            summary.add_file(
                file,
                schema.clone(),
                metadata.default_partition_spec().clone(),
            );
        }
        for file in change.added_deletes.iter().cloned() {
            writer
                .add_file(file, sequence)
                .context(|| format!("writing the delete manifest of `{name}`"))?;
        }
        manifests.push(
            writer
                .write_manifest_file()
                .await
                .context(|| format!("writing the delete manifest of `{name}`"))?,
        );
    }
    let parent = metadata.current_snapshot();
    let mut removed = 0;
    if let Some(parent) = parent {
        let list = manifests::list(name, table, parent).await?;
        for (n, manifest) in list.entries().iter().enumerate() {
            if change.drop_deletes && manifest.content == ManifestContentType::Deletes {
                continue;
            }
            if change.removed.is_empty() || manifest.content != ManifestContentType::Data {
                manifests.push(manifest.clone());
                continue;
            }
            let loaded = manifests::load(name, table, manifest).await?;
            let hit = loaded
                .entries()
                .iter()
                .any(|e| e.is_alive() && change.removed.contains(e.file_path()));
            if !hit {
                manifests.push(manifest.clone());
                continue;
            }
            // The manifest again: its removed files as deleted entries, the others existing.
            let path = format!("{location}/metadata/{commit}-m{}.avro", n + 1);
            let output = io
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
                let written = if change.removed.contains(entry.file_path()) {
                    removed += 1;
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
            manifests.push(
                writer
                    .write_manifest_file()
                    .await
                    .context(|| format!("rewriting a manifest of `{name}`"))?,
            );
        }
    }
    if removed != change.removed.len() {
        return Err(Error::Internal(format!(
            "`{name}`: {} of the {} files to remove are not live in the snapshot read",
            change.removed.len() - removed,
            change.removed.len()
        )));
    }
    let list_path = format!("{location}/metadata/snap-{snapshot_id}-0-{commit}.avro");
    let out = io
        .new_output(&list_path)
        .context(|| format!("writing `{list_path}`"))?
        .writer()
        .await
        .context(|| format!("writing `{list_path}`"))?;
    let mut list =
        ManifestListWriter::v2(out, snapshot_id, parent.map(|p| p.snapshot_id()), sequence);
    list.add_manifests(manifests.into_iter())
        .context(|| format!("writing the manifest list of `{name}`"))?;
    list.close()
        .await
        .context(|| format!("writing the manifest list of `{name}`"))?;

    // `append` adds rows only; `delete` only removes some; `overwrite` does both.
    let operation = match (
        has_added,
        !change.removed.is_empty() || !change.added_deletes.is_empty(),
    ) {
        (_, false) => Operation::Append,
        (false, true) => Operation::Delete,
        (true, true) => Operation::Overwrite,
    };
    let mut properties = change.summary;
    let added = summary.build();
    let totals = totals(
        parent.map(|p| &p.summary().additional_properties),
        &added,
        change.drop_deletes,
    );
    properties.extend(added);
    properties.extend(totals);
    let snapshot = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(parent.map(|p| p.snapshot_id()))
        .with_sequence_number(sequence)
        .with_summary(Summary {
            operation,
            additional_properties: properties,
        })
        .with_schema_id(schema.schema_id())
        .with_timestamp_ms(chrono_now_ms())
        .build();
    let mut updates = Vec::new();
    if let Some(schema) = &change.schema {
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
    if !change.properties.is_empty() {
        updates.push(TableUpdate::SetProperties {
            updates: change.properties,
        });
    }
    catalog.commit(name, table, updates).await
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
