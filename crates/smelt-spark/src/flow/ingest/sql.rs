//! The statements of an ingest run on Spark: the landing listed through Spark's `binaryFile`
//! source (names, sizes and times; no file is read), the new files read whole by the same
//! source — one glob naming exactly them, so no other file is opened — and split into lines
//! in the cluster, each line's fields cut by one regular expression (quoted fields as CSV
//! quotes them), then classified as the embedded reader does: a line with fewer fields than
//! its file has columns, or text not in the file's encoding, is malformed; one more, empty,
//! field is a trailing separator; more fields go to the rescued-data column as `_c<i>`.

use smelt_spec::CsvLayout;

use crate::sql::{ident, string_literal};
use crate::views::View;

/// The landing's listing.
pub(crate) const LISTING: View = View::new("listing");
/// The files a run loads, as read: index, path, size and time when listed.
pub(crate) const FILES: View = View::new("ingest_files");
/// The files a run loads, as loaded: index, URL, time, column group, partition values.
pub(crate) const META: View = View::new("ingest_meta");
/// The cached non-empty lines of the files a run loads, their fields cut.
pub(crate) const LINES: View = View::new("ingest_lines");
/// The lines as rows: columns per file, malformed ones with their reason.
pub(crate) const ROWS: View = View::new("ingest_rows");
/// The views of an ingest run, those that read others first.
pub(crate) const VIEWS: [View; 5] = [ROWS, META, LINES, FILES, LISTING];

/// A file a run loads, as the statements name it.
#[derive(Debug, Clone)]
pub(crate) struct LoadFile {
    /// Its path as Spark lists it.
    pub(crate) path: String,
    /// Its URL as smelt records it (`_datasource`, the ledger).
    pub(crate) url: String,
    /// Its size when listed.
    pub(crate) size: u64,
    /// Its modification time when listed (µs).
    pub(crate) modified_us: i64,
    /// Its column group (files with the same columns and partition folders).
    pub(crate) group: usize,
    /// Its value for each partition key of the run (in [`Plan::partition_keys`]' order).
    pub(crate) partitions: Vec<Option<String>>,
}

/// How the rows of one group of files become bronze's columns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    /// The files' column names, in file order.
    pub(crate) names: Vec<String>,
    /// The partition keys the files have.
    pub(crate) partitions: Vec<String>,
}

/// What an ingest run writes, decided from the files' heads and bronze.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Bronze's columns after the run.
    pub(crate) columns: Vec<String>,
    /// The file groups.
    pub(crate) groups: Vec<Group>,
    /// Every partition key of the run.
    pub(crate) partition_keys: Vec<String>,
    /// Input columns (file columns or partition keys) kept in the rescued-data column.
    pub(crate) rescued: Vec<String>,
}

/// How the lines of a run's files become fields.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Input<'a> {
    /// Delimited text: fields by position (`__f`).
    Csv(&'a CsvLayout),
    /// JSON lines: fields by key (`__sm`: the values as text, `__vm`: as variants).
    Json,
    /// Parquet: values as text by column name (`__pm`).
    Parquet,
}

/// The audit and rescue columns of a flow.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Own<'a> {
    pub(crate) datasource: Option<&'a str>,
    pub(crate) ingest_timestamp: Option<&'a str>,
    pub(crate) file_row: Option<&'a str>,
    pub(crate) rescued_data: Option<&'a str>,
}

/// The listing view of the folder Spark reads at `base`: every file below it, hidden ones
/// (`.x`, `_x`) left out as Spark leaves them out.
pub(crate) fn listing_view(base: &str) -> String {
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {LISTING} USING binaryFile OPTIONS (path {}, recursiveFileLookup 'true')",
        string_literal(base)
    )
}

/// The listing's rows.
pub(crate) fn listing_query() -> String {
    format!("SELECT path, length, modificationTime FROM {LISTING}")
}

/// `text` with the characters of a Hadoop glob escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '{' | '}' | '[' | ']' | '*' | '?' | '\\' | ',') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The relation of `format` (`binaryFile`, `parquet`) reading exactly the files
/// `relatives` below the folder Spark lists at `base`: one glob naming them (Hadoop globs
/// expand `{a,b/c}` into paths), or, where a path has a `:` (which Hadoop's glob takes for
/// a URI scheme once it splits the path), a `UNION ALL` of one read per file.
pub(crate) fn files_relation(format: &str, base: &str, relatives: &[&str]) -> String {
    let base = base.trim_end_matches('/');
    let path = base.split_once("://").map_or(base, |(_, rest)| rest);
    if path.contains(':') || relatives.iter().any(|r| r.contains(':')) {
        let reads: Vec<String> = relatives
            .iter()
            .map(|r| format!("SELECT * FROM {format}.{}", ident(&format!("{base}/{r}"))))
            .collect();
        return format!("({})", reads.join(" UNION ALL "));
    }
    let names: Vec<String> = relatives.iter().map(|r| glob_escape(r)).collect();
    let glob = match names.as_slice() {
        [one] => format!("{}/{one}", glob_escape(base)),
        _ => format!("{}/{{{}}}", glob_escape(base), names.join(",")),
    };
    format!("{format}.{}", ident(&glob))
}

