//! JSON lines on Spark, as the embedded reader reads them: one object per line (a line
//! that is not one is malformed), columns named by the keys in the order they first
//! appear, values as text — strings as they are, numbers and booleans as JSON writes them
//! (Spark's JSON parser and serde's agree: `2.50` is `2.5`, `1e3` is `1000.0`), objects and
//! arrays as compact JSON with their keys sorted (a variant's JSON, as serde's maps sort).

use super::sql::{
    FILES, Input, LINES, META, NO_ENTRY, Own, Plan, ROWS, partition_columns, rescued_entries,
    row_number,
};

/// The cache of the non-empty lines of the files at `glob` (the files view's), trimmed, each
/// with its file, line number (lines end at `\n`), its keys (NULL for a line that is not an
/// object), and whether the file changed since it was listed.
pub(crate) fn lines_cache(files: &str) -> String {
    format!(
        "CACHE TABLE {LINES} AS\n\
         SELECT __i, __line, false AS __first, __changed, false AS __open, __text, json_object_keys(__text) AS __keys FROM (\n\
         SELECT f.__i, l.pos + 1 AS __line, f.__changed, regexp_replace(l.text, '^\\\\s+|\\\\s+$', '') AS __text\n\
         FROM (SELECT v.__i, v.__size <> octet_length(b.content) OR v.__mtime <> unix_micros(b.modificationTime) AS __changed,\n\
                  split(decode(b.content, 'UTF-8'), '\\n', -1) AS __lines\n\
           FROM {files} b JOIN {FILES} v ON b.path = v.__path) f\n\
         LATERAL VIEW posexplode(f.__lines) l AS pos, text)\n\
         WHERE __text <> ''"
    )
}

/// Each file's keys, in the order they first appear in it (on lines that are not
/// malformed).
pub(crate) fn keys_query() -> String {
    format!(
        "SELECT __i, k FROM (SELECT __i, __line, pos, k FROM {LINES} LATERAL VIEW posexplode(__keys) t AS pos, k \
         WHERE instr(__text, '\u{FFFD}') = 0) \
         GROUP BY __i, k ORDER BY __i, min(struct(__line, pos))"
    )
}

/// The rows view: every line with its file's URL and time, its values by key (`__sm`,
/// `__vm`; a key written twice: its last value, the session's `LAST_WIN` dedup policy
/// rebuilding the map), why it is malformed (`__reason`) and its rescued data as JSON.
pub(crate) fn rows_view(plan: &Plan, own: Own<'_>) -> String {
    let rescued = rescued_entries(plan, Input::Json);
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {ROWS} AS\n\
         SELECT *, CASE WHEN size(__e) > 0 THEN to_json(map_from_entries(array_sort(__e))) END AS __rescued\n\
         FROM (SELECT *, CASE WHEN __reason IS NULL THEN {rescued} ELSE filter(array({NO_ENTRY}), e -> false) END AS __e\n\
         FROM (SELECT l.__i, l.__line, l.__open, l.__text AS __raw, v.__url, v.__mtime, v.__g{},\n\
           CASE WHEN l.__keys IS NULL THEN 'not a JSON object' WHEN instr(l.__text, '\u{FFFD}') > 0 THEN 'not valid UTF-8' END AS __reason,\n\
           CASE WHEN l.__keys IS NOT NULL THEN map_from_entries(map_entries(from_json(l.__text, 'MAP<STRING, STRING>'))) END AS __sm,\n\
           CASE WHEN l.__keys IS NOT NULL THEN map_from_entries(map_entries(from_json(l.__text, 'MAP<STRING, VARIANT>'))) END AS __vm{}\n\
         FROM {LINES} l JOIN {META} v ON l.__i = v.__i))",
        partition_columns(plan),
        row_number(own, "l.__line"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_and_arrays_are_sorted_json_other_values_text() {
        let v = super::super::sql::json_value("a'b");
        assert!(v.contains("try_element_at(__vm, 'a\\'b')"), "{v}");
        assert!(v.ends_with("ELSE try_element_at(__sm, 'a\\'b') END"), "{v}");
        assert!(keys_query().contains("ORDER BY __i, min(struct(__line, pos))"));
    }
}
