//! Reading a bronze table's changes through Spark, in the embedded engine's order: the Delta
//! log as Spark reads it (`text` + `from_json` over `_delta_log/*.json`) says which files each
//! commit's changes are in and in what order; the files are read as Parquet with
//! `_metadata.row_index`, so every change has its version, file position and row position,
//! the tie-breaks of DESIGN §3 (`table_changes` exposes neither file nor row order).
//!
//! As Delta's change feed defines it: a commit with change-data files (`cdc` actions) has its
//! changes there, each row with its `_change_type`; any other commit's new files are inserts,
//! and its removed files are deletes without change data (counted, not read; read as deletes
//! before the commit's inserts under `source_deletes: apply`). A first run reads the snapshot:
//! the live files, each row stamped with the commit that added its file.

use crate::sql::ident;
use crate::views::{CHANGES, COMMITS, FILES, LOG, RAW, STAGE, View};

/// The temporary views and caches of one flow run, in the order they are made.
pub(crate) const VIEWS: [View; 6] = [LOG, COMMITS, FILES, RAW, CHANGES, STAGE];

/// Which commits a run reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Span {
    /// The versions after the first, up to the second (inclusive).
    Range(i64, i64),
    /// The snapshot at this version.
    Snapshot(i64),
}

/// The log entry file name of `version`.
fn log_file(version: i64) -> String {
    format!("{version:020}.json")
}

/// `smelt_log`: one row per action line of the commits read (`version`, `line` in the commit
/// file, the action `a`).
pub(crate) fn log_view(bronze: &str, span: Span) -> String {
    let files = match span {
        // A glob of the entries read: no other entry is opened.
        Span::Range(after, to) => {
            let names: Vec<String> = (after + 1..=to).map(log_file).collect();
            format!("{{{}}}", names.join(","))
        }
        Span::Snapshot(_) => "*.json".to_string(),
    };
    let path = format!("{bronze}/_delta_log/{files}");
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {LOG} AS\n\
         SELECT try_cast(regexp_extract(_metadata.file_name, '^([0-9]+)[.]json$', 1) AS BIGINT) AS version,\n\
         \x20      monotonically_increasing_id() AS line,\n\
         \x20      from_json(value, 'add STRUCT<path: STRING, size: BIGINT, dataChange: BOOLEAN>, remove STRUCT<path: STRING, size: BIGINT, dataChange: BOOLEAN>, cdc STRUCT<path: STRING, size: BIGINT>, commitInfo STRUCT<operation: STRING, operationParameters: MAP<STRING, STRING>>') AS a\n\
         FROM text.{} WHERE try_cast(regexp_extract(_metadata.file_name, '^([0-9]+)[.]json$', 1) AS BIGINT) IS NOT NULL",
        ident(&path)
    )
}

/// `smelt_commits`: the commit time of each version read (Delta's history: in-commit
/// timestamps, else the log entries' modification times made monotonic).
pub(crate) fn commits_view(commits: &[(i64, i64)]) -> String {
    let rows: Vec<String> = commits
        .iter()
        .map(|(v, ts)| format!("({v}L, timestamp_micros({ts}L))"))
        .collect();
    let rows = if rows.is_empty() {
        "(-1L, timestamp_micros(0L))".to_string()
    } else {
        rows.join(", ")
    };
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {COMMITS} AS\n\
         SELECT * FROM VALUES {rows} AS c(version, ts)"
    )
}