/// The files view: the files a run reads, by their paths as Spark lists them.
pub(crate) fn files_view(files: &[LoadFile]) -> String {
    let rows: Vec<String> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            format!(
                "({i}, {}, {}L, {}L)",
                string_literal(&f.path),
                f.size,
                f.modified_us
            )
        })
        .collect();
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {FILES} AS SELECT * FROM VALUES {} AS t(__i, __path, __size, __mtime)",
        rows.join(", ")
    )
}

/// The meta view: for each file a run loads, its URL, time, column group and partition
/// values (`keys` of them).
pub(crate) fn meta_view(files: &[LoadFile], keys: usize) -> String {
    let rows: Vec<String> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut values = vec![
                format!("{i}"),
                string_literal(&f.url),
                format!("{}L", f.modified_us),
                format!("{}", f.group),
            ];
            values.extend(
                (0..keys).map(|k| match f.partitions.get(k).cloned().flatten() {
                    Some(v) => string_literal(&v),
                    None => "CAST(NULL AS STRING)".into(),
                }),
            );
            format!("({})", values.join(", "))
        })
        .collect();
    let mut names = vec![
        "__i".to_string(),
        "__url".into(),
        "__mtime".into(),
        "__g".into(),
    ];
    names.extend((0..keys).map(|k| format!("__p{k}")));
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {META} AS SELECT * FROM VALUES {} AS t({})",
        rows.join(",\n  "),
        names.join(", ")
    )
}

/// How many of the files a run reads are there (a glob skips a file that is gone; no
/// content is read).
pub(crate) fn files_found_query(files: &str) -> String {
    format!("SELECT count(*) AS n FROM {files} b JOIN {FILES} v ON b.path = v.__path")
}

/// `CASE __g WHEN 0 THEN … END` over the groups (the expression alone for one group).
pub(crate) fn per_group(groups: &[Group], expr: impl Fn(&Group) -> String) -> String {
    match groups {
        [one] => expr(one),
        _ => {
            let arms: Vec<String> = groups
                .iter()
                .enumerate()
                .map(|(g, group)| format!("WHEN {g} THEN {}", expr(group)))
                .collect();
            format!("CASE __g {} END", arms.join(" "))
        }
    }
}

pub(super) fn string_array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| string_literal(s)).collect();
    format!("array({})", items.join(", "))
}

/// A file column's value with the flow's NULL text as NULL (unset: an empty field).
fn nulled(value: String, layout: &CsvLayout) -> String {
    format!(
        "nullif({value}, {})",
        string_literal(layout.null_value.as_deref().unwrap_or(""))
    )
}

/// The value of input column `name` (a file column or a partition key) in `group`, if the
/// group has it.
fn input_value(plan: &Plan, group: &Group, name: &str, input: Input<'_>) -> Option<String> {
    if let Some(p) = group.names.iter().position(|n| n == name) {
        return Some(match input {
            Input::Csv(layout) => nulled(format!("try_element_at(__f, {})", p + 1), layout),
            Input::Json => json_value(name),
            Input::Parquet => parquet_value(name),
        });
    }
    if group.partitions.iter().any(|k| k == name) {
        let k = plan.partition_keys.iter().position(|k| k == name)?;
        return Some(format!("__p{k}"));
    }
    None
}

/// The rescued entries of a row (`array<struct<key, value>>`): the input columns bronze
/// keeps there, those with a value.
pub(crate) fn rescued_entries(plan: &Plan, input: Input<'_>) -> String {
    per_group(&plan.groups, |g| {
        let entries: Vec<String> = plan
            .rescued
            .iter()
            .filter_map(|name| {
                input_value(plan, g, name, input).map(|v| {
                    format!(
                        "named_struct('key', {}, 'value', {v})",
                        string_literal(name)
                    )
                })
            })
            .collect();
        if entries.is_empty() {
            format!("filter(array({NO_ENTRY}), e -> false)")
        } else {
            format!(
                "filter(array({}), e -> e.value IS NOT NULL)",
                entries.join(", ")
            )
        }
    })
}

/// An entry's type, for an empty list of entries.
pub(crate) const NO_ENTRY: &str =
    "named_struct('key', CAST(NULL AS STRING), 'value', CAST(NULL AS STRING))";

