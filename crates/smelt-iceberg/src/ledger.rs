//! The ledgers of an Iceberg table (the files ingest flows loaded into it), kept where
//! snapshot expiry cannot lose them: beside the table, in
//! `<table location>/_smelt/ledger/<table uuid>/<key>/<sequence number>.json` (a table
//! dropped without purging its files and created again at the same location starts a
//! ledger of its own). Iceberg's orphan-file removal skips paths whose name starts with `_`,
//! as Delta's VACUUM does.
//!
//! An entry is first in the summary of the snapshot that made it (`smelt.extra.<key>`,
//! one atomic commit with the data) and is written here once that commit landed. A run
//! killed in between leaves it in the summary only; the next read of the ledger (the next
//! run of an ingest flow into the table) writes it. (A snapshot expired in that window —
//! after the crash, before any run — would take its entry with it.)

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::TryStreamExt;
use iceberg::table::Table;
use object_store::ObjectStore;
use object_store::ObjectStoreExt;
use object_store::path::Path as StorePath;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::ObjectStorageFactory;

/// One entry: what the commit with `sequence` recorded under the ledger's key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The flow that committed it (its watermark's application id).
    pub app: String,
    /// The table's sequence number of that commit: ledger order.
    pub sequence: i64,
    /// The entry (JSON text).
    pub value: String,
}

/// Every entry of ledger `key` of `table`, by sequence number. Entries still only in
/// snapshot summaries (the commit just made, or one a killed run left behind) are written
/// beside the table first.
pub(crate) async fn read(
    factory: &ObjectStorageFactory,
    table: &Table,
    key: &str,
) -> Result<BTreeMap<i64, Entry>> {
    let (store, folder) = folder(factory, table, key)?;
    let mut entries = written(&store, &folder).await?;
    for entry in in_summaries(table, key) {
        if entries.contains_key(&entry.sequence) {
            continue;
        }
        let path = folder.clone().join(format!("{:020}.json", entry.sequence));
        let body = serde_json::to_vec(&entry).expect("serialisable");
        store
            .put(&path, body.into())
            .await
            .map_err(|e| store_error(format!("writing the ledger entry `{path}`"), e))?;
        entries.insert(entry.sequence, entry);
    }
    Ok(entries)
}

/// The entries of `key` in the summaries of the snapshots of the main branch.
fn in_summaries(table: &Table, key: &str) -> Vec<Entry> {
    let summary_key = format!("{}{key}", smelt_engine::ports::keys::EXTRA);
    let metadata = table.metadata_ref();
    let Some(current) = metadata.current_snapshot_id() else {
        return Vec::new();
    };
    iceberg::util::snapshot::ancestors_of(&metadata, current)
        .filter_map(|s| {
            let summary = &s.summary().additional_properties;
            let value = summary.get(&summary_key)?.clone();
            let app = summary
                .keys()
                .find_map(|k| k.strip_prefix(smelt_engine::ports::keys::WATERMARK))
                .unwrap_or_default()
                .to_string();
            Some(Entry {
                app,
                sequence: s.sequence_number(),
                value,
            })
        })
        .collect()
}

/// The entries written in `folder`.
async fn written(store: &Arc<dyn ObjectStore>, folder: &StorePath) -> Result<BTreeMap<i64, Entry>> {
    let listed: Vec<_> = store
        .list(Some(folder))
        .try_collect()
        .await
        .map_err(|e| store_error(format!("listing the ledger `{folder}`"), e))?;
    let mut out = BTreeMap::new();
    for object in listed {
        let failed = |e| store_error(format!("reading the ledger entry `{}`", object.location), e);
        let bytes = store
            .get(&object.location)
            .await
            .map_err(failed)?
            .bytes()
            .await
            .map_err(failed)?;
        let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| {
            Error::user(
                format!("ledger entry `{}` is damaged: {e}", object.location),
                "delete it: the next run writes it again from the snapshot summary, while the snapshot is kept",
            )
        })?;
        out.insert(entry.sequence, entry);
    }
    Ok(out)
}

/// The store and folder of ledger `key` of `table`.
fn folder(
    factory: &ObjectStorageFactory,
    table: &Table,
    key: &str,
) -> Result<(Arc<dyn ObjectStore>, StorePath)> {
    let metadata = table.metadata();
    let location = format!(
        "{}/_smelt/ledger/{}/{}",
        metadata.location().trim_end_matches('/'),
        metadata.uuid(),
        encode(key)
    );
    factory.store(&location).map_err(|e| Error::Iceberg {
        context: format!("opening the store of `{location}`"),
        source: Box::new(e),
    })
}

/// `name` as one path segment: letters, digits, `.`, `-` and `_` kept, every other byte
/// `%XX`.
fn encode(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn store_error(context: String, source: object_store::Error) -> Error {
    Error::Engine(smelt_engine::EngineError::storage(context, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_one_path_segment() {
        assert_eq!(encode("smelt.ingest.files"), "smelt.ingest.files");
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
    }
}
