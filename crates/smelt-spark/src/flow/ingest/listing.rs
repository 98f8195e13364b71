//! A landing folder listed through the cluster (Spark's `binaryFile` source: names, sizes
//! and times, no file opened), matched as the embedded engine matches it.

use std::path::{Component, Path, PathBuf};

use smelt_engine::ports::LandingFile;
use smelt_engine::{EngineError, Result};
use smelt_ingest::files::{Base, listed};
use smelt_spec::IngestFlow;

use super::sql;
use crate::session::Session;

/// `path` absolute, `.` and `..` resolved by their names (as Spark's paths come back).
pub(crate) fn absolute(path: &Path) -> Result<PathBuf> {
    let path = std::path::absolute(path).map_err(|e| {
        EngineError::storage(
            format!("cannot resolve the landing folder `{}`", path.display()),
            e,
        )
    })?;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// The files of the landing of flow `name` (`spec`) as Spark lists them, each with its
/// path there: those a listing here would take (not hidden, matching the pattern).
pub(crate) async fn list(s: &Session<'_>, spec: &IngestFlow) -> Result<Vec<(LandingFile, String)>> {
    let local;
    let (spark_base, base) = match &spec.url {
        Some(url) => (url.trim_end_matches('/').to_string(), Base::Url(url)),
        None => {
            let path = absolute(&spec.folder)?;
            // The files' URLs as the embedded engine makes them (from the folder with its
            // links resolved, where smelt sees it), so a bronze goes on with either engine.
            local = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            (path.to_string_lossy().into_owned(), Base::Local(&local))
        }
    };
    let cannot = |e: EngineError| {
        EngineError::user(
            format!("the landing folder `{spark_base}` cannot be read: {e}"),
            "create it, or fix `from:`",
        )
    };
    s.view("list the landing", sql::listing_view(&spark_base))
        .await
        .map_err(cannot)?;
    let rows = s
        .read("list the landing", sql::listing_query())
        .await
        .map_err(cannot)?;
    let prefix = match &spec.url {
        Some(_) => format!("{spark_base}/"),
        None => format!("file:{spark_base}/"),
    };
    let mut files = Vec::new();
    let (paths, sizes, times) = (
        rows.strings("path"),
        rows.ints("length"),
        rows.micros("modificationTime"),
    );
    for ((path, size), at) in paths.into_iter().zip(sizes).zip(times) {
        let (Some(path), Some(size), Some(at)) = (path, size, at) else {
            continue;
        };
        let Some(relative) = path.strip_prefix(&prefix) else {
            return Err(EngineError::Internal(format!(
                "Spark listed `{path}` outside the landing folder `{prefix}`"
            )));
        };
        let file = listed(spec.pattern.as_deref(), &base, relative, size as u64, at)
            .map_err(|e| EngineError::user(format!("{e}"), "fix `from:`"))?;
        files.extend(file.map(|f| (f, path.clone())));
    }
    files.sort_by(|a, b| a.0.relative.cmp(&b.0.relative));
    Ok(files)
}
