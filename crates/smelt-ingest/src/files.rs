//! Finding the files of an ingest flow: a folder, a pattern below it, Hive-style
//! `key=value` folders as columns.

use std::path::{Path, PathBuf};

use glob::{MatchOptions, Pattern};

use crate::{IngestError, Result};

/// A file in the landing folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandingFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its path below the folder, with `/` separators.
    pub relative: String,
    /// Its URL (`file:///…`): the `_datasource` value and its identity.
    pub url: String,
    /// Size in bytes, when listed.
    pub size: u64,
    /// Modification time, µs since the epoch (UTC), when listed.
    pub modified_us: i64,
    /// Values of Hive-style partition folders (`export_timestamp=2026-07-21 10:00:00+09:00/`)
    /// on its path, percent-decoded, outermost first.
    pub partitions: Vec<(String, String)>,
}

/// A name that writers use for files that are not complete yet (`.part-0.tmp`,
/// `_temporary/`): skipped, as Spark and Hadoop do, so a file written under a hidden name
/// and renamed when done is never read half-written.
fn hidden(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

/// The files under `folder` whose relative path matches `pattern` (every file when
/// `None`), sorted by path. Hidden files and folders (`.x`, `_x`) are skipped.
pub fn list(folder: &Path, pattern: Option<&str>) -> Result<Vec<LandingFile>> {
    let io = |e: std::io::Error| IngestError::Io {
        file: folder.display().to_string(),
        source: e,
    };
    let meta = std::fs::metadata(folder).map_err(|e| {
        IngestError::Options(format!(
            "the landing folder `{}` cannot be read: {e}; create it, or fix `from:`",
            folder.display()
        ))
    })?;
    if !meta.is_dir() {
        return Err(IngestError::Options(format!(
            "`{}` is not a folder; point `from:` at a folder, or a folder and a pattern (`landing/*.csv`)",
            folder.display()
        )));
    }
    let pattern = pattern
        .map(|p| Pattern::new(p).map_err(|e| IngestError::Options(format!("`{p}`: {e}"))))
        .transpose()?;
    let options = MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: true,
    };
    let root = std::fs::canonicalize(folder).map_err(io)?;
    let mut files = Vec::new();
    let walk = walkdir::WalkDir::new(&root)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !hidden(&e.file_name().to_string_lossy()));
    for entry in walk {
        let entry = entry.map_err(|e| IngestError::Io {
            file: e
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| root.display().to_string()),
            source: e.into(),
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let relative: Vec<String> = entry
            .path()
            .strip_prefix(&root)
            .expect("walked below the root")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let relative = relative.join("/");
        if let Some(p) = &pattern
            && !p.matches_with(&relative, options)
        {
            continue;
        }
        let meta = entry.metadata().map_err(|e| IngestError::Io {
            file: entry.path().display().to_string(),
            source: e.into(),
        })?;
        let modified_us = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_micros() as i64)
            .unwrap_or_default();
        let url = url::Url::from_file_path(entry.path())
            .map(|u| u.to_string())
            .unwrap_or_else(|_| entry.path().display().to_string());
        files.push(LandingFile {
            path: entry.path().to_path_buf(),
            partitions: partitions(&relative),
            relative,
            url,
            size: meta.len(),
            modified_us,
        });
    }
    Ok(files)
}

/// `key=value` folders of a relative path, percent-decoded (Spark and BigQuery write
/// `:` as `%3A`).
fn partitions(relative: &str) -> Vec<(String, String)> {
    let mut parts: Vec<&str> = relative.split('/').collect();
    parts.pop(); // the file name
    parts
        .into_iter()
        .filter_map(|p| p.split_once('='))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| {
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_matching_files_sorted_skipping_hidden_ones() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "b.csv",
            "a.csv",
            "notes.txt",
            ".a.csv.tmp",
            "_temporary/x.csv",
            "sub/c.csv",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x\n").unwrap();
        }
        let names = |pattern| -> Vec<String> {
            list(root, pattern)
                .unwrap()
                .into_iter()
                .map(|f| f.relative)
                .collect()
        };
        assert_eq!(names(Some("*.csv")), ["a.csv", "b.csv"]);
        assert_eq!(names(Some("**/*.csv")), ["a.csv", "b.csv", "sub/c.csv"]);
        assert_eq!(names(None), ["a.csv", "b.csv", "notes.txt", "sub/c.csv"]);
        let a = &list(root, Some("a.csv")).unwrap()[0];
        assert_eq!(a.size, 2);
        assert!(a.url.starts_with("file:///") && a.url.ends_with("/a.csv"));
        assert!(a.modified_us > 0);
    }

    #[test]
    fn hive_folders_become_decoded_values() {
        assert_eq!(
            partitions("export_timestamp=2026-07-21 10%3A00%3A00+09%3A00/region=jp/part-0.parquet"),
            vec![
                (
                    "export_timestamp".into(),
                    "2026-07-21 10:00:00+09:00".into()
                ),
                ("region".into(), "jp".into())
            ]
        );
        assert!(partitions("a=b.parquet").is_empty());
    }

    #[test]
    fn a_missing_folder_names_itself() {
        let err = list(Path::new("/no/such/landing"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/no/such/landing"), "{err}");
    }
}
