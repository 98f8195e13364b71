//! Ledgers of what flows applied to a table (the files an ingest or replace_where flow
//! loaded), kept beside the table in `_smelt/ledger/<key>/<flow>/<n>.json`, outside the
//! Delta log: log cleanup and checkpoints do not touch them, and Delta's `VACUUM` skips
//! folders whose name starts with `_`.
//!
//! An entry is also in the commit info of the commit that made it, and is written here only
//! once that commit landed (by the run that made it, so a run that lost a commit race writes
//! nothing). A crash in between is repaired from the log by the next commit.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use deltalake::DeltaTable;
use deltalake::logstore::ObjectStoreRef;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;
use serde::{Deserialize, Serialize};
use smelt_engine::ports::{Watermark, keys};
use smelt_spec::TableName;

use crate::error::{Context, Error, Result};

/// One entry of a ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The flow (its watermark's application id).
    pub app: String,
    /// The flow's watermark in the commit that made it.
    pub number: i64,
    /// The table version of that commit: ledger order.
    pub version: i64,
    /// The entry (JSON text).
    pub value: String,
}

/// What a ledger folder holds.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Entries, in no particular order.
    pub entries: Vec<Entry>,
    /// Files that do not parse (a crash mid-write on a file system without ordered
    /// writes): flow folder, number, path.
    pub damaged: Vec<(String, i64, String)>,
}

/// Where a table's ledgers are: beside a local table (written durably: synced, then
/// renamed into place), or in the table's object store (a put is atomic there).
pub(crate) enum Place {
    /// The folder of a local table.
    Local(PathBuf),
    /// The store of a table on an object store, rooted at the table.
    Store(ObjectStoreRef),
}

impl Place {
    /// The ledgers of `table`, named `name` in `lake`.
    pub(crate) fn of(lake: &crate::Lake, name: &TableName, table: &DeltaTable) -> Self {
        match lake.local_path(name) {
            Some(path) => Self::Local(path),
            None => Self::Store(table.object_store()),
        }
    }
}

fn folder(table: &Path, key: &str) -> PathBuf {
    table.join("_smelt").join("ledger").join(encode(key))
}

fn store_folder(key: &str) -> String {
    format!("_smelt/ledger/{}", encode(key))
}

fn store_error(context: String) -> impl FnOnce(object_store::Error) -> Error {
    move |source| Error::Store { context, source }
}

/// The folder name of a flow or key.
pub(crate) fn encode(name: &str) -> String {
    url::form_urlencoded::byte_serialize(name.as_bytes()).collect()
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// Writes `entry` of ledger `key` of the table at `place`.
pub(crate) async fn write(place: &Place, key: &str, entry: &Entry) -> Result<()> {
    let table = match place {
        Place::Local(table) => table,
        Place::Store(store) => {
            let path = format!(
                "{}/{}/{:020}.json",
                store_folder(key),
                encode(&entry.app),
                entry.number
            );
            let text = serde_json::to_string(entry).expect("serialisable");
            store
                .put(&ObjectPath::from(path.as_str()), text.into_bytes().into())
                .await
                .map_err(store_error(format!("writing `{path}`")))?;
            return Ok(());
        }
    };
    let dir = folder(table, key).join(encode(&entry.app));
    let text = serde_json::to_string(entry).expect("serialisable");
    let number = entry.number;
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir).map_err(io(format!("creating `{}`", dir.display())))?;
        let tmp = dir.join(format!(".tmp-{}", uuid::Uuid::new_v4()));
        let path = dir.join(format!("{number:020}.json"));
        let mut file =
            std::fs::File::create(&tmp).map_err(io(format!("writing `{}`", tmp.display())))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(io(format!("writing `{}`", tmp.display())))?;
        std::fs::rename(&tmp, &path).map_err(io(format!("writing `{}`", path.display())))?;
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io(format!("syncing `{}`", dir.display())))
    })
    .await
    .map_err(|e| Error::internal(format!("a task writing a ledger failed: {e}")))?
}

