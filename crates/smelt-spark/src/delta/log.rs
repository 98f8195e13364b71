//! Reading a bronze table's changes through Spark, in the embedded engine's order: the Delta
//! log as Spark reads it (`text` + `from_json` over `_delta_log/*.json`) says which files each
//! commit's changes are in, in what order and at which version their rows are read; the rows
//! then come with their version, file position and row position (`_metadata.row_index`),
//! the tie-breaks of DESIGN §3 (`table_changes` exposes neither file nor row order) — read
//! as Parquet ([`crate::delta::parquet`]) or by Delta's own reader ([`crate::delta::reader`]).
//!
//! As Delta's change feed defines it: a commit with change-data files (`cdc` actions) has its
//! changes there, each row with its `_change_type`; any other commit's new files are inserts,
//! and its removed files and newly marked rows are deletes without change data (counted,
//! not read; read as deletes before the commit's inserts under `source_deletes: apply`). A
//! first run reads the snapshot: the live rows, each stamped with the commit that added its
//! file.

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
         \x20      from_json(value, 'add STRUCT<path: STRING, size: BIGINT, dataChange: BOOLEAN, partitionValues: MAP<STRING, STRING>>, remove STRUCT<path: STRING, size: BIGINT, dataChange: BOOLEAN, partitionValues: MAP<STRING, STRING>>, cdc STRUCT<path: STRING, size: BIGINT, partitionValues: MAP<STRING, STRING>>, commitInfo STRUCT<operation: STRING, operationParameters: MAP<STRING, STRING>>') AS a\n\
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
/// in the commit (`pos`), name, path, kind, size, the version they are read at (`at`) and,
/// for change-data files, their partition values (`pv`).
///
/// A range's kinds, as the embedded engine reads a commit (DESIGN §3): a commit with
/// change-data files has its changes there (`cdc`); any other commit's new files are inserts
/// (`add`), read at the range's last version unless a later commit of the range touches the
/// file again (a deletion vector), then at their own. With `removes` (`source_deletes:
/// apply`), a file removed whole is read at the version before, its rows deletes
/// (`remove`); a file removed and added again in one commit has a new deletion vector: the
/// rows it marks are deletes (`dvdel`: rows at the version before less those at the
/// commit), the rows it no longer marks come back as inserts (`dvback`, also read for a
/// `RESTORE`). Deletes come before the commit's inserts, files that come back before new
/// ones, whatever their lines. A snapshot's files are the first add of each path still in
/// the log, the stamps of the rows Delta's reader gives (see [`crate::delta::reader`]), or
/// without the `reader`, the live files, from the whole log.
pub(crate) fn files_view(span: Span, removes: bool, reader: bool) -> String {
    let name = |col: &str| format!("regexp_extract({col}, '[^/]*$', 0)");
    let no_pv = "CAST(NULL AS MAP<STRING, STRING>)";
    let body = match span {
        Span::Range(after, to) => {
            let n = name("p.path");
            let mut parts = vec![
                format!(
                    "SELECT version, line AS pos, {} AS name, a.cdc.path AS path, 'cdc' AS kind, a.cdc.size AS size, version AS at, a.cdc.partitionValues AS pv\n\
                     FROM l WHERE a.cdc IS NOT NULL",
                    name("a.cdc.path")
                ),
                format!(
                    "SELECT p.version, p.line + {NEW_FILES}L, {n}, p.path, 'add', p.size, \
                     CASE WHEN t.last > p.version THEN p.version ELSE {to}L END, p.pv\n\
                     FROM per p JOIN touched t ON t.path = p.path WHERE p.added AND NOT p.removed"
                ),
                format!(
                    "SELECT p.version, p.line + {BACK_FILES}L, {n}, p.path, 'dvback', p.size, p.version, {no_pv}\n\
                     FROM per p WHERE p.added AND p.removed AND ({removes} OR p.op = 'RESTORE')"
                ),
            ];
            if removes {
                parts.push(format!(
                    "SELECT p.version, p.line, {n}, p.path, 'remove', p.size, p.version - 1, p.pv\n\
                     FROM per p WHERE p.removed AND NOT p.added"
                ));
                parts.push(format!(
                    "SELECT p.version, p.line, {n}, p.path, 'dvdel', p.size, p.version, {no_pv}\n\
                     FROM per p WHERE p.removed AND p.added"
                ));
            }
            format!(
                "WITH l AS (SELECT * FROM {LOG} WHERE version > {after} AND version <= {to}),\n\
                 cdc_versions AS (SELECT DISTINCT version FROM l WHERE a.cdc IS NOT NULL),\n\
                 ch AS (SELECT version, line, a.add.path AS path, a.add.size AS size, true AS is_add, a.add.partitionValues AS pv FROM l WHERE a.add.dataChange\n\
                 \x20      UNION ALL SELECT version, line, a.remove.path, a.remove.size, false, a.remove.partitionValues FROM l WHERE a.remove.dataChange),\n\
                 ops AS (SELECT version, max(a.commitInfo.operation) AS op FROM l GROUP BY version),\n\
                 per AS (SELECT c.version, c.path, min(c.line) AS line, max(c.size) AS size, bool_or(c.is_add) AS added, \
                 bool_or(NOT c.is_add) AS removed, max(o.op) AS op, first(c.pv, true) AS pv\n\
                 \x20       FROM ch c LEFT JOIN ops o ON o.version = c.version\n\
                 \x20       WHERE c.version NOT IN (SELECT version FROM cdc_versions) GROUP BY c.version, c.path),\n\
                 touched AS (SELECT path, max(version) AS last FROM ch GROUP BY path)\n{}",
                parts.join("\nUNION ALL\n")
            )
        }
        Span::Snapshot(at) if !reader => format!(
            "WITH l AS (SELECT * FROM {LOG} WHERE version <= {at}),\n\
             adds AS (SELECT a.add.path AS path, min(struct(version, line)) AS first, max(version) AS last, max(a.add.size) AS size, \
             first(a.add.partitionValues, true) AS pv\n\
             \x20        FROM l WHERE a.add IS NOT NULL GROUP BY a.add.path),\n\
             removes AS (SELECT a.remove.path AS path, max(version) AS last FROM l WHERE a.remove IS NOT NULL GROUP BY a.remove.path)\n\
             SELECT adds.first.version AS version, adds.first.line + {NEW_FILES}L AS pos, {} AS name, adds.path, 'add' AS kind, adds.size, {at}L AS at, adds.pv\n\
             FROM adds LEFT JOIN removes ON adds.path = removes.path\n\
             WHERE removes.last IS NULL OR adds.last > removes.last",
            name("adds.path"),
        ),
        Span::Snapshot(at) => format!(
            "SELECT first.version AS version, first.line + {NEW_FILES}L AS pos, {} AS name, path, 'add' AS kind, size, {at}L AS at, {no_pv} AS pv\n\
             FROM (SELECT a.add.path AS path, min(struct(version, line)) AS first, max(a.add.size) AS size\n\
             \x20     FROM {LOG} WHERE version <= {at} AND a.add IS NOT NULL GROUP BY a.add.path)",
            name("path"),
        ),
    };
    format!("CREATE OR REPLACE TEMPORARY VIEW {FILES} AS\n{body}")
}

