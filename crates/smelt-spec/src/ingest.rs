//! The `ingest` flow: raw files in a folder → a bronze table, each file exactly once.
//!
//! ```yaml
//! flows:
//!   part_files:
//!     ingest:
//!       from: ./landing/part/*.tbl
//!       into: bronze.part
//!       format: csv
//!       header: false
//!       sep: "|"
//!       columns: [p_partkey, p_name, p_mfgr, p_brand, p_type, p_size, p_container, p_retailprice, p_comment]
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::check::Checks;
use crate::ddl::TableName;
use crate::error::SpecError;
pub use crate::policy::OnChangedFile;

/// The file formats an ingest flow reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    /// Delimited text (CSV, TSV, TPC-H `.tbl`).
    Csv,
    /// Apache Parquet.
    Parquet,
    /// JSON lines: one object per line.
    Json,
}

/// What to do with columns a file has and bronze does not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IngestEvolution {
    /// Add them to bronze (nullable; earlier rows read NULL).
    #[default]
    AddNewColumns,
    /// Keep their values in the rescued-data column, as JSON.
    Rescue,
    /// Fail the run before anything is written, naming the file and column.
    Fail,
}

/// How CSV files are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvLayout {
    /// The first line names the columns.
    pub header: bool,
    /// Field separator.
    pub sep: u8,
    /// Quote character.
    pub quote: u8,
    /// Escape character inside quotes (else quotes are doubled).
    pub escape: Option<u8>,
    /// Text encoding label (`utf-8`, `shift_jis`, `windows-1252`, …).
    pub encoding: String,
    /// Column names, for files without a header (or to rename the header's).
    pub columns: Option<Vec<String>>,
    /// The text that means NULL (unset: an empty field is NULL).
    pub null_value: Option<String>,
}

impl Default for CsvLayout {
    fn default() -> Self {
        Self {
            header: true,
            sep: b',',
            quote: b'"',
            escape: None,
            encoding: "utf-8".into(),
            columns: None,
            null_value: None,
        }
    }
}

/// Names of the columns an ingest flow adds to each row; `None` leaves one out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestAudit {
    /// The file's URL (`file:///…`).
    pub datasource: Option<String>,
    /// The file's modification time (TIMESTAMP, UTC).
    pub ingest_timestamp: Option<String>,
    /// The row's 1-based number in its file (BIGINT).
    pub file_row: Option<String>,
}

impl Default for IngestAudit {
    fn default() -> Self {
        Self {
            datasource: Some("_datasource".into()),
            ingest_timestamp: Some("_ingest_timestamp".into()),
            file_row: None,
        }
    }
}

/// A validated `ingest` flow.
#[derive(Debug, Clone)]
pub struct IngestFlow {
    /// `from` as written.
    pub from: String,
    /// The local folder files are found under (resolved against the pipeline file's
    /// folder); unused when `url` is set.
    pub folder: PathBuf,
    /// The object-store URL files are found under (`s3://bucket/landing`, `gs://…`,
    /// `az://…`, `https://…`, `file:///…`), when `from` is a URL.
    pub url: Option<String>,
    /// Pattern the paths below `folder` must match (`*.tbl`, `**/*.parquet`); `None` = every file.
    pub pattern: Option<String>,
    /// The bronze table.
    pub into: TableName,
    /// File format.
    pub format: FileFormat,
    /// CSV layout (defaults for other formats).
    pub csv: CsvLayout,
    /// Guess column types from the first file instead of keeping text.
    pub infer_types: bool,
    /// Audit column names.
    pub audit: IngestAudit,
    /// Column for fields bronze has no column for (JSON text); `None` = none.
    pub rescued_data: Option<String>,
    /// What new columns do.
    pub schema_evolution: IngestEvolution,
    /// What changed files do.
    pub on_changed_file: OnChangedFile,
    /// Files loaded per run at most (the rest wait for the next run).
    pub max_files_per_run: Option<usize>,
}