/// Every entry of ledger `key` of the table at `place`.
pub(crate) async fn read(place: &Place, key: &str) -> Result<Ledger> {
    let table = match place {
        Place::Local(table) => table,
        Place::Store(store) => return read_store(store, key).await,
    };
    let dir = folder(table, key);
    tokio::task::spawn_blocking(move || {
        let mut ledger = Ledger::default();
        let Ok(flows) = std::fs::read_dir(&dir) else {
            return Ok(ledger);
        };
        for flow in flows.flatten() {
            let app_dir = flow.file_name().to_string_lossy().to_string();
            let Ok(files) = std::fs::read_dir(flow.path()) else {
                continue;
            };
            for file in files.flatten() {
                let path = file.path();
                let Some(number) = file
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".json"))
                    .and_then(|n| n.parse::<i64>().ok())
                else {
                    continue; // temp files of a write that did not finish
                };
                let text = std::fs::read_to_string(&path)
                    .map_err(io(format!("reading `{}`", path.display())))?;
                match serde_json::from_str::<Entry>(&text) {
                    Ok(entry) => ledger.entries.push(entry),
                    Err(_) => {
                        ledger
                            .damaged
                            .push((app_dir.clone(), number, path.display().to_string()))
                    }
                }
            }
        }
        Ok(ledger)
    })
    .await
    .map_err(|e| Error::internal(format!("a task reading a ledger failed: {e}")))?
}

/// Every entry of ledger `key` in a table's object store.
async fn read_store(store: &ObjectStoreRef, key: &str) -> Result<Ledger> {
    let dir = store_folder(key);
    let prefix = ObjectPath::from(dir.as_str());
    let objects: Vec<_> = store
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(store_error(format!("listing `{dir}`")))?;
    let mut ledger = Ledger::default();
    for meta in objects {
        let location = meta.location.as_ref().to_string();
        let rest = location
            .strip_prefix(&format!("{dir}/"))
            .unwrap_or(&location);
        let Some((app_dir, file)) = rest.split_once('/') else {
            continue;
        };
        let Some(number) = file
            .strip_suffix(".json")
            .and_then(|n| n.parse::<i64>().ok())
        else {
            continue;
        };
        let bytes = store
            .get(&meta.location)
            .await
            .map_err(store_error(format!("reading `{location}`")))?
            .bytes()
            .await
            .map_err(store_error(format!("reading `{location}`")))?;
        match serde_json::from_slice::<Entry>(&bytes) {
            Ok(entry) => ledger.entries.push(entry),
            Err(_) => ledger.damaged.push((app_dir.to_string(), number, location)),
        }
    }
    Ok(ledger)
}

/// The values of ledger `key` of `table` (its ledgers at `place`, `name` in errors), oldest
/// first: the entries beside the table, and those only the log still has.
pub(crate) async fn values(
    place: &Place,
    table: &DeltaTable,
    name: &TableName,
    key: &str,
) -> Result<Vec<String>> {
    let ledger = read(place, key).await?;
    let mut entries = ledger.entries;
    // Entries still in the log whose ledger file is missing (a crash right after their
    // commit; tables written before the ledger existed).
    let known: HashSet<(String, i64)> = entries.iter().map(|e| (e.app.clone(), e.number)).collect();
    entries.extend(
        logged(table, name, key)
            .await?
            .into_iter()
            .filter(|e| !known.contains(&(e.app.clone(), e.number))),
    );
    for (app, number, path) in ledger.damaged {
        if !entries
            .iter()
            .any(|e| encode(&e.app) == app && e.number == number)
        {
            return Err(Error::user(
                format!(
                    "ledger entry `{path}` of `{name}` is damaged, and the table's log no longer has it"
                ),
                "delete the file and rebuild the table with `smelt run --full-refresh` (the files it listed would be loaded again otherwise)",
            ));
        }
    }
    // The table as this run read it: a commit another writer made since (its ledger file
    // may already be there) is not part of it, like the rest of that commit.
    if let Some(read) = table.version() {
        entries.retain(|e| e.version <= read as i64);
    }
    entries.sort_by_key(|e| (e.version, e.number));
    Ok(entries.into_iter().map(|e| e.value).collect())
}

