//! The statements of an ingest run on Spark: the landing listed through Spark's `binaryFile`
//! source (names, sizes and times; no file is read), the new files read whole by the same
//! source — one glob naming exactly them, so no other file is opened — and split into lines
//! in the cluster, each line's fields cut by one regular expression (quoted fields as CSV
//! quotes them), then classified as the embedded reader does: a line with fewer fields than
//! its file has columns, or text not in the file's encoding, is malformed; one more, empty,
//! field is a trailing separator; more fields go to the rescued-data column as `_c<i>`.

use smelt_spec::CsvLayout;

use crate::sql::{ident, string_literal};

/// The landing's listing.
pub(crate) const LISTING: &str = "smelt_listing";
/// The files a run loads, as read: index, path, size and time when listed.
pub(crate) const FILES: &str = "smelt_ingest_files";
/// The files a run loads, as loaded: index, URL, time, column group, partition values.
pub(crate) const META: &str = "smelt_ingest_meta";
/// The cached non-empty lines of the files a run loads, their fields cut.
pub(crate) const LINES: &str = "smelt_ingest_lines";
/// The lines as rows: columns per file, malformed ones with their reason.
pub(crate) const ROWS: &str = "smelt_ingest_rows";
/// The views of an ingest run, those that read others first.
pub(crate) const VIEWS: [&str; 5] = [ROWS, META, LINES, FILES, LISTING];

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

/// `c` as a Java regular expression.
fn regex_char(c: u8) -> String {
    let c = c as char;
    if c == '\t' {
        "\\t".into()
    } else if "\\.[]{}()*+-?^$|/".contains(c) {
        format!("\\{c}")
    } else {
        c.to_string()
    }
}

/// The expressions over a line's raw fields `raw` (cut by [`raw_fields`]): the fields
/// unquoted, and whether one opens a quote it does not close on the line (a field that
/// spans lines, which the embedded reader reads on and this engine cannot).
pub(crate) fn fields(layout: &CsvLayout, raw: &str) -> (String, String) {
    let q = regex_char(layout.quote);
    let quoted = format!("^{q}{}{q}$", inner(layout));
    let quote = string_literal(&(layout.quote as char).to_string());
    let unescape = match layout.escape {
        Some(e) => format!(
            "regexp_replace({{}}, {}, '$1')",
            string_literal(&format!("{}(.)", regex_char(e)))
        ),
        None => "{}".into(),
    };
    let body = format!(
        "regexp_replace(substring(x, 2, length(x) - 2), {}, {quote})",
        string_literal(&format!("{q}{q}")),
    );
    let body = unescape.replace("{}", &body);
    let quoted = string_literal(&quoted);
    (
        format!("transform({raw}, x -> CASE WHEN x RLIKE {quoted} THEN {body} ELSE x END)"),
        format!("exists({raw}, x -> startswith(x, {quote}) AND NOT x RLIKE {quoted})"),
    )
}

/// The inside of a quoted field, as a regular expression (a doubled quote, or with an
/// escape character an escaped one, stands for a quote).
fn inner(layout: &CsvLayout) -> String {
    // Unrolled and possessive: Java's regex engine recurses once per repetition of an
    // alternation, and a field of a few thousand characters would overflow its stack.
    let q = regex_char(layout.quote);
    match layout.escape {
        Some(e) => format!(
            "[^{q}{e}]*+(?:(?:{q}{q}|{e}.)[^{q}{e}]*+)*+",
            e = regex_char(e)
        ),
        None => format!("[^{q}]*+(?:{q}{q}[^{q}]*+)*+"),
    }
}

/// The expression cutting line `text` into its raw fields, as `layout` quotes them: each
/// field is the separator (one put in front of the line) and then a quoted field that ends
/// at a separator or the line's end, else anything up to the next separator.
pub(crate) fn raw_fields(layout: &CsvLayout, text: &str) -> String {
    let (sep, q) = (regex_char(layout.sep), regex_char(layout.quote));
    let pattern = format!("{sep}({q}{}{q}(?={sep}|$)|[^{sep}]*+)", inner(layout));
    format!(
        "regexp_extract_all(concat({}, {text}), {}, 1)",
        string_literal(&(layout.sep as char).to_string()),
        string_literal(&pattern),
    )
}

/// The Java name of the encoding labelled `label` (a WHATWG label, as embedded).
pub(crate) fn charset(label: &str) -> String {
    match encoding_rs::Encoding::for_label(label.as_bytes()) {
        // WHATWG's Shift_JIS is Microsoft's (Java's windows-31j).
        Some(e) if e == encoding_rs::SHIFT_JIS => "windows-31j".into(),
        Some(e) => e.name().to_string(),
        None => label.to_string(),
    }
}