/// `smelt_files`: the files whose rows are the changes read, with their version, position
/// in the commit (`pos`), name and kind (`add`: inserts; `cdc`: change data; with
/// `removes`, `remove`: the rows of a file removed without change data, deletes — as
/// embedded, before the commit's inserts).
pub(crate) fn files_view(span: Span, removes: bool) -> String {
    let name = |col: &str| format!("regexp_extract({col}, '[^/]*$', 0)");
    let body = match span {
        Span::Range(after, to) => {
            let (add_pos, removed) = match removes {
                // A commit's deletes come before its inserts whatever their lines.
                true => (
                    format!("line + {INSERTS_AFTER}L"),
                    format!(
                        "\nUNION ALL\n\
                         SELECT version, line, {}, a.remove.path, 'remove', a.remove.size\n\
                         FROM l WHERE a.remove.dataChange AND version NOT IN (SELECT version FROM cdc_versions)",
                        name("a.remove.path")
                    ),
                ),
                false => ("line".to_string(), String::new()),
            };
            format!(
                "WITH l AS (SELECT * FROM {LOG} WHERE version > {after} AND version <= {to}),\n\
                 cdc_versions AS (SELECT DISTINCT version FROM l WHERE a.cdc IS NOT NULL)\n\
                 SELECT version, line AS pos, {cdc} AS name, a.cdc.path AS path, 'cdc' AS kind, a.cdc.size AS size\n\
                 FROM l WHERE a.cdc IS NOT NULL\n\
                 UNION ALL\n\
                 SELECT version, {add_pos}, {add}, a.add.path, 'add', a.add.size\n\
                 FROM l WHERE a.add.dataChange AND version NOT IN (SELECT version FROM cdc_versions){removed}",
                cdc = name("a.cdc.path"),
                add = name("a.add.path"),
            )
        }
        Span::Snapshot(at) => format!(
            "WITH l AS (SELECT * FROM {LOG} WHERE version <= {at}),\n\
             adds AS (SELECT a.add.path AS path, min(struct(version, line)) AS first, max(version) AS last, max(a.add.size) AS size\n\
             \x20        FROM l WHERE a.add IS NOT NULL GROUP BY a.add.path),\n\
             removes AS (SELECT a.remove.path AS path, max(version) AS last FROM l WHERE a.remove IS NOT NULL GROUP BY a.remove.path)\n\
             SELECT adds.first.version AS version, adds.first.line AS pos, {add} AS name, adds.path, 'add' AS kind, adds.size\n\
             FROM adds LEFT JOIN removes ON adds.path = removes.path\n\
             WHERE removes.last IS NULL OR adds.last > removes.last",
            add = name("adds.path"),
        ),
    };
    format!("CREATE OR REPLACE TEMPORARY VIEW {FILES} AS\n{body}")
}

/// Added to an insert file's position when the read has deletes without change data (log
/// lines are far below it: `monotonically_increasing_id` of a few log files).
const INSERTS_AFTER: i64 = 1 << 62;

/// The files of the read, collected by smelt: kind, name, path, version, size.
pub(crate) fn files_query() -> String {
    format!("SELECT kind, name, path, version, size FROM {FILES} ORDER BY version, pos")
}

/// The log entries of the read that remove and add files without change data, per version
/// (collected: a rewrite without change data stops the run, as embedded).
pub(crate) fn rewrites_query() -> String {
    format!(
        "SELECT version, \
         count_if(a.remove.dataChange) AS removes, count_if(a.add.dataChange) AS adds, \
         count_if(a.cdc IS NOT NULL) AS cdc, max(a.commitInfo.operation) AS operation, \
         max(a.commitInfo.operationParameters['predicate']) AS predicate \
         FROM {LOG} GROUP BY version ORDER BY version"
    )
}

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

/// A read of the Parquet files at `glob`: the bronze columns (`present` in the files, the
/// others NULL), the file name and the row's index in it.
fn parquet_rows(glob: &str, columns: &[String], present: &[String], extra: &str) -> String {
    let cols: Vec<String> = columns
        .iter()
        .map(|c| {
            if present.iter().any(|p| p == c) {
                ident(c)
            } else {
                format!("CAST(NULL AS STRING) AS {}", ident(c))
            }
        })
        .collect();
    format!(
        "SELECT {}{extra}, _metadata.file_name AS __file, _metadata.row_index AS __row FROM parquet.{}",
        cols.join(", "),
        ident(glob)
    )
}

