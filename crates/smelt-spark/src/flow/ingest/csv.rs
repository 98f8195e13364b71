//! CSV files as Spark SQL: each file's lines read in its encoding (`lines_cache`), its first
//! line (`heads_query`), and its fields cut by a regular expression built from the flow's
//! layout — separator, quote, escape — into the bronze columns (`rows_view`).

use smelt_spec::CsvLayout;

use super::sql::{
    FILES, Input, LINES, META, NO_ENTRY, Own, Plan, ROWS, partition_columns, per_group,
    rescued_entries, row_number, string_array,
};
use crate::sql::string_literal;

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

/// The first line of each file: its fields, as JSON, and whether the file changed.
pub(crate) fn heads_query() -> String {
    format!(
        "SELECT __i, __line, to_json(__f) AS f, __changed FROM {LINES} WHERE __first ORDER BY __i"
    )
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

#[cfg(test)]
mod tests {
    use super::*;

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
