//! The exactly-once ledger of ingest flows: which files a table has loaded (recorded with
//! each commit, read back from every commit), and which files of a landing a run loads.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use smelt_spec::{IngestFlow, OnChangedFile};

use crate::ports::{Landing, LandingFile, WatermarkStore};
use crate::{EngineError, Result};

/// Commit-info entry listing the files a commit loaded.
pub const FILES_KEY: &str = "smelt.ingest.files";

/// A file as loaded: its identity is the URL, its version the size and time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    /// The file's URL.
    pub url: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time, µs since the epoch.
    pub modified_us: i64,
}

/// What one commit of an ingest flow loaded.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Loaded {
    /// The flow that loaded them (lineage; any flow's loads count).
    flow: String,
    /// The commit replaced bronze (`--full-refresh`): what came before no longer counts.
    #[serde(default)]
    refresh: bool,
    files: Vec<FileStamp>,
}

/// The commit-info entry recording `files` as loaded by `flow_name` (`refresh`: the
/// commit replaces the table, and what came before no longer counts).
pub fn files_entry(flow_name: &str, refresh: bool, files: &[LandingFile]) -> (String, String) {
    let loaded = Loaded {
        flow: flow_name.to_string(),
        refresh,
        files: files
            .iter()
            .map(|f| FileStamp {
                url: f.url.clone(),
                size: f.size,
                modified_us: f.modified_us,
            })
            .collect(),
    };
    (
        FILES_KEY.to_string(),
        serde_json::to_string(&loaded).expect("serialisable"),
    )
}

/// The files recorded as loaded in `bronze`'s log (by whichever flow: one flow writes a
/// table, and a renamed flow must not load its files again).
pub async fn loaded_files(bronze: &dyn WatermarkStore) -> Result<HashMap<String, FileStamp>> {
    Ok(loaded_from(bronze.commit_values(FILES_KEY).await?))
}

/// The files recorded as loaded by `values`, the table's [`FILES_KEY`] entries oldest first
/// (a refresh forgets what came before it).
pub fn loaded_from(values: impl IntoIterator<Item = String>) -> HashMap<String, FileStamp> {
    let mut loaded = HashMap::new();
    for value in values {
        let Ok(l) = serde_json::from_str::<Loaded>(&value) else {
            continue;
        };
        if l.refresh {
            loaded.clear();
        }
        loaded.extend(l.files.into_iter().map(|f| (f.url.clone(), f)));
    }
    loaded
}

/// The files of the folder and which of them a run loads.
pub struct Listing {
    /// Every file found.
    pub found: Vec<LandingFile>,
    /// Files to load this run, oldest first.
    pub to_load: Vec<LandingFile>,
    /// New files left for later runs (`max_files_per_run`).
    pub pending: usize,
    /// Loaded files that have changed since.
    pub changed: Vec<LandingFile>,
}

/// Lists the landing of `flow` and compares it with `loaded`. `all` ignores
/// `max_files_per_run` (a rebuild replaces bronze with every file, in one commit).
pub async fn plan_files(
    flow: &IngestFlow,
    landing: &dyn Landing,
    loaded: &HashMap<String, FileStamp>,
    all: bool,
) -> Result<Listing> {
    let found = landing.list().await?;
    plan_found(flow, found, loaded, all)
}

/// Which of the files `found` in the landing of `flow` a run loads, given those `loaded`.
pub fn plan_found(
    flow: &IngestFlow,
    found: Vec<LandingFile>,
    loaded: &HashMap<String, FileStamp>,
    all: bool,
) -> Result<Listing> {
    let mut to_load = Vec::new();
    let mut changed = Vec::new();
    for f in &found {
        match loaded.get(&f.url) {
            None => to_load.push(f.clone()),
            Some(l) if l.size != f.size || !same_time(l.modified_us, f.modified_us) => {
                changed.push(f.clone())
            }
            Some(_) => {}
        }
    }
    match flow.on_changed_file {
        OnChangedFile::Ignore => {}
        OnChangedFile::Reload => to_load.append(&mut changed.clone()),
        OnChangedFile::Fail if !changed.is_empty() => {
            return Err(EngineError::user(
                format!(
                    "{} loaded file(s) changed since: {}",
                    changed.len(),
                    names(&changed)
                ),
                "new data belongs in new files; to load a changed file again set `on_changed_file: reload`, or `ignore` to keep its first version",
            ));
        }
        OnChangedFile::Fail => {}
    }
    to_load.sort_by(|a, b| (a.modified_us, &a.url).cmp(&(b.modified_us, &b.url)));
    let mut pending = 0;
    if let Some(max) = flow.max_files_per_run
        && !all
        && to_load.len() > max
    {
        pending = to_load.len() - max;
        to_load.truncate(max);
    }
    Ok(Listing {
        found,
        to_load,
        pending,
        changed,
    })
}

/// Whether two modification times (µs) of a file are the same, one of them perhaps known
/// to the millisecond only (a Spark listing's).
fn same_time(a: i64, b: i64) -> bool {
    let ms = |t: i64| t.div_euclid(1000);
    a == b || ((a % 1000 == 0 || b % 1000 == 0) && ms(a) == ms(b))
}

/// The first few URLs of `files`, for messages.
fn names(files: &[LandingFile]) -> String {
    let mut out: Vec<String> = files.iter().take(3).map(|f| f.url.clone()).collect();
    if files.len() > 3 {
        out.push(format!("and {} more", files.len() - 3));
    }
    out.join(", ")
}

/// Files of the landing of `flow` that `table` has not loaded yet (listed for the next
/// run, or left for later ones).
pub async fn files_waiting(
    flow: &IngestFlow,
    landing: &dyn Landing,
    table: &dyn WatermarkStore,
) -> Result<usize> {
    let loaded = loaded_files(table).await?;
    let listing = plan_files(flow, landing, &loaded, false).await?;
    Ok(listing.to_load.len() + listing.pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_known_to_the_millisecond_matches_the_same_time_in_microseconds() {
        assert!(same_time(1_500_123_456, 1_500_123_456));
        assert!(same_time(1_500_123_000, 1_500_123_456));
        assert!(same_time(1_500_123_456, 1_500_123_000));
        assert!(!same_time(1_500_124_000, 1_500_123_456));
        assert!(!same_time(1_500_123_455, 1_500_123_456));
    }

    #[test]
    fn a_refresh_forgets_what_was_loaded_before_it() {
        let entry = |refresh: bool, urls: &[&str]| {
            let files: Vec<LandingFile> = urls
                .iter()
                .map(|u| LandingFile {
                    location: u.to_string(),
                    relative: u.to_string(),
                    url: u.to_string(),
                    size: 1,
                    modified_us: 0,
                    partitions: Vec::new(),
                })
                .collect();
            files_entry("f", refresh, &files).1
        };
        let loaded = loaded_from([
            entry(false, &["a", "b"]),
            entry(true, &["c"]),
            entry(false, &["d"]),
        ]);
        let mut urls: Vec<&String> = loaded.keys().collect();
        urls.sort();
        assert_eq!(urls, ["c", "d"]);
    }
}
