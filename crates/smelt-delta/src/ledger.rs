//! Ledgers of what a flow applied to a table (the files an ingest or replace_where flow
//! loaded), kept beside the table in `_smelt/ledger/<key>/<flow>/<n>.json`, outside the
//! Delta log: log cleanup and checkpoints do not touch them, and Delta's `VACUUM` skips
//! folders whose name starts with `_`.
//!
//! Entry `n` of a flow is written before the commit that records watermark `n` (a `txn`
//! action, which checkpoints keep) and counts only once the watermark reaches it, so a
//! crash between the two leaves an entry that is ignored, and then replaced.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One entry of a ledger.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The flow (its watermark's application id).
    pub app: String,
    /// The watermark of the commit that records it.
    pub number: i64,
    /// When it was written (µs since the epoch): ledger order across flows.
    pub written_us: i64,
    /// The entry (JSON text).
    pub value: String,
}

fn folder(table: &Path, key: &str) -> PathBuf {
    table.join("_smelt").join("ledger").join(encode(key))
}

fn encode(name: &str) -> String {
    url::form_urlencoded::byte_serialize(name.as_bytes()).collect()
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// Writes `entry` of ledger `key` of the table at `table` (replacing entries of the same
/// flow numbered as high or higher: left by a run that crashed before its commit).
pub(crate) async fn write(table: &Path, key: &str, entry: &Entry) -> Result<()> {
    let dir = folder(table, key).join(encode(&entry.app));
    let text = serde_json::to_string(entry).expect("serialisable");
    let number = entry.number;
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir).map_err(io(format!("creating `{}`", dir.display())))?;
        for file in std::fs::read_dir(&dir)
            .map_err(io(format!("listing `{}`", dir.display())))?
            .flatten()
        {
            let name = file.file_name();
            let stale = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<i64>().ok())
                .is_some_and(|n| n >= number);
            if stale {
                std::fs::remove_file(file.path())
                    .map_err(io(format!("removing `{}`", file.path().display())))?;
            }
        }
        // Written under a hidden name, then renamed: never read half-written.
        let tmp = dir.join(format!(".tmp-{}", uuid::Uuid::new_v4()));
        let path = dir.join(format!("{number:020}.json"));
        std::fs::write(&tmp, text).map_err(io(format!("writing `{}`", tmp.display())))?;
        std::fs::rename(&tmp, &path).map_err(io(format!("writing `{}`", path.display())))
    })
    .await
    .map_err(|e| Error::user(format!("writing a ledger: {e}"), "this is a bug in smelt"))?
}

/// Every entry of ledger `key` of the table at `table`, valid or not.
pub(crate) async fn read(table: &Path, key: &str) -> Result<Vec<Entry>> {
    let dir = folder(table, key);
    tokio::task::spawn_blocking(move || {
        let mut entries = Vec::new();
        let Ok(flows) = std::fs::read_dir(&dir) else {
            return Ok(entries);
        };
        for flow in flows.flatten() {
            let Ok(files) = std::fs::read_dir(flow.path()) else {
                continue;
            };
            for file in files.flatten() {
                let path = file.path();
                if path.extension().is_none_or(|e| e != "json")
                    || file.file_name().to_string_lossy().starts_with('.')
                {
                    continue;
                }
                let text = std::fs::read_to_string(&path)
                    .map_err(io(format!("reading `{}`", path.display())))?;
                let entry: Entry = serde_json::from_str(&text).map_err(|e| {
                    Error::user(
                        format!("ledger entry `{}` is damaged: {e}", path.display()),
                        "restore it from a backup, or rebuild the table with `smelt run --full-refresh`",
                    )
                })?;
                entries.push(entry);
            }
        }
        entries.sort_by_key(|e| (e.written_us, e.number));
        Ok(entries)
    })
    .await
    .map_err(|e| Error::user(format!("reading a ledger: {e}"), "this is a bug in smelt"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(app: &str, number: i64, written_us: i64) -> Entry {
        Entry {
            app: app.into(),
            number,
            written_us,
            value: format!("{app}#{number}"),
        }
    }

    #[tokio::test]
    async fn entries_round_trip_in_write_order_and_a_rewrite_drops_later_numbers() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "k", &entry("smelt/a", 1, 10))
            .await
            .unwrap();
        write(dir.path(), "k", &entry("smelt/b", 1, 20))
            .await
            .unwrap();
        write(dir.path(), "k", &entry("smelt/a", 2, 30))
            .await
            .unwrap();
        write(dir.path(), "k", &entry("smelt/a", 3, 40))
            .await
            .unwrap();
        let values: Vec<_> = read(dir.path(), "k")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.value)
            .collect();
        assert_eq!(values, ["smelt/a#1", "smelt/b#1", "smelt/a#2", "smelt/a#3"]);
        // A run that crashed after writing 2 and 3: the next run writes 2 again.
        write(dir.path(), "k", &entry("smelt/a", 2, 50))
            .await
            .unwrap();
        let got: Vec<_> = read(dir.path(), "k")
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.value, e.written_us))
            .collect();
        assert_eq!(
            got,
            [
                ("smelt/a#1".to_string(), 10),
                ("smelt/b#1".to_string(), 20),
                ("smelt/a#2".to_string(), 50)
            ]
        );
        assert!(read(dir.path(), "other").await.unwrap().is_empty());
    }
}
