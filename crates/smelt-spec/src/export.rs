//! The `export` flow (seed 003): a table's changed rows as Parquet files under
//! `export_timestamp=<ts>/`.
//!
//! ```yaml
//! flows:
//!   sales_export:
//!     export:
//!       from: demo.sales
//!       to: ./exports/sales
//!       changed_by: updated_at
//!       partition: { tz: Asia/Tokyo }
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::check::Checks;
use crate::ddl::TableName;
use crate::error::SpecError;

/// What marks a row as changed since the last export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangedBy {
    /// Rows added or rewritten by source commits after the last exported version.
    Version,
    /// Rows whose column is greater than the greatest value exported so far (seed 003's
    /// `updated_at >= <from>`).
    Column(String),
}

/// Parquet compression of exported files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Snappy (BigQuery's and Spark's default).
    #[default]
    Snappy,
    /// Zstandard.
    Zstd,
    /// None.
    None,
}

/// An `export` flow: changed rows as Parquet under `export_timestamp=<ts>/`.
#[derive(Debug, Clone)]
pub struct ExportFlow {
    /// Source table.
    pub from: TableName,
    /// `to` as written.
    pub to: String,
    /// The local folder exports go to (unused when `url` is set).
    pub folder: PathBuf,
    /// The object-store URL exports go to.
    pub url: Option<String>,
    /// What marks a row as changed.
    pub changed_by: ChangedBy,
    /// With `changed_by: <column>`: the first export takes the rows whose column is at or
    /// after this value (seed 003's `updated_at >= export_from`); unset, every row.
    pub since: Option<String>,
    /// Parquet compression.
    pub compression: Compression,
    /// Name of the partition folder key and of the column added to every row.
    pub partition_column: String,
    /// Zone the partition folder's time is written in.
    pub partition_tz: String,
    /// `strftime` format of the partition folder's time.
    pub partition_format: String,
    /// Rows per exported file at most.
    pub rows_per_file: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExport {
    from: String,
    to: String,
    changed_by: Option<String>,
    since: Option<String>,
    compression: Option<Compression>,
    partition: Option<RawPartition>,
    rows_per_file: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPartition {
    column: Option<String>,
    tz: Option<String>,
    format: Option<String>,
}

pub(crate) fn export_flow(
    path: &Path,
    dir: &Path,
    text: &str,
    name: &str,
    raw: RawExport,
    errors: &mut Vec<SpecError>,
) -> Option<ExportFlow> {
    let before = errors.len();
    let mut c = Checks {
        path,
        text,
        flow: name,
        kind: "export",
        errors,
    };
    let from = c.table("from", &raw.from);
    let url = raw.to.contains("://").then(|| raw.to.clone());
    if url.is_some() && url::Url::parse(&raw.to).is_err() {
        c.error(
            "to",
            format!("`{}` is not a valid URL", raw.to),
            "write a folder, or a URL such as `s3://bucket/exports/sales`",
        );
    }
    let changed_by = match raw.changed_by.as_deref() {
        None | Some("version") => ChangedBy::Version,
        Some(column) if column.trim().is_empty() => {
            c.error(
                "changed_by",
                "`changed_by` is empty",
                "use `version` (rows of newer source commits) or a column such as `updated_at`",
            );
            ChangedBy::Version
        }
        Some(column) => ChangedBy::Column(column.to_string()),
    };
    if raw.since.is_some() && changed_by == ChangedBy::Version {
        c.error(
            "since",
            "`since` bounds a column, and `changed_by` is `version`",
            "set `changed_by: <column>` (e.g. `updated_at`), or remove `since`",
        );
    }
    let partition = raw.partition.unwrap_or_default();
    let partition_tz = partition.tz.unwrap_or_else(|| "UTC".into());
    c.zone("partition", &Some(partition_tz.clone()));
    let partition_format = partition
        .format
        .unwrap_or_else(|| "%Y-%m-%d %H:%M:%S%:z".into());
    if partition_format.contains('/') {
        c.error(
            "partition",
            format!("partition format `{partition_format}` contains `/`"),
            "a partition is one folder: use `-` or `:` between date parts",
        );
    }
    if raw.rows_per_file == Some(0) {
        c.error(
            "rows_per_file",
            "`rows_per_file` is 0",
            "use a positive number, or remove it (default 1,000,000)",
        );
    }
    let ok = c.errors.len() == before;
    Some(ExportFlow {
        from: from?,
        folder: if url.is_some() {
            PathBuf::new()
        } else {
            dir.join(&raw.to)
        },
        to: raw.to,
        url,
        changed_by,
        since: raw.since,
        compression: raw.compression.unwrap_or_default(),
        partition_column: partition
            .column
            .unwrap_or_else(|| "export_timestamp".into()),
        partition_tz,
        partition_format,
        rows_per_file: raw.rows_per_file.unwrap_or(1_000_000),
    })
    .filter(|_| ok)
}

/// Whether two exports write to the same folder.
pub(crate) fn same_place(a: &ExportFlow, b: &ExportFlow) -> bool {
    let clean = |p: &Path| {
        p.components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect::<PathBuf>()
    };
    match (&a.url, &b.url) {
        (Some(x), Some(y)) => x.trim_end_matches('/') == y.trim_end_matches('/'),
        (None, None) => clean(&a.folder) == clean(&b.folder),
        _ => false,
    }
}
