//! Reading a snapshot's manifest list and manifests, with the table named in errors; a
//! file that does not parse is named as damaged.

use futures::TryStreamExt;
use iceberg::scan::FileScanTask;
use iceberg::spec::{Manifest, ManifestFile, ManifestList, SnapshotRef};
use iceberg::table::Table;
use smelt_engine::EngineError;
use smelt_spec::TableName;

use crate::error::{Context, Error, Result};

/// What else can be done about a damaged file of a table: it is not read by earlier
/// snapshots.
pub(crate) const ROLL_BACK: &str = "roll the table back to a snapshot before it with the engine that wrote it (Spark: `CALL <catalog>.system.rollback_to_snapshot`)";

/// `e`, an error reading `file` of `name`: damaged when the file was read and did not parse
/// (`DataInvalid`), else the storage error it is.
fn reading(name: &TableName, what: &str, file: &str, e: iceberg::Error) -> Error {
    if let Some(invalid) = data_invalid(&e) {
        return Error::Engine(EngineError::Damaged {
            message: format!(
                "Iceberg table `{name}` cannot be read: its {what} `{file}` is damaged ({invalid})"
            ),
            source: Some(Box::new(e)),
            hint: format!("restore the file from a backup, or {ROLL_BACK}"),
        });
    }
    Error::Iceberg {
        context: format!("reading {what} `{file}` of `{name}`"),
        source: Box::new(e),
    }
}

/// The message of the `DataInvalid` error in `e`'s chain (the iceberg crate wraps a file
/// that does not parse in errors of other kinds), with its own cause.
pub(crate) fn data_invalid(e: &iceberg::Error) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(current) = next {
        if let Some(ice) = current.downcast_ref::<iceberg::Error>()
            && ice.kind() == iceberg::ErrorKind::DataInvalid
        {
            let cause = std::error::Error::source(ice).map(|c| format!(": {c}"));
            return Some(format!("{}{}", ice.message(), cause.unwrap_or_default()));
        }
        next = current.source();
    }
    None
}

/// The manifest list of `snapshot`.
pub(crate) async fn list(
    name: &TableName,
    table: &Table,
    snapshot: &SnapshotRef,
) -> Result<ManifestList> {
    table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(|e| reading(name, "manifest list", snapshot.manifest_list(), e))
}

/// The manifest `file` lists.
pub(crate) async fn load(name: &TableName, table: &Table, file: &ManifestFile) -> Result<Manifest> {
    file.load_manifest(table.file_io())
        .await
        .map_err(|e| reading(name, "manifest", &file.manifest_path, e))
}

/// The `iceberg` crate's scan of `snapshot` (the columns `select`, all when `None`): its
/// read tasks, the delete files that apply attached. When planning fails, the manifest list
/// and manifests are read again one by one, so that a damaged one is named.
pub(crate) async fn scan_tasks(
    name: &TableName,
    table: &Table,
    snapshot: &SnapshotRef,
    select: Option<&[String]>,
) -> Result<Vec<FileScanTask>> {
    let id = snapshot.snapshot_id();
    let mut scan = table.scan().snapshot_id(id);
    if let Some(columns) = select {
        scan = scan.select(columns.iter().cloned());
    }
    let planned = async {
        scan.build()?
            .plan_files()
            .await?
            .try_collect::<Vec<FileScanTask>>()
            .await
    }
    .await;
    match planned {
        Ok(tasks) => Ok(tasks),
        Err(e) => {
            for manifest in list(name, table, snapshot).await?.entries() {
                load(name, table, manifest).await?;
            }
            Err(e).context(|| format!("planning a read of `{name}` at snapshot {id}"))
        }
    }
}
