//! The flows that move rows without a keyed merge: `append` (seed 004), `replace_where`
//! and `export` (seed 003).
//!
//! ```yaml
//! flows:
//!   active:
//!     append:
//!       from: bronze.events
//!       into: silver.active_events
//!       where: status = 'active'
//!   sales_export:
//!     export:
//!       from: demo.sales
//!       to: ./exports/sales
//!       changed_by: updated_at
//!       partition: { tz: Asia/Tokyo }
//!   sales_replace:
//!     replace_where:
//!       from: ./exports/sales/**/*.parquet
//!       format: parquet
//!       into: demo.sales_copy
//!       schema: sales_copy.sql
//!       predicate: "updated_at >= {min(updated_at)}"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ddl::{TableDef, TableName};
use crate::error::SpecError;
use crate::ingest::{FileFormat, IngestFlow, RawIngest, ingest_flow};
use crate::locate::line_of;
use crate::pipeline::{OnCastError, read_table_def, valid_zone};

/// What an append flow does with a source commit that rewrites rows (update, delete,
/// merge, overwrite).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRewrite {
    /// Fail the run, naming the version.
    #[default]
    Fail,
    /// Skip that commit: none of its rows are appended.
    Skip,
    /// Rebuild the target from the source snapshot in this run.
    FullRefresh,
}

/// An `append` flow: rows added to the source since the watermark, filtered and cast,
/// appended to the target.
#[derive(Debug, Clone)]
pub struct AppendFlow {
    /// Source table.
    pub from: TableName,
    /// Target table.
    pub into: TableName,
    /// SQL predicate over source rows: only rows where it is true are appended.
    pub filter: Option<String>,
    /// The target's definition (`schema:`): rows are cast to it. `None`: source types.
    pub target: Option<TableDef>,
    /// What rewriting source commits do.
    pub on_rewrite: OnRewrite,
    /// What a value that cannot be cast does (`null` or `fail`).
    pub on_cast_error: OnCastError,
    /// Zone of timestamps without an offset.
    pub tz: Option<String>,
}

/// Where a `replace_where` batch comes from.
#[derive(Debug, Clone)]
pub enum ReplaceSource {
    /// A table: its whole snapshot is the batch, replaced whenever its version moves.
    Table(TableName),
    /// Files: the files not applied yet are the batch (read like an ingest flow's).
    Files(Box<IngestFlow>),
}

/// A `replace_where` flow: a batch atomically replaces the target rows matching a
/// predicate (Delta's `replaceWhere`).
#[derive(Debug, Clone)]
pub struct ReplaceWhereFlow {
    /// The batch's source.
    pub from: ReplaceSource,
    /// `from` as written.
    pub from_text: String,
    /// Target table.
    pub into: TableName,
    /// The target's definition: batch columns are cast to it.
    pub target: Option<TableDef>,
    /// SQL predicate over target columns, with `{min(col)}` / `{max(col)}` placeholders
    /// for the batch's bounds.
    pub predicate: String,
    /// What a value that cannot be cast does (`null` or `fail`).
    pub on_cast_error: OnCastError,
    /// Zone of timestamps without an offset.
    pub tz: Option<String>,
}

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
pub(crate) struct RawAppend {
    from: String,
    into: String,
    #[serde(rename = "where")]
    filter: Option<String>,
    schema: Option<PathBuf>,
    on_rewrite: Option<OnRewrite>,
    on_cast_error: Option<OnCastError>,
    tz: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReplaceWhere {
    from: String,
    into: String,
    format: Option<FileFormat>,
    header: Option<bool>,
    sep: Option<String>,
    schema: Option<PathBuf>,
    predicate: String,
    on_cast_error: Option<OnCastError>,
    tz: Option<String>,
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

/// Shared checks of one flow block: where problems go and how they are located.
struct Checks<'a> {
    path: &'a Path,
    text: &'a str,
    flow: &'a str,
    kind: &'a str,
    errors: &'a mut Vec<SpecError>,
}

impl Checks<'_> {
    fn at(&self, leaf: &str) -> Option<usize> {
        line_of(self.text, &["flows", self.flow, self.kind, leaf])
    }

    fn field(&self, leaf: &str) -> String {
        format!("flows.{}.{}.{leaf}", self.flow, self.kind)
    }

    fn error(&mut self, leaf: &str, message: impl Into<String>, hint: &str) {
        let e = SpecError::new(self.path, self.field(leaf), message)
            .at(self.at(leaf).or_else(|| self.at("")))
            .hint(hint);
        self.errors.push(e);
    }