/// Added to the position of a file whose rows come back (a deletion vector that marks
/// fewer rows): after the commit's deletes (at their log lines, which are far below it:
/// `monotonically_increasing_id` of a few log files), before its new files.
const BACK_FILES: i64 = 1 << 60;

/// Added to a new file's position: after the commit's deletes and the rows that come back.
const NEW_FILES: i64 = 1 << 61;

/// The files of a range read, collected by smelt: kind, name, path, version, size and the
/// version each is read at.
pub(crate) fn files_query() -> String {
    format!("SELECT kind, name, path, version, size, at FROM {FILES} ORDER BY version, pos")
}

/// The log entries of the read that remove and add files without change data, per version
/// (collected: a rewrite without change data stops the run, as embedded): the files removed
/// (`removes`), of those the files removed whole (`whole`: not added again with a new
/// deletion vector), the new files (`adds`), the change-data files, the operation.
pub(crate) fn rewrites_query() -> String {
    format!(
        "WITH re AS (SELECT version, a.add.path AS path FROM {LOG} WHERE a.add.dataChange\n\
         \x20           INTERSECT SELECT version, a.remove.path FROM {LOG} WHERE a.remove.dataChange)\n\
         SELECT l.version, \
         count_if(a.remove.dataChange) AS removes, \
         count_if(a.remove.dataChange AND re.path IS NULL) AS whole, \
         count_if(a.add.dataChange AND re.path IS NULL) AS adds, \
         count_if(a.cdc IS NOT NULL) AS cdc, max(a.commitInfo.operation) AS operation, \
         max(a.commitInfo.operationParameters['predicate']) AS predicate \
         FROM {LOG} l LEFT JOIN re ON re.version = l.version AND re.path = coalesce(a.add.path, a.remove.path) \
         GROUP BY l.version ORDER BY l.version"
    )
}

/// `smelt_raw`: the change rows, bronze columns plus `_change_type`, `_commit_version`,
/// `_commit_timestamp`, `_file_pos`, `_row_pos`, the union of `parts` (none: the same
/// columns, no row).
pub(crate) fn raw_view(columns: &[String], mut parts: Vec<String>) -> String {
    if parts.is_empty() {
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
}