impl IngestFlow {
    /// The columns the flow adds itself: audit and rescued-data columns, in that order.
    pub fn own_columns(&self) -> Vec<&str> {
        [
            &self.audit.datasource,
            &self.audit.ingest_timestamp,
            &self.audit.file_row,
            &self.rescued_data,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
    }
}

/// A `false` (leave the column out) or a column name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum NameOrOff {
    Off(bool),
    Name(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIngest {
    from: String,
    into: String,
    format: FileFormat,
    header: Option<bool>,
    sep: Option<String>,
    quote: Option<String>,
    escape: Option<String>,
    encoding: Option<String>,
    columns: Option<Vec<String>>,
    null_value: Option<String>,
    #[serde(default)]
    infer_types: bool,
    audit: Option<RawIngestAudit>,
    rescued_data: Option<NameOrOff>,
    schema_evolution: Option<IngestEvolution>,
    on_changed_file: Option<OnChangedFile>,
    max_files_per_run: Option<usize>,
}

impl RawIngest {
    /// Files read by another flow (`replace_where`): the ingest listing and formats,
    /// without audit or rescued-data columns.
    pub(crate) fn for_files(
        from: &str,
        into: &str,
        format: FileFormat,
        header: Option<bool>,
        sep: Option<String>,
    ) -> Self {
        Self {
            from: from.to_string(),
            into: into.to_string(),
            format,
            header,
            sep,
            quote: None,
            escape: None,
            encoding: None,
            columns: None,
            null_value: None,
            infer_types: true,
            audit: Some(RawIngestAudit {
                datasource: Some(NameOrOff::Off(false)),
                ingest_timestamp: Some(NameOrOff::Off(false)),
                file_row: None,
            }),
            rescued_data: Some(NameOrOff::Off(false)),
            schema_evolution: Some(IngestEvolution::AddNewColumns),
            on_changed_file: None,
            max_files_per_run: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIngestAudit {
    datasource: Option<NameOrOff>,
    ingest_timestamp: Option<NameOrOff>,
    file_row: Option<NameOrOff>,
}

/// The column name an audit option gives: `unset` when unset, `on` for `true`, none for
/// `false`.
fn name_or(value: Option<NameOrOff>, unset: Option<&str>, on: &str) -> Option<String> {
    match value {
        None => unset.map(str::to_string),
        Some(NameOrOff::Off(true)) => Some(on.to_string()),
        Some(NameOrOff::Off(false)) => None,
        Some(NameOrOff::Name(n)) => Some(n),
    }
}

/// Splits `from` into the folder and the pattern below it: the folder is every leading
/// path component without a glob character.
fn split_glob(from: &str) -> (String, Option<String>) {
    let is_glob = |c: &str| c.contains(['*', '?', '[', '{']);
    let parts: Vec<&str> = from.split('/').collect();
    match parts.iter().position(|p| is_glob(p)) {
        None => (from.to_string(), None),
        Some(i) => {
            let folder = if i == 0 {
                ".".to_string()
            } else {
                parts[..i].join("/")
            };
            (folder, Some(parts[i..].join("/")))
        }
    }
}

/// Validates the `ingest` block of flow `name`: the flow, or `None` with every problem
/// in `errors`.
pub(crate) fn ingest_flow(
    path: &Path,
    dir: &Path,
    text: &str,
    name: &str,
    mut raw: RawIngest,
    errors: &mut Vec<SpecError>,
) -> Option<IngestFlow> {
    let before = errors.len();
    let mut c = Checks {
        path,
        text,
        flow: name,
        kind: "ingest",
        errors,
    };
    let into = TableName::parse(&raw.into);
    if into.is_none() {
        c.error(
            "into",
            format!("`{}` is not a table name", raw.into),
            "write tables as `schema.table`, e.g. `bronze.part`",
        );
    }
    let (folder, pattern) = split_glob(&raw.from);
    let url = storage_url(&mut c, &folder);
    check_pattern(&mut c, pattern.as_deref());
    let csv = csv_layout(&mut c, &mut raw);
    if raw.max_files_per_run == Some(0) {
        c.error(
            "max_files_per_run",
            "`max_files_per_run` is 0: no file would ever load",
            "use a positive number, or remove it to load every new file",
        );
    }
    let flow = IngestFlow {
        from: raw.from,
        folder: if url.is_some() {
            PathBuf::new()
        } else {
            dir.join(&folder)
        },
        url,
        pattern,
        // A bad name is reported above; the other checks still run.
        into: into.clone().unwrap_or(TableName::new("", "")),
        format: raw.format,
        csv,
        infer_types: raw.infer_types,
        audit: audit_columns(raw.audit),
        rescued_data: name_or(raw.rescued_data, Some("_rescued_data"), "_rescued_data"),
        schema_evolution: raw.schema_evolution.unwrap_or_default(),
        on_changed_file: raw.on_changed_file.unwrap_or_default(),
        max_files_per_run: raw.max_files_per_run,
    };
    check_added_columns(&mut c, &flow);
    (c.errors.len() == before && into.is_some()).then_some(flow)
}

/// The URL `folder` is when it has a scheme (`s3://…`), checking smelt can list that
/// storage; `None` for a local folder.
fn storage_url(c: &mut Checks<'_>, folder: &str) -> Option<String> {
    let (scheme, _) = folder.split_once("://")?;
    let known = crate::check::STORE_SCHEMES.contains(&scheme) || matches!(scheme, "http" | "https");
    if !known {
        c.error(
            "from",
            format!("`{scheme}://` is not a storage smelt can list"),
            "use a local folder, or a `file://`, `s3://`, `gs://`, `az://`, `abfss://` or `https://` URL",
        );
    } else if url::Url::parse(folder).is_err() {
        c.error(
            "from",
            format!("`{folder}` is not a valid URL"),
            "write it as `s3://bucket/folder/*.csv`, or `file:///absolute/folder`",
        );
    }
    Some(folder.to_string())
}

/// Checks the pattern part of `from` is a valid glob.
fn check_pattern(c: &mut Checks<'_>, pattern: Option<&str>) {
    if let Some(p) = pattern
        && let Err(e) = glob::Pattern::new(p)
    {
        c.error(
            "from",
            format!("`{p}` is not a valid pattern: {e}"),
            "use `*` for any name, `**` for any folders, e.g. `landing/**/*.csv`",
        );
    }
}

/// The CSV layout the options give (taking them out of `raw`), checking them: CSV
/// options on another format, separator and quote characters, the encoding, an empty
/// column list.
fn csv_layout(c: &mut Checks<'_>, raw: &mut RawIngest) -> CsvLayout {
    let csv_only = [
        ("header", raw.header.is_some()),
        ("sep", raw.sep.is_some()),
        ("quote", raw.quote.is_some()),
        ("escape", raw.escape.is_some()),
        ("encoding", raw.encoding.is_some()),
        ("columns", raw.columns.is_some()),
        ("null_value", raw.null_value.is_some()),
    ];
    if raw.format != FileFormat::Csv {
        for (leaf, set) in csv_only {
            if set {
                c.error(
                    leaf,
                    format!("`{leaf}` applies to CSV files only"),
                    "remove it, or set `format: csv`",
                );
            }
        }
    }
    let defaults = CsvLayout::default();
    let sep = csv_byte(c, "sep", raw.sep.take(), Some(defaults.sep)).unwrap_or(b',');
    let quote = csv_byte(c, "quote", raw.quote.take(), Some(defaults.quote)).unwrap_or(b'"');
    let escape = csv_byte(c, "escape", raw.escape.take(), None);
    let encoding = raw.encoding.take().unwrap_or(defaults.encoding);
    if encoding_rs::Encoding::for_label(encoding.as_bytes()).is_none() {
        c.error(
            "encoding",
            format!("`{encoding}` is not a text encoding"),
            "use a WHATWG label such as `utf-8`, `shift_jis`, `euc-jp`, `windows-1252` or `utf-16le`",
        );
    }
    if raw.columns.as_ref().is_some_and(Vec::is_empty) {
        c.error(
            "columns",
            "`columns` is empty",
            "name every column of the file, in order, or remove the option",
        );
    }
    CsvLayout {
        header: raw.header.unwrap_or(defaults.header),
        sep,
        quote,
        escape,
        encoding,
        columns: raw.columns.take(),
        null_value: raw.null_value.take(),
    }
}

/// The one-character option `leaf` as a byte (`default` when unset or not one ASCII
/// character, the latter reported).
fn csv_byte(
    c: &mut Checks<'_>,
    leaf: &str,
    value: Option<String>,
    default: Option<u8>,
) -> Option<u8> {
    match value {
        None => default,
        Some(v) if v.len() == 1 && v.is_ascii() => Some(v.as_bytes()[0]),
        Some(v) => {
            c.error(
                leaf,
                format!("`{leaf}` must be one ASCII character, not `{v}`"),
                "quote it, e.g. `sep: \"|\"` or `sep: \"\\t\"`",
            );
            default
        }
    }
}

/// The audit column names the `audit` option gives.
fn audit_columns(raw: Option<RawIngestAudit>) -> IngestAudit {
    let audit_raw = raw.unwrap_or_default();
    let dflt = IngestAudit::default();
    IngestAudit {
        datasource: name_or(
            audit_raw.datasource,
            dflt.datasource.as_deref(),
            "_datasource",
        ),
        ingest_timestamp: name_or(
            audit_raw.ingest_timestamp,
            dflt.ingest_timestamp.as_deref(),
            "_ingest_timestamp",
        ),
        // Opt-in: unset is off.
        file_row: name_or(audit_raw.file_row, None, "_file_row"),
    }
}

/// Checks the columns the flow adds: `schema_evolution: rescue` needs the rescued-data
/// column, and no audit or rescued-data column may share a name with another or with a
/// file column.
fn check_added_columns(c: &mut Checks<'_>, flow: &IngestFlow) {
    if flow.schema_evolution == IngestEvolution::Rescue && flow.rescued_data.is_none() {
        let e = SpecError::new(
            c.path,
            c.field("schema_evolution"),
            "`schema_evolution: rescue` keeps new columns in the rescued-data column, which `rescued_data: false` turns off",
        )
        .at(c.at("schema_evolution"))
        .hint("name a rescued-data column (`rescued_data: _rescued_data`), or use `add_new_columns` or `fail`");
        c.errors.push(e);
    }
    let own = flow.own_columns();
    for (i, col) in own.iter().enumerate() {
        let named_twice = own[..i].contains(col)
            || flow
                .csv
                .columns
                .as_ref()
                .is_some_and(|cols| cols.iter().any(|x| x == col));
        if named_twice {
            let e = SpecError::new(
                c.path,
                c.field("audit"),
                format!("column `{col}` is named twice"),
            )
            .at(c.at("audit").or(c.at("ingest")))
            .hint("give the audit, rescued-data and file columns different names");
            c.errors.push(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_split_at_the_first_pattern_component() {
        assert_eq!(split_glob("./landing"), ("./landing".into(), None));
        assert_eq!(
            split_glob("./landing/part/*.tbl"),
            ("./landing/part".into(), Some("*.tbl".into()))
        );
        assert_eq!(
            split_glob("/data/**/x=*/f.parquet"),
            ("/data".into(), Some("**/x=*/f.parquet".into()))
        );
        assert_eq!(split_glob("*.csv"), (".".into(), Some("*.csv".into())));
    }

    fn load(body: &str) -> crate::error::Result<crate::Pipeline> {
        let yaml = format!("lake: ./lake\nflows:\n  f:\n    ingest:\n{body}");
        crate::Pipeline::from_str(&yaml, Path::new("/p/smelt.yaml"))
    }

    #[test]
    fn defaults() {
        let p = load("      from: landing/*.tbl\n      into: bronze.part\n      format: csv\n")
            .unwrap();
        let crate::FlowKind::Ingest(f) = &p.flows[0].kind else {
            panic!("an ingest flow")
        };
        assert_eq!(f.folder, Path::new("/p/landing"));
        assert_eq!(f.url, None);
        assert_eq!(f.pattern.as_deref(), Some("*.tbl"));
        assert_eq!(f.csv, CsvLayout::default());
        assert_eq!(
            f.own_columns(),
            ["_datasource", "_ingest_timestamp", "_rescued_data"]
        );
        assert_eq!(f.schema_evolution, IngestEvolution::AddNewColumns);
        assert_eq!(f.on_changed_file, OnChangedFile::Ignore);
        assert_eq!(p.flows[0].target(), "bronze.part");
        assert!(p.flows[0].reads().is_none());
        let p = load("      from: s3://bucket/in/**/*.json\n      into: b.t\n      format: json\n")
            .unwrap();
        let crate::FlowKind::Ingest(f) = &p.flows[0].kind else {
            panic!("an ingest flow")
        };
        assert_eq!(f.url.as_deref(), Some("s3://bucket/in"));
        assert_eq!(f.pattern.as_deref(), Some("**/*.json"));
    }

    #[test]
    fn problems_are_collected_with_fixes() {
        let err = load(
            "      from: ftp://host/landing\n      into: part\n      format: json\n      sep: \"||\"\n      rescued_data: false\n      schema_evolution: rescue\n      max_files_per_run: 0\n      audit: {datasource: _rescued_data, file_row: true}\n",
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "`ftp://` is not a storage smelt can list",
            "`part` is not a table name",
            "`sep` applies to CSV files only",
            "`sep` must be one ASCII character",
            "`schema_evolution: rescue` keeps new columns",
            "`max_files_per_run` is 0",
        ] {
            assert!(err.contains(expected), "{expected}: {err}");
        }
        let err = load(
            "      from: in\n      into: b.t\n      format: csv\n      columns: [a, _datasource]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("column `_datasource` is named twice"), "{err}");
    }
}
