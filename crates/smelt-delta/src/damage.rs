//! What is wrong with a table that does not read: the log file that does not parse, the
//! data file the store lacks or that is not Parquet. Looked for only once reading failed,
//! to name the file and what to do instead of passing on a reader's message.

use deltalake::logstore::ObjectStoreRef;
use deltalake::parquet::errors::ParquetError;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;
use smelt_engine::EngineError;

/// What else can be done about a damaged checkpoint.
const CHECKPOINT: &str = "a checkpoint only sums up the commits before it: if their files are all still in `_delta_log/`, removing the checkpoint and `_delta_log/_last_checkpoint` lets readers replay them";

/// What to do about a damaged file: the fix is the user's, and smelt committed nothing.
const RESTORE: &str = "restore it from a backup (or the store's object versions), or rebuild the table from its source; nothing was committed";

/// The first log file of a table (`store` rooted at the table) that is not what a Delta
/// writer writes — a commit with a line that is not a JSON object, a `_last_checkpoint`
/// that is not one — as its path in the table and what is wrong; `None` when each reads.
pub(crate) async fn damaged_log(store: &ObjectStoreRef) -> Option<(String, String)> {
    let mut files: Vec<_> = store
        .list(Some(&ObjectPath::from("_delta_log")))
        .try_collect()
        .await
        .ok()?;
    files.sort_by(|a, b| a.location.cmp(&b.location));
    for meta in files {
        let name = meta.location.filename()?.to_string();
        if name.contains(".checkpoint.") && name.ends_with(".parquet") {
            let bytes = store.get(&meta.location).await.ok()?.bytes().await.ok()?;
            if let Err(e) = deltalake::parquet::file::reader::SerializedFileReader::new(bytes) {
                return Some((
                    format!("`_delta_log/{name}` (a checkpoint)"),
                    format!("is not a readable Parquet file ({e}); {CHECKPOINT}"),
                ));
            }
            continue;
        }
        let version = name
            .strip_suffix(".json")
            .filter(|v| v.len() == 20 && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<i64>().ok());
        if version.is_none() && name != "_last_checkpoint" {
            continue;
        }
        let bytes = store.get(&meta.location).await.ok()?.bytes().await.ok()?;
        if let Some(what) = bad_json(&bytes, version.is_some()) {
            let file = match version {
                Some(v) => format!("`_delta_log/{name}` (version {v})"),
                None => format!("`_delta_log/{name}`"),
            };
            return Some((file, what));
        }
    }
    None
}

/// What is wrong with a log file's text, `None` when nothing is: a commit holds one JSON
/// object per line (`lines`), `_last_checkpoint` one object.
fn bad_json(bytes: &[u8], lines: bool) -> Option<String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Some("is empty".into());
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => return Some(format!("is not UTF-8 text ({e})")),
    };
    let parts: Vec<&str> = if lines {
        text.lines().collect()
    } else {
        vec![text]
    };
    for (i, part) in parts.iter().enumerate() {
        if part.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(part) {
            Ok(v) if v.is_object() => {}
            Ok(_) => return Some(format!("line {} is not a JSON object", i + 1)),
            Err(e) => return Some(format!("is not valid JSON: line {}: {e}", i + 1)),
        }
    }
    None
}

/// The error of table `table` whose log file `file` is damaged (`what`). The reader's own
/// error is left out: `what` says more, and the Delta kernel's error carries a backtrace.
pub(crate) fn log_error(table: &str, file: &str, what: &str) -> EngineError {
    EngineError::Damaged {
        message: format!("table `{table}` cannot be read: its log file {file} {what}"),
        source: None,
        hint: format!("the log is damaged (a write cut short, or an edit by hand): {RESTORE}"),
    }
}

/// The error of reading data file `path` (`table/file`): missing from the store, or not
/// Parquet (the reader's own errors, or a file shorter than the footer it asks for); any
/// other failure (the store not answering) stays a storage error.
pub(crate) fn data_file_error(path: &str, source: ParquetError) -> EngineError {
    let missing = match &source {
        ParquetError::External(e) => match e.downcast_ref::<object_store::Error>() {
            Some(object_store::Error::NotFound { .. }) => true,
            // Shorter than the footer the reader asks for: object_store's local store says
            // "Requested range was invalid" (its `InvalidGetRange` is not public to match on).
            Some(e) if e.to_string().contains("range") => false,
            _ => return EngineError::storage(format!("reading `{path}`"), source),
        },
        _ => false,
    };
    let (table, file) = path.split_once('/').unwrap_or(("", path));
    let (message, hint) = if missing {
        (
            format!(
                "data file `{file}` of `{table}` is missing: the table's log lists it, the store does not have it"
            ),
            format!("it was deleted by hand, or vacuumed with too short a retention: {RESTORE}"),
        )
    } else {
        (
            format!("data file `{file}` of `{table}` is not a readable Parquet file"),
            format!("the file the log lists is damaged or was overwritten: {RESTORE}"),
        )
    };
    EngineError::Damaged {
        message,
        source: Some(Box::new(source)),
        hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_file_is_damaged_when_a_line_is_not_a_json_object() {
        let commit = b"{\"add\":{}}\n{\"commitInfo\":{}}\n";
        assert_eq!(bad_json(commit, true), None);
        assert_eq!(bad_json(b"", true).as_deref(), Some("is empty"));
        assert_eq!(
            bad_json(b"{\"add\":{}}\n[1]\n", true).as_deref(),
            Some("line 2 is not a JSON object")
        );
        let truncated = bad_json(b"{\"add\":{}}\n{\"commitInfo\":{\"ti", true).unwrap();
        assert!(
            truncated.starts_with("is not valid JSON: line 2: EOF"),
            "{truncated}"
        );
        assert_eq!(
            bad_json(b"{\"version\":3,\"size\":1}", false),
            None,
            "_last_checkpoint"
        );
        assert!(
            bad_json(&[0xff, 0xfe], true)
                .unwrap()
                .starts_with("is not UTF-8")
        );
    }
}