/// The globs of a read's files and the columns their files have: new files, change-data
/// files, removed files (each `None` when the read has none).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sources<'a> {
    pub(crate) adds: Option<(&'a str, &'a [String])>,
    pub(crate) cdc: Option<(&'a str, &'a [String])>,
    pub(crate) removes: Option<(&'a str, &'a [String])>,
}

/// `smelt_raw`: the change rows, bronze columns as stored plus `_change_type`,
/// `_commit_version`, `_commit_timestamp`, `_file_pos`, `_row_pos`, from `sources`.
pub(crate) fn raw_view(columns: &[String], sources: Sources<'_>) -> String {
    let cols: Vec<String> = columns.iter().map(|c| format!("d.{}", ident(c))).collect();
    let cols = cols.join(", ");
    let mut parts = Vec::new();
    let whole_files = [
        (sources.adds, "add", "insert"),
        (sources.removes, "remove", "delete"),
    ];
    for (files, kind, change) in whole_files {
        let Some((glob, present)) = files else {
            continue;
        };
        parts.push(format!(
            "SELECT {cols}, '{change}' AS _change_type, f.version AS _commit_version, c.ts AS _commit_timestamp, f.pos AS _file_pos, d.__row AS _row_pos\n\
             FROM ({}) d\n\
             JOIN {FILES} f ON f.kind = '{kind}' AND f.name = d.__file\n\
             JOIN {COMMITS} c ON c.version = f.version",
            parquet_rows(glob, columns, present, "")
        ));
    }
    let cdc = sources.cdc;
    if let Some((glob, present)) = cdc {
        parts.push(format!(
            "SELECT {cols}, d._change_type, f.version AS _commit_version, c.ts AS _commit_timestamp, f.pos AS _file_pos, d.__row AS _row_pos\n\
             FROM ({}) d\n\
             JOIN {FILES} f ON f.kind = 'cdc' AND f.name = d.__file\n\
             JOIN {COMMITS} c ON c.version = f.version",
            parquet_rows(glob, columns, present, ", _change_type")
        ));
    }
    if parts.is_empty() {
        // Nothing to read: the same columns, no row.
        let nulls: Vec<String> = columns
            .iter()
            .map(|c| format!("CAST(NULL AS STRING) AS {}", ident(c)))
            .collect();
        parts.push(format!(
            "SELECT {}, CAST(NULL AS STRING) AS _change_type, CAST(NULL AS BIGINT) AS _commit_version, \
             CAST(NULL AS TIMESTAMP) AS _commit_timestamp, CAST(NULL AS BIGINT) AS _file_pos, \
             CAST(NULL AS BIGINT) AS _row_pos WHERE false",
            nulls.join(", ")
        ));
    }
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {RAW} AS\n{}",
        parts.join("\nUNION ALL\n")
    )
}

/// The columns a Parquet read of `glob` has (no row is read).
pub(crate) fn probe(glob: &str) -> String {
    format!("SELECT * FROM parquet.{} LIMIT 0", ident(glob))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_reads_only_its_log_entries() {
        let sql = log_view("/l/b", Span::Range(2, 4));
        assert!(
            sql.contains(
                "text.`/l/b/_delta_log/{00000000000000000003.json,00000000000000000004.json}`"
            ),
            "{sql}"
        );
        assert!(log_view("/l/b", Span::Snapshot(4)).contains("_delta_log/*.json`"));
    }

    /// A read of change-data files only (a `DELETE` with the change feed on) names the
    /// change columns itself: it is the first part of the union (a bug once).
    #[test]
    fn every_part_of_the_change_rows_names_its_columns() {
        let columns = vec!["Id".to_string()];
        let present = columns.clone();
        let only_cdc = raw_view(
            &columns,
            Sources {
                cdc: Some(("/b/_change_data", &present)),
                ..Sources::default()
            },
        );
        for name in [
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