    fn table(&mut self, leaf: &str, value: &str) -> Option<TableName> {
        let t = TableName::parse(value);
        if t.is_none() {
            self.error(
                leaf,
                format!("`{value}` is not a table name"),
                "write tables as `schema.table`, e.g. `silver.sales`",
            );
        }
        t
    }

    fn ddl(&mut self, dir: &Path, file: &Option<PathBuf>) -> Option<TableDef> {
        let file = dir.join(file.as_ref()?);
        let (field, at) = (self.field("schema"), self.at("schema"));
        read_table_def(self.path, &file, &field, at, self.errors)
    }

    fn zone(&mut self, leaf: &str, zone: &Option<String>) {
        if let Some(z) = zone
            && !valid_zone(z)
        {
            self.error(
                leaf,
                format!("unknown time zone `{z}`"),
                "use an IANA name such as `Asia/Tokyo` or an offset such as `+09:00`",
            );
        }
    }

    fn cast_policy(&mut self, policy: Option<OnCastError>) -> OnCastError {
        let policy = policy.unwrap_or_default();
        if policy == OnCastError::Quarantine {
            self.error(
                "on_cast_error",
                "`on_cast_error: quarantine` is for apply flows",
                "use `null` (count and store NULL) or `fail`",
            );
        }
        policy
    }
}

pub(crate) fn append_flow(
    path: &Path,
    dir: &Path,
    text: &str,
    name: &str,
    raw: RawAppend,
    errors: &mut Vec<SpecError>,
) -> Option<AppendFlow> {
    let before = errors.len();
    let mut c = Checks {
        path,
        text,
        flow: name,
        kind: "append",
        errors,
    };
    let from = c.table("from", &raw.from);
    let into = c.table("into", &raw.into);
    if raw.filter.as_deref().is_some_and(|f| f.trim().is_empty()) {
        c.error(
            "where",
            "`where` is empty",
            "write a SQL predicate over source columns, e.g. `status = 'active'`",
        );
    }
    let target = c.ddl(dir, &raw.schema);
    c.zone("tz", &raw.tz);
    let on_cast_error = c.cast_policy(raw.on_cast_error);
    let ok = c.errors.len() == before;
    Some(AppendFlow {
        from: from?,
        into: into?,
        filter: raw.filter,
        target,
        on_rewrite: raw.on_rewrite.unwrap_or_default(),
        on_cast_error,
        tz: raw.tz,
    })
    .filter(|_| ok)
}

pub(crate) fn replace_where_flow(
    path: &Path,
    dir: &Path,
    text: &str,
    name: &str,
    raw: RawReplaceWhere,
    errors: &mut Vec<SpecError>,
) -> Option<ReplaceWhereFlow> {
    let before = errors.len();
    let mut c = Checks {
        path,
        text,
        flow: name,
        kind: "replace_where",
        errors,
    };
    let into = c.table("into", &raw.into);
    let from = match raw.format {
        None => {
            if raw.header.is_some() || raw.sep.is_some() {
                c.error(
                    "format",
                    "`header` and `sep` describe files, and `from` is read as a table",
                    "set `format:` (parquet, csv, json) to read files",
                );
            }
            c.table("from", &raw.from).map(ReplaceSource::Table)
        }
        Some(format) => {
            // Files: the ingest reader's listing and formats, without audit columns.
            let ingest = RawIngest::for_files(&raw.from, &raw.into, format, raw.header, raw.sep);
            let mut inner = Vec::new();
            let files = ingest_flow(path, dir, "", name, ingest, &mut inner);
            for e in inner {
                let leaf = e.field.rsplit('.').next().unwrap_or("from").to_string();
                c.error(&leaf, e.message, e.hint.as_deref().unwrap_or(""));
            }
            files.map(|f| ReplaceSource::Files(Box::new(f)))
        }
    };
    let target = c.ddl(dir, &raw.schema);
    if raw.predicate.trim().is_empty() {
        c.error(
            "predicate",
            "`predicate` is empty",
            "write the rows the batch replaces, e.g. `updated_at >= {min(updated_at)}`",
        );
    }
    c.zone("tz", &raw.tz);
    let on_cast_error = c.cast_policy(raw.on_cast_error);
    let ok = c.errors.len() == before;
    Some(ReplaceWhereFlow {
        from: from?,
        from_text: raw.from,
        into: into?,
        target,
        predicate: raw.predicate,
        on_cast_error,
        tz: raw.tz,
    })
    .filter(|_| ok)
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