/// The cache of the non-empty lines of the files at `glob` (the files view's), each with its
/// file, line number, whether it is the file's first, whether the file changed since it was
/// listed, and its fields.
pub(crate) fn lines_cache(files: &str, layout: &CsvLayout) -> String {
    let (unquoted, open) = fields(layout, "__raw");
    format!(
        "CACHE TABLE {LINES} AS\n\
         SELECT __i, __line, __first, __changed, {unquoted} AS __f, {open} AS __open FROM (\n\
         SELECT f.__i, l.pos + 1 AS __line, l.pos + 1 = f.__head AS __first, f.__changed, {} AS __raw\n\
         FROM (SELECT *, array_position(transform(__lines, x -> x <> ''), true) AS __head FROM (\n\
           SELECT v.__i, v.__size <> octet_length(b.content) OR v.__mtime <> unix_micros(b.modificationTime) AS __changed,\n\
                  split(decode(b.content, {}), '\\r\\n|\\r|\\n', -1) AS __lines\n\
           FROM {files} b JOIN {FILES} v ON b.path = v.__path)) f\n\
         LATERAL VIEW posexplode(f.__lines) l AS pos, text\n\
         WHERE l.text <> '')",
        raw_fields(layout, "l.text"),
        string_literal(&charset(&layout.encoding)),
    )
}

/// How many of the files a run reads are there (a glob skips a file that is gone; no
/// content is read).
pub(crate) fn files_found_query(files: &str) -> String {
    format!("SELECT count(*) AS n FROM {files} b JOIN {FILES} v ON b.path = v.__path")
}

/// The first line of each file: its fields, as JSON, and whether the file changed.
pub(crate) fn heads_query() -> String {
    format!(
        "SELECT __i, __line, to_json(__f) AS f, __changed FROM {LINES} WHERE __first ORDER BY __i"
    )
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

fn string_array(items: &[String]) -> String {
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

/// The rows view: every line that is not a header, with its file's URL and time, its
/// field count (`__n`, a trailing separator dropped) against its file's columns (`__m`),
/// its row number in the file, why it is malformed (`__reason`, NULL when it is not) and
/// its rescued data as JSON.
pub(crate) fn rows_view(plan: &Plan, layout: &CsvLayout, own: Own<'_>) -> String {
    let m = per_group(&plan.groups, |g| g.names.len().to_string());
    let names = per_group(&plan.groups, |g| string_array(&g.names));
    let header = if layout.header {
        "NOT l.__first"
    } else {
        "true"
    };
    let rescued = rescued_entries(plan, Input::Csv(layout));
    let encoding = string_literal(&format!(
        "` is not valid {}; set `encoding:` to the file's encoding",
        layout.encoding
    ));
    let sep = string_literal(&(layout.sep as char).to_string());
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {ROWS} AS\n\
         SELECT *, CASE WHEN size(__e) > 0 THEN to_json(map_from_entries(array_sort(__e))) END AS __rescued,\n\
           CASE WHEN __n < __m THEN concat(__n, ' fields, but the file has ', __m, ' columns')\n\
                WHEN __bad > 0 THEN concat('column `', coalesce(element_at(__names, CAST(__bad AS INT)), concat('_c', __bad - 1)), {encoding})\n\
           END AS __reason, array_join(__f, {sep}) AS __raw\n\
         FROM (SELECT *, array_position(transform(slice(__f, 1, __n), x -> instr(x, '\u{FFFD}') > 0), true) AS __bad,\n\
           concat({rescued}, CASE WHEN __n > __m THEN transform(sequence(__m + 1, __n), k -> named_struct('key', concat('_c', k - 1), 'value', __f[k - 1])) ELSE filter(array({NO_ENTRY}), e -> false) END) AS __e\n\
         FROM (SELECT *, CASE WHEN size(__f) = __m + 1 AND try_element_at(__f, __m + 1) = '' THEN __m ELSE size(__f) END AS __n\n\
         FROM (SELECT l.__i, l.__line, l.__f, l.__open, v.__url, v.__mtime, v.__g{},\n\
           {m} AS __m, {names} AS __names{}\n\
         FROM {LINES} l JOIN {META} v ON l.__i = v.__i WHERE {header})))",
        partition_columns(plan),
        row_number(
            own,
            "row_number() OVER (PARTITION BY l.__i ORDER BY l.__line)"
        ),
    )
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

    #[test]
    fn fields_cut_quoted_fields_and_a_tab_separator() {
        let layout = CsvLayout {
            sep: b'\t',
            ..CsvLayout::default()
        };
        let sql = raw_fields(&layout, "t");
        assert!(
            sql.contains(r#"'\\t("[^"]*+(?:""[^"]*+)*+"(?=\\t|\u0024)|[^\\t]*+)'"#),
            "{sql}"
        );
        let escaped = CsvLayout {
            escape: Some(b'\\'),
            ..CsvLayout::default()
        };
        let (unquoted, open) = fields(&escaped, "r");
        assert!(unquoted.contains(r"'\\\\(.)', '$1'"), "{unquoted}");
        assert!(
            open.starts_with("exists(r, x -> startswith(x, '\"')"),
            "{open}"
        );
    }

    #[test]
    fn charsets_are_java_names() {
        assert_eq!(charset("utf-8"), "UTF-8");
        assert_eq!(charset("sjis"), "windows-31j");
        assert_eq!(charset("latin1"), "windows-1252");
    }
}