/// The row number column of the rows view (`file_row`), as `row` gives it.
pub(crate) fn row_number(own: Own<'_>, row: &str) -> String {
    match own.file_row {
        Some(_) => format!(", {row} AS __row"),
        None => String::new(),
    }
}

/// The partition columns of the meta view, for the rows view.
pub(crate) fn partition_columns(plan: &Plan) -> String {
    (0..plan.partition_keys.len())
        .map(|k| format!(", v.__p{k}"))
        .collect()
}

/// The counts of a run's rows: loaded, malformed, rescued; the first malformed row, the
/// first row with rescued data and the first line with a quote it does not close.
pub(crate) fn counts_query() -> String {
    format!(
        "SELECT count_if(__reason IS NULL) AS loaded, count_if(__reason IS NOT NULL) AS malformed, \
         count_if(__reason IS NULL AND __rescued IS NOT NULL) AS rescued, \
         min_by(__url, IF(__reason IS NULL, NULL, struct(__i, __line))) AS bad_url, \
         min_by(__line, IF(__reason IS NULL, NULL, struct(__i, __line))) AS bad_line, \
         min_by(__reason, IF(__reason IS NULL, NULL, struct(__i, __line))) AS bad_reason, \
         min_by(__url, IF(__reason IS NULL AND __rescued IS NOT NULL, struct(__i, __line), NULL)) AS rescued_url, \
         min_by(__line, IF(__reason IS NULL AND __rescued IS NOT NULL, struct(__i, __line), NULL)) AS rescued_line, \
         min_by(__url, IF(__open, struct(__i, __line), NULL)) AS open_url, \
         min_by(__line, IF(__open, struct(__i, __line), NULL)) AS open_line \
         FROM {ROWS}"
    )
}

/// The select of bronze's rows, its columns in order.
pub(crate) fn bronze_select(plan: &Plan, input: Input<'_>, own: Own<'_>) -> String {
    let columns: Vec<String> = plan
        .columns
        .iter()
        .map(|c| {
            let is = |o: Option<&str>| o == Some(c.as_str());
            let value = if is(own.datasource) {
                "__url".to_string()
            } else if is(own.ingest_timestamp) {
                "timestamp_micros(__mtime)".into()
            } else if is(own.file_row) {
                "CAST(__row AS BIGINT)".into()
            } else if is(own.rescued_data) {
                "__rescued".into()
            } else {
                let value = per_group(&plan.groups, |g| {
                    input_value(plan, g, c, input).unwrap_or_else(|| "CAST(NULL AS STRING)".into())
                });
                format!("CAST({value} AS STRING)")
            };
            format!("{value} AS {}", ident(c))
        })
        .collect();
    format!(
        "SELECT {} FROM {ROWS} WHERE __reason IS NULL",
        columns.join(", ")
    )
}

/// Who wrote a run's rejects.
pub(crate) struct RejectsOf<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) flow: &'a str,
    pub(crate) batch: i64,
    pub(crate) run_us: i64,
}

/// The select of a run's rejects rows (the ingest rejects table's columns).
pub(crate) fn rejects_select(of: &RejectsOf<'_>) -> String {
    format!(
        "SELECT {}, {}, {}L, __url, CAST(__line AS BIGINT), __reason, __raw, timestamp_micros({}L) \
         FROM {ROWS} WHERE __reason IS NOT NULL",
        string_literal(of.run_id),
        string_literal(of.flow),
        of.batch,
        of.run_us,
    )
}

/// The value of key `name` of a JSON line, as text.
pub(super) fn json_value(name: &str) -> String {
    let key = string_literal(name);
    format!(
        "CASE WHEN schema_of_variant(try_element_at(__vm, {key})) RLIKE '^(OBJECT|ARRAY)' \
         THEN to_json(try_element_at(__vm, {key})) ELSE try_element_at(__sm, {key}) END"
    )
}

/// The value of column `name` of a Parquet row, as text.
pub(super) fn parquet_value(name: &str) -> String {
    format!("try_element_at(__pm, {})", string_literal(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_name_exactly_the_files() {
        assert_eq!(
            files_relation("parquet", "/l", &["a.tbl"]),
            "parquet.`/l/a.tbl`"
        );
        assert_eq!(
            files_relation("binaryFile", "/l/", &["a,b.csv", "d/x{1}.csv"]),
            "binaryFile.`/l/{a\\,b.csv,d/x\\{1\\}.csv}`"
        );
        assert_eq!(
            files_relation("parquet", "s3://b/l", &["t=10:00/a", "t=10:00/b"]),
            "(SELECT * FROM parquet.`s3://b/l/t=10:00/a` UNION ALL SELECT * FROM parquet.`s3://b/l/t=10:00/b`)"
        );
    }
}
