//! Change rows read straight from a bronze table's Parquet files (the files a commit named,
//! through a glob that opens only them): every file of a table without deletion vectors, and
//! the change-data files of any table — their columns under their physical names when the
//! table maps columns, partition columns from the action's partition values.

use crate::delta::layout::Layout;
use crate::sql::{ident, string_literal};
use crate::views::{COMMITS, FILES};

/// Where the rows of `files` (relative paths under `bronze`) are read from: a glob naming
/// each (only they are opened), or, for many files or names a glob cannot hold, the folder
/// (`subdir`), every file of it listed and the others left out by the join.
pub(crate) fn source_glob(bronze: &str, subdir: Option<&str>, files: &[String]) -> String {
    let plain =
        |p: &String| !p.is_empty() && !p.contains(['{', '}', ',', '[', ']', '*', '?', '\\', '%']);
    if !files.is_empty() && files.len() <= 2_000 && files.iter().all(plain) {
        format!("{bronze}/{{{}}}", files.join(","))
    } else {
        match subdir {
            Some(dir) => format!("{bronze}/{dir}"),
            None => bronze.to_string(),
        }
    }
}

/// Files of one kind read as Parquet: their glob and the columns the files have.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Files<'a> {
    /// `add` (inserts), `remove` (deletes) or `cdc` (rows with their own `_change_type`).
    pub(crate) kind: &'a str,
    pub(crate) glob: &'a str,
    pub(crate) present: &'a [String],
}

/// The change rows of `files`, bronze's `columns` (by their names in `layout`) plus
/// `_change_type`, `_commit_version`, `_commit_timestamp`, `_file_pos`, `_row_pos`: one
/// part of `smelt_raw`.
pub(crate) fn part(files: Files<'_>, columns: &[String], layout: &Layout) -> String {
    let mut inner = Vec::new();
    let mut outer = Vec::new();
    for c in columns {
        let physical = layout.physical(c);
        if let Some(ty) = layout.partition_type(c) {
            // A partition column is in the paths (where Spark may read it with a type of
            // its own guess), not the files: the action's value.
            outer.push(format!(
                "CAST(f.pv[{}] AS {ty}) AS {}",
                string_literal(physical),
                ident(c)
            ));
        } else if files.present.iter().any(|p| p == physical) {
            inner.push(format!("{} AS {}", ident(physical), ident(c)));
            outer.push(format!("d.{}", ident(c)));
        } else {
            outer.push(format!("CAST(NULL AS STRING) AS {}", ident(c)));
        }
    }
    let (change, extra) = match files.kind {
        "cdc" => ("d._change_type".to_string(), ", _change_type"),
        "remove" => ("'delete'".to_string(), ""),
        _ => ("'insert'".to_string(), ""),
    };
    inner.push(format!(
        "_metadata.file_name AS __file, _metadata.row_index AS __row{extra}"
    ));
    format!(
        "SELECT {}, {change} AS _change_type, f.version AS _commit_version, c.ts AS _commit_timestamp, f.pos AS _file_pos, d.__row AS _row_pos\n\
         FROM (SELECT {} FROM parquet.{}) d\n\
         JOIN {FILES} f ON f.kind = '{}' AND f.name = d.__file\n\
         JOIN {COMMITS} c ON c.version = f.version",
        outer.join(", "),
        inner.join(", "),
        ident(files.glob),
        files.kind,
    )
}

/// The columns a Parquet read of `glob` has (no row is read).
pub(crate) fn probe(glob: &str) -> String {
    format!("SELECT * FROM parquet.{} LIMIT 0", ident(glob))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// A read of change-data files only (a `DELETE` with the change feed on) names the
    /// change columns itself (a bug once, when it was the first part of the union).
    #[test]
    fn every_part_of_the_change_rows_names_its_columns() {
        let columns = cols(&["Id"]);
        let only_cdc = part(
            Files {
                kind: "cdc",
                glob: "/b/_change_data",
                present: &columns,
            },
            &columns,
            &Layout::default(),
        );
        for name in [
            "_change_type",
            "_commit_version",
            "_commit_timestamp",
            "_file_pos",
            "_row_pos",
        ] {
            assert!(
                only_cdc.contains(&format!("AS {name}")),
                "{name}: {only_cdc}"
            );
        }
    }

    /// Under column mapping a file's columns are the physical names, read as the logical
    /// ones; a partition column the file lacks is the action's value, by its physical name.
    #[test]
    fn mapped_and_partition_columns_are_read_by_their_names_in_the_files() {
        let layout = Layout {
            partitions: vec![("day".into(), "date".into())],
            physical: vec![
                ("Id".into(), "col-1".into()),
                ("day".into(), "col-3".into()),
            ],
            ..Layout::default()
        };
        let sql = part(
            Files {
                kind: "cdc",
                glob: "/b/_change_data",
                present: &cols(&["col-1", "_change_type"]),
            },
            &cols(&["Id", "day", "gone"]),
            &layout,
        );
        assert!(sql.contains("`col-1` AS `Id`"), "{sql}");
        assert!(
            sql.contains("CAST(f.pv['col-3'] AS date) AS `day`"),
            "{sql}"
        );
        assert!(sql.contains("CAST(NULL AS STRING) AS `gone`"), "{sql}");
    }

    #[test]
    fn globs_name_plain_files_and_fall_back_to_the_folder() {
        let files = vec!["a.parquet".to_string(), "b.parquet".to_string()];
        assert_eq!(source_glob("/b", None, &files), "/b/{a.parquet,b.parquet}");
        let odd = vec!["a,b.parquet".to_string()];
        assert_eq!(
            source_glob("/b", Some("_change_data"), &odd),
            "/b/_change_data"
        );
    }
}