/// Entries `key` of the commits still in `table`'s log, up to the version it was read at
/// (their commit infos; each with the version of its commit, which commit infos do not
/// hold themselves).
async fn logged(table: &DeltaTable, name: &TableName, key: &str) -> Result<Vec<Entry>> {
    use futures::StreamExt;
    let Some(read) = table.version() else {
        return Ok(Vec::new());
    };
    let log_store = table.log_store();
    let commits: Vec<(i64, Option<_>)> = futures::stream::iter(0..=read)
        .map(|version| {
            let log_store = log_store.clone();
            async move {
                let bytes = log_store.read_commit_entry(version).await;
                bytes.map(|b| (version as i64, b))
            }
        })
        .buffered(16)
        .try_collect()
        .await
        .context(|| format!("reading the log of `{name}`"))?;
    let mut entries = Vec::new();
    for (version, bytes) in commits {
        // Cleaned up (log retention): the ledger file is what remains of it.
        let Some(bytes) = bytes else { continue };
        let actions = deltalake::logstore::get_actions(version as u64, &bytes)
            .context(|| format!("reading the log of `{name}`"))?;
        for action in actions {
            let deltalake::kernel::Action::CommitInfo(i) = action else {
                continue;
            };
            // smelt's own commits carry the entry in the commit info; the Spark engine's,
            // in the commit's `userMetadata` (a JSON object with the same keys).
            let spark: Option<serde_json::Map<String, serde_json::Value>> = i
                .user_metadata
                .as_deref()
                .and_then(|m| serde_json::from_str(m).ok());
            let entry = |info: &serde_json::Map<String, serde_json::Value>| {
                Some(Entry {
                    app: info.get(keys::FLOW)?.as_str()?.to_string(),
                    number: info.get(keys::SOURCE_VERSION)?.as_i64()?,
                    version,
                    value: info.get(key)?.as_str()?.to_string(),
                })
            };
            let own: serde_json::Map<String, serde_json::Value> = i.info.into_iter().collect();
            entries.extend(entry(&own).or_else(|| spark.as_ref().and_then(entry)));
        }
    }
    Ok(entries)
}

/// Writes the entries of `watermark`, committed to `table` (at `root`) as `version`, and
/// those of earlier commits still in the log that have none (a crash right after their
/// commit). The commit landed already: a failure here is logged, and repaired by the next
/// commit.
pub(crate) async fn record(
    place: &Place,
    table: Option<&DeltaTable>,
    name: &TableName,
    watermark: &Watermark,
    version: i64,
) {
    for (key, value) in &watermark.extra {
        let entry = Entry {
            app: watermark.app_id.clone(),
            number: watermark.version,
            version,
            value: value.clone(),
        };
        let repaired = async {
            write(place, key, &entry).await?;
            let Some(table) = table else {
                return Ok(());
            };
            let ledger = read(place, key).await?;
            for e in logged(table, name, key).await? {
                if !ledger
                    .entries
                    .iter()
                    .any(|l| l.app == e.app && l.number == e.number)
                {
                    write(place, key, &e).await?;
                }
            }
            Ok::<_, Error>(())
        };
        if let Err(e) = repaired.await {
            tracing::warn!(table = %name, %key, error = %e, "writing the ledger; the next commit repairs it from the log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(app: &str, number: i64, version: i64) -> Entry {
        Entry {
            app: app.into(),
            number,
            version,
            value: format!("{app}#{number}"),
        }
    }

    #[tokio::test]
    async fn entries_round_trip_and_damaged_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let written = [
            entry("smelt/a", 1, 1),
            entry("smelt/b", 1, 2),
            entry("smelt/a", 2, 3),
        ];
        for e in &written {
            write(&Place::Local(dir.path().into()), "k", e)
                .await
                .unwrap();
        }
        // Written again (a repair from the log): the same entry.
        write(&Place::Local(dir.path().into()), "k", &written[0])
            .await
            .unwrap();
        let mut got = read(&Place::Local(dir.path().into()), "k")
            .await
            .unwrap()
            .entries;
        got.sort_by_key(|e| e.version);
        assert_eq!(got, written);

        let flow = folder(dir.path(), "k").join(encode("smelt/a"));
        std::fs::write(flow.join(format!("{:020}.json", 7)), "").unwrap();
        std::fs::write(flow.join(".tmp-x"), "{").unwrap();
        let ledger = read(&Place::Local(dir.path().into()), "k").await.unwrap();
        assert_eq!(ledger.entries.len(), 3);
        assert_eq!(ledger.damaged.len(), 1);
        assert_eq!(
            (ledger.damaged[0].0.as_str(), ledger.damaged[0].1),
            ("smelt%2Fa", 7)
        );
        assert!(
            read(&Place::Local(dir.path().into()), "other")
                .await
                .unwrap()
                .entries
                .is_empty()
        );
    }
}
