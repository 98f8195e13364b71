//! Change rows read by Delta's own reader (`delta.`…` VERSION AS OF v`), which applies a
//! table's deletion vectors, partition values and column mapping and still gives each row's
//! file and position in it (`_metadata.file_name`, `_metadata.row_index`: deleted rows
//! skipped, the others keeping their positions), so the rows keep the embedded engine's
//! order (DESIGN §11).
//!
//! Each file is read at the version whose rows the change is: a new file at the range's last
//! version (or at its own commit, when a later commit of the range marks rows in it); a file
//! removed whole at the version before; rows newly marked deleted as the rows of the version
//! before less those of the commit (an anti-join on file and position), rows no longer marked
//! the other way round. A snapshot is the rows of its version, each stamped with the commit
//! still in the log that added its file, or, for files added before the log's first entry
//! (log cleanup), with the version before it and the file's modification time, as embedded.

use crate::sql::{ident, string_literal};
use crate::views::{COMMITS, FILES};

/// The rows of `table` at version `at` (of the files named `names`, when given): bronze's
/// `columns`, the file's name (`__file`), the row's position (`__row`), the file's
/// modification time (`__mtime`).
fn scan(table: &str, at: i64, columns: &[String], names: Option<&[String]>) -> String {
    let cols: Vec<String> = columns.iter().map(|c| ident(c)).collect();
    let only = names.map_or(String::new(), |names| {
        let names: Vec<String> = names.iter().map(|n| string_literal(n)).collect();
        format!(" WHERE _metadata.file_name IN ({})", names.join(", "))
    });
    format!(
        "SELECT {}, _metadata.file_name AS __file, _metadata.row_index AS __row, \
         _metadata.file_modification_time AS __mtime FROM {table} VERSION AS OF {at}{only}",
        cols.join(", ")
    )
}

/// The change columns of a part over rows `d` joined to their file `f` and commit `c`.
fn select(columns: &[String], change: &str) -> String {
    let cols: Vec<String> = columns.iter().map(|c| format!("d.{}", ident(c))).collect();
    format!(
        "SELECT {}, '{change}' AS _change_type, f.version AS _commit_version, c.ts AS _commit_timestamp, \
         f.pos AS _file_pos, d.__row AS _row_pos",
        cols.join(", ")
    )
}

/// The rows of the files `names` of kind `kind` (`add`: inserts, `remove`: deletes) read at
/// version `at`: one part of `smelt_raw`.
pub(crate) fn files_part(
    table: &str,
    columns: &[String],
    kind: &str,
    at: i64,
    names: &[String],
) -> String {
    let change = if kind == "remove" { "delete" } else { "insert" };
    format!(
        "{}\nFROM ({}) d\n\
         JOIN {FILES} f ON f.kind = '{kind}' AND f.at = {at} AND f.name = d.__file\n\
         JOIN {COMMITS} c ON c.version = f.version",
        select(columns, change),
        scan(table, at, columns, Some(names)),
    )
}

/// The rows of the files `names` whose deletion vector commit `version` changed: `dvdel`,
/// the rows it marks deleted (there the version before, not at it), deletes; `dvback`, the
/// rows it no longer marks, inserts.
pub(crate) fn vector_part(
    table: &str,
    columns: &[String],
    kind: &str,
    version: i64,
    names: &[String],
) -> String {
    let (change, (was, is)) = match kind {
        "dvdel" => ("delete", (version - 1, version)),
        _ => ("insert", (version, version - 1)),
    };
    format!(
        "{}\nFROM (SELECT a.* FROM ({}) a LEFT ANTI JOIN ({}) b ON b.__file = a.__file AND b.__row = a.__row) d\n\
         JOIN {FILES} f ON f.kind = '{kind}' AND f.version = {version} AND f.name = d.__file\n\
         JOIN {COMMITS} c ON c.version = f.version",
        select(columns, change),
        scan(table, was, columns, Some(names)),
        scan(table, is, columns, Some(names)),
    )
}

/// The snapshot of `table` at `at`: every row an insert, stamped with the commit that added
/// its file (`smelt_files`), or, for a file added before the log's first entry, `older` (the
/// version before it) and the file's modification time, placed by that time.
pub(crate) fn snapshot_part(table: &str, columns: &[String], at: i64, older: i64) -> String {
    let cols: Vec<String> = columns.iter().map(|c| format!("d.{}", ident(c))).collect();
    format!(
        "SELECT {}, 'insert' AS _change_type, coalesce(f.version, {older}L) AS _commit_version, \
         coalesce(c.ts, d.__mtime) AS _commit_timestamp, coalesce(f.pos, unix_micros(d.__mtime)) AS _file_pos, \
         d.__row AS _row_pos\n\
         FROM ({}) d\n\
         LEFT JOIN {FILES} f ON f.kind = 'add' AND f.name = d.__file\n\
         LEFT JOIN {COMMITS} c ON c.version = f.version",
        cols.join(", "),
        scan(table, at, columns, None),
    )
}

/// The number of files of `table`'s snapshot at `at` that hold rows, and their bytes.
pub(crate) fn snapshot_files(table: &str, at: i64) -> String {
    format!(
        "SELECT count(*) AS files, CAST(coalesce(sum(size), 0) AS BIGINT) AS bytes FROM \
         (SELECT DISTINCT _metadata.file_name AS name, _metadata.file_size AS size FROM {table} VERSION AS OF {at})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_change_reads_the_two_versions_of_its_files() {
        let sql = vector_part(
            "delta.`/b`",
            &["Id".to_string()],
            "dvdel",
            7,
            &["f.parquet".to_string()],
        );
        let before = sql.find("VERSION AS OF 6").expect("the version before");
        let at = sql.find("VERSION AS OF 7").expect("the commit's version");
        assert!(
            before < at,
            "the rows before, less those at the commit: {sql}"
        );
        assert!(sql.contains("'delete' AS _change_type"), "{sql}");
        assert!(
            sql.contains("_metadata.file_name IN ('f.parquet')"),
            "{sql}"
        );
    }

    #[test]
    fn a_snapshot_stamps_files_older_than_the_log_with_their_time() {
        let sql = snapshot_part("delta.`/b`", &["Id".to_string()], 9, 4);
        assert!(sql.contains("coalesce(f.version, 4L)"), "{sql}");
        assert!(sql.contains("coalesce(c.ts, d.__mtime)"), "{sql}");
        assert!(!sql.contains("WHERE _metadata.file_name"), "{sql}");
    }
}
