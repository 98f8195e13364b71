//! Reading a snapshot's manifest list and manifests, with the table named in errors.

use iceberg::spec::{Manifest, ManifestFile, ManifestList, SnapshotRef};
use iceberg::table::Table;
use smelt_spec::TableName;

use crate::error::{Context, Result};

/// The manifest list of `snapshot`.
pub(crate) async fn list(
    name: &TableName,
    table: &Table,
    snapshot: &SnapshotRef,
) -> Result<ManifestList> {
    let id = snapshot.snapshot_id();
    table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .context(|| format!("reading the manifest list of `{name}` snapshot {id}"))
}

/// The manifest `file` lists.
pub(crate) async fn load(name: &TableName, table: &Table, file: &ManifestFile) -> Result<Manifest> {
    file.load_manifest(table.file_io())
        .await
        .context(|| format!("reading manifest `{}` of `{name}`", file.manifest_path))
}
