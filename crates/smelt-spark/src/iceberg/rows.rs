//! The rows a flow run reads from an Iceberg source, through Spark, as the embedded engine
//! reads them (`smelt_raw`: the source's columns, `_change_type`, `_commit_version` — the
//! snapshot's sequence number —, `_commit_timestamp`, `_file_pos`, `_row_pos`).
//!
//! An increment: the current snapshot's ancestors after the watermark, oldest first
//! (`replace` snapshots, compactions, skipped). Each snapshot's files come from the
//! `all_entries` metadata table: the data files it added are read at that snapshot, the
//! data files it removed at its parent, each by Iceberg's `_file` and `_pos` columns. In a
//! snapshot that removes and adds files (a copy-on-write rewrite) the rows equal on both
//! sides are carried over, one for one, and dropped; the rest of the removed rows are
//! deletes (read only under `source_deletes: apply`), the rest of the added ones inserts.
//! A first run reads the current snapshot, each row stamped with the sequence number and
//! time of the snapshot that added its file.

use smelt_engine::{EngineError, Result};

use super::{Meta, Snap};
use crate::session::Session;
use crate::sql::{ident, string_literal};
use crate::views::RAW;

/// An Iceberg table read by a flow run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    /// Its name in the pipeline (for messages).
    pub(crate) name: &'a str,
    /// It in Spark SQL.
    pub(crate) table: &'a str,
    pub(crate) meta: &'a Meta,
    /// Its columns.
    pub(crate) columns: &'a [String],
    /// Whether removed rows are read, as deletes.
    pub(crate) removes: bool,
}

/// The snapshots after sequence number `after` up to the current one, oldest first, as the
/// embedded engine finds them: a range whose snapshots were expired, or a source behind the
/// watermark, stops the run.
pub(crate) fn range<'m>(src: &Source<'m>, after: i64) -> Result<Vec<&'m Snap>> {
    let mut out = Vec::new();
    let mut reached = false;
    for snap in src.meta.ancestors() {
        if snap.seq <= after {
            reached = true;
            break;
        }
        out.push(snap);
    }
    // As embedded: a parent expired, or the oldest left without one (pyiceberg drops the
    // link) past the watermark's next sequence number.
    let oldest = out.last();
    if !reached && oldest.is_some_and(|s| s.parent.is_some() || s.seq > after + 1) {
        return Err(EngineError::user(
            format!(
                "`{}`: the snapshots after sequence number {after} are no longer all there (expired): their changes can no longer be read",
                src.name
            ),
            "rebuild what reads the table with `smelt run --full-refresh`, and keep snapshots longer than the time between runs",
        ));
    }
    out.reverse();
    Ok(out)
}

/// The snapshots of `snaps` that rewrite or remove rows: sequence number, operation.
pub(crate) fn rewrites(snaps: &[&Snap]) -> Vec<(i64, String)> {
    snaps
        .iter()
        .filter(|s| matches!(s.operation.as_str(), "overwrite" | "delete"))
        .map(|s| (s.seq, s.operation.clone()))
        .collect()
}

/// One file of a snapshot's read.
#[derive(Debug, Clone)]
struct File {
    snapshot: i64,
    added: bool,
    path: String,
    size: u64,
}

/// `smelt_raw` for `snaps` (an increment) or, with `None`, the current snapshot: the files
/// read and their bytes, and the delete files left unread (counted).
pub(crate) async fn rows(
    s: &Session<'_>,
    src: Source<'_>,
    snaps: Option<&[&Snap]>,
) -> Result<(usize, u64, usize)> {
    let (sql, files, bytes, ignored) = match snaps {
        Some(snaps) => increment(s, &src, snaps).await?,
        None => snapshot(s, &src).await?,
    };
    s.view("define the change rows (smelt_raw)", sql).await?;
    Ok((files, bytes, ignored))
}

/// The columns of a read, `d.` qualified.
fn columns(src: &Source<'_>) -> String {
    src.columns
        .iter()
        .map(|c| format!("d.{}", ident(c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `path IN (…)`.
fn paths_in(files: &[&File]) -> String {
    files
        .iter()
        .map(|f| string_literal(&f.path))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The data files `snaps` added and removed, in the order the manifests list them (the
/// embedded engine's file order), each once (a manifest listed by several snapshots is read
/// again), and the number of delete files they added.
async fn entries(s: &Session<'_>, src: &Source<'_>, snaps: &[&Snap]) -> Result<(Vec<File>, usize)> {
    let ids: Vec<String> = snaps.iter().map(|s| s.id.to_string()).collect();
    let rows = s
        .read(
            "list the snapshots' files",
            format!(
                "SELECT snapshot_id, status, data_file.content AS content, \
                 data_file.file_path AS path, data_file.file_size_in_bytes AS size\n\
                 FROM {}.`all_entries` WHERE status IN (1, 2) AND snapshot_id IN ({})",
                src.table,
                ids.join(", ")
            ),
        )
        .await?;
    let (snap_ids, statuses, contents) = (
        rows.ints("snapshot_id"),
        rows.ints("status"),
        rows.ints("content"),
    );
    let (paths, sizes) = (rows.strings("path"), rows.ints("size"));
    let mut files: Vec<File> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut delete_files = 0;
    for i in 0..rows.len() {
        let entry = (snap_ids[i], statuses[i], paths[i].clone());
        if !seen.insert(entry) {
            continue;
        }
        if contents[i].unwrap_or(0) != 0 {
            if statuses[i] == Some(1) {
                delete_files += 1;
            }
            continue;
        }
        files.push(File {
            snapshot: snap_ids[i].unwrap_or(0),
            added: statuses[i] == Some(1),
            path: paths[i].clone().unwrap_or_default(),
            size: sizes[i].unwrap_or(0) as u64,
        });
    }
    Ok((files, delete_files))
}

/// The rows of `side` — files snapshot `snap` added (read at it) or removed (read at its
/// parent, `at`) — as changes of `kind`, their file positions after `offset`; a rewrite's
/// rows carry the snapshot's index (`rewrite`).
fn side_select(
    src: &Source<'_>,
    cols: &str,
    snap: &Snap,
    (side, at, kind, offset): (&[&File], i64, &str, usize),
    rewrite: Option<usize>,
) -> String {
    let pos: Vec<String> = side
        .iter()
        .enumerate()
        .map(|(i, f)| format!("WHEN {} THEN {}", string_literal(&f.path), offset + i))
        .collect();
    format!(
        "SELECT {cols}, '{kind}' AS _change_type, {seq}L AS _commit_version, \
         timestamp_micros({us}L) AS _commit_timestamp, CASE d._file {} END AS _file_pos, \
         d._pos AS _row_pos{snap_col}\n\
         FROM {table} VERSION AS OF {at} d WHERE d._file IN ({})",
        pos.join(" "),
        paths_in(side),
        seq = snap.seq,
        us = snap.at_us,
        table = src.table,
        snap_col = match rewrite {
            Some(k) => format!(", {k} AS __snap"),
            None => String::new(),
        },
    )
}

async fn increment(
    s: &Session<'_>,
    src: &Source<'_>,
    snaps: &[&Snap],
) -> Result<(String, usize, u64, usize)> {
    let snaps: Vec<&Snap> = snaps
        .iter()
        .copied()
        .filter(|s| s.operation != "replace")
        .collect();
    if snaps.is_empty() {
        return Ok((empty(src), 0, 0, 0));
    }
    let (files, delete_files) = entries(s, src, &snaps).await?;
    if delete_files > 0 && src.removes {
        return Err(EngineError::user(
            format!(
                "`{}` has delete files (merge-on-read deletes) after the watermark: reading them as deletes is not supported on the Spark engine yet",
                src.name
            ),
            "run this flow with `--engine embedded`, or set `source_deletes: ignore`",
        ));
    }
    let cols = columns(src);
    // Snapshots that only add (or only remove) files, and rewrites (both: carried over).
    let (mut plain, mut rewrites) = (Vec::new(), Vec::new());
    let mut read = (0, 0);
    let mut ignored = delete_files;
    for (k, snap) in snaps.iter().enumerate() {
        let of = |added: bool| -> Vec<&File> {
            files
                .iter()
                .filter(|f| f.snapshot == snap.id && f.added == added)
                .collect()
        };
        let (removed, added) = (of(false), of(true));
        if added.is_empty() && !src.removes {
            // As embedded: the files a snapshot only removes are counted, not read.
            ignored += removed.len();
        }
        // A removed file is read (at the parent) when its rows may be deletes, or carried
        // over into the snapshot's added files.
        let read_removed = !removed.is_empty() && (src.removes || !added.is_empty());
        let sides = [
            (read_removed, &removed, snap.parent, "delete", 0),
            (
                !added.is_empty(),
                &added,
                Some(snap.id),
                "insert",
                removed.len(),
            ),
        ];
        let rewrite = !removed.is_empty() && !added.is_empty();
        for (wanted, side, at, kind, offset) in sides {
            if !wanted {
                continue;
            }
            let Some(at) = at else {
                return Err(EngineError::user(
                    format!(
                        "`{}`: snapshot {} removes files but has no parent (the snapshots before it were expired): the rows it removed cannot be read",
                        src.name, snap.id
                    ),
                    "rebuild what reads the table with `smelt run --full-refresh`",
                ));
            };
            read.0 += side.len();
            read.1 += side.iter().map(|f| f.size).sum::<u64>();
            let part = side_select(
                src,
                &cols,
                snap,
                (side.as_slice(), at, kind, offset),
                rewrite.then_some(k),
            );
            match rewrite {
                true => rewrites.push(part),
                false => plain.push(part),
            }
        }
    }
    if !rewrites.is_empty() {
        plain.push(carry_over(src, &rewrites.join("\nUNION ALL\n")));
    }
    if plain.is_empty() {
        return Ok((empty(src), 0, 0, ignored));
    }
    let sql = format!(
        "CREATE OR REPLACE TEMPORARY VIEW {RAW} AS\n{}",
        plain.join("\nUNION ALL\n")
    );
    Ok((sql, read.0, read.1, ignored))
}

/// The rows of rewriting snapshots' `sides` (with `__snap`): the rows equal on both sides
/// of a snapshot paired one for one and dropped; deletes kept only when `src.removes`.
fn carry_over(src: &Source<'_>, sides: &str) -> String {
    let all: Vec<String> = src.columns.iter().map(|c| ident(c)).collect();
    let same: Vec<String> = src
        .columns
        .iter()
        .map(|c| format!("a.{0} <=> b.{0}", ident(c)))
        .collect();
    let a_cols: Vec<String> = src
        .columns
        .iter()
        .map(|c| format!("a.{}", ident(c)))
        .collect();
    let keep = match src.removes {
        true => "",
        false => "\nWHERE a._change_type = 'insert'",
    };
    format!(
        "SELECT * FROM (WITH sides AS (\n{sides}\n),\n\
         numbered AS (SELECT *, row_number() OVER (PARTITION BY __snap, _change_type, {} ORDER BY _file_pos, _row_pos) AS __n FROM sides)\n\
         SELECT {}, a._change_type, a._commit_version, a._commit_timestamp, a._file_pos, a._row_pos\n\
         FROM numbered a LEFT ANTI JOIN numbered b\n\
         ON a.__snap = b.__snap AND a._change_type <> b._change_type AND a.__n = b.__n AND {}{keep})",
        all.join(", "),
        a_cols.join(", "),
        same.join(" AND ")
    )
}

/// The current snapshot's rows, each with the sequence number and time of the snapshot
/// that added its file (the oldest snapshot kept when that one was expired).
async fn snapshot(s: &Session<'_>, src: &Source<'_>) -> Result<(String, usize, u64, usize)> {
    let Some(current) = src.meta.current else {
        return Ok((empty(src), 0, 0, 0));
    };
    let rows = s
        .read(
            "list the snapshot's files",
            format!(
                "SELECT data_file.file_path AS path, sequence_number AS seq, snapshot_id, \
                 data_file.file_size_in_bytes AS size\n\
                 FROM {}.`entries` VERSION AS OF {current} WHERE status < 2 AND data_file.content = 0",
                src.table
            ),
        )
        .await?;
    let (paths, seqs, ids, sizes) = (
        rows.strings("path"),
        rows.ints("seq"),
        rows.ints("snapshot_id"),
        rows.ints("size"),
    );
    let oldest = src.meta.snapshots.iter().min_by_key(|s| s.seq);
    let mut files: Vec<(i64, i64, String)> = (0..rows.len())
        .map(|i| {
            let at = ids[i]
                .and_then(|id| src.meta.snapshot(id))
                .or(oldest)
                .map_or(0, |s| s.at_us);
            (
                seqs[i].unwrap_or(0),
                at,
                paths[i].clone().unwrap_or_default(),
            )
        })
        .collect();
    // Stably by sequence number, as embedded.
    files.sort_by_key(|f| f.0);
    if files.is_empty() {
        return Ok((empty(src), 0, 0, 0));
    }
    let values: Vec<String> = files
        .iter()
        .enumerate()
        .map(|(i, (seq, us, path))| {
            format!(
                "({}, {seq}L, timestamp_micros({us}L), {i})",
                string_literal(path)
            )
        })
        .collect();
    let sql = format!(
        "CREATE OR REPLACE TEMPORARY VIEW {RAW} AS\n\
         SELECT {}, 'insert' AS _change_type, f.v AS _commit_version, f.ts AS _commit_timestamp, \
         f.pos AS _file_pos, d._pos AS _row_pos\n\
         FROM {} VERSION AS OF {current} d\n\
         JOIN (SELECT * FROM VALUES {} AS f(path, v, ts, pos)) f ON d._file = f.path",
        columns(src),
        src.table,
        values.join(", ")
    );
    let bytes = sizes.iter().flatten().map(|b| *b as u64).sum();
    Ok((sql, files.len(), bytes, 0))
}

/// `smelt_raw` without a row.
fn empty(src: &Source<'_>) -> String {
    format!(
        "CREATE OR REPLACE TEMPORARY VIEW {RAW} AS\n\
         SELECT {}, CAST(NULL AS STRING) AS _change_type, CAST(NULL AS BIGINT) AS _commit_version, \
         CAST(NULL AS TIMESTAMP) AS _commit_timestamp, CAST(NULL AS BIGINT) AS _file_pos, \
         CAST(NULL AS BIGINT) AS _row_pos FROM {} d WHERE false",
        columns(src),
        src.table
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn snap(id: i64, parent: Option<i64>, seq: i64, op: &str) -> Snap {
        Snap {
            id,
            parent,
            seq,
            at_us: 0,
            operation: op.into(),
            summary: BTreeMap::new(),
        }
    }

    fn meta(snapshots: Vec<Snap>, current: i64) -> Meta {
        Meta {
            current: Some(current),
            snapshots,
            properties: BTreeMap::new(),
            format_version: 2,
        }
    }

    #[test]
    fn a_range_is_the_ancestors_after_the_watermark_oldest_first() {
        let m = meta(
            vec![
                snap(10, None, 1, "append"),
                snap(20, Some(10), 2, "append"),
                snap(30, Some(20), 3, "overwrite"),
            ],
            30,
        );
        let src = Source {
            name: "ice.ns.t",
            table: "t",
            meta: &m,
            columns: &[],
            removes: false,
        };
        let ids: Vec<i64> = range(&src, 1).unwrap().iter().map(|s| s.id).collect();
        assert_eq!(ids, [20, 30]);
        assert_eq!(
            rewrites(&range(&src, 1).unwrap()),
            [(3, "overwrite".to_string())]
        );
        assert!(range(&src, 3).unwrap().is_empty());
        // Snapshot 20 expired: the range after 1 cannot be read.
        let expired = meta(vec![snap(30, Some(20), 3, "append")], 30);
        let src = Source {
            meta: &expired,
            ..src
        };
        let err = range(&src, 1).unwrap_err().to_string();
        assert!(err.contains("no longer all there"), "{err}");
        assert!(range(&src, 2).is_err());
        let root = meta(vec![snap(30, None, 3, "append")], 30);
        let src = Source { meta: &root, ..src };
        assert_eq!(range(&src, 2).unwrap().len(), 1);
        assert!(range(&src, 1).is_err());
    }

    #[test]
    fn rows_equal_on_both_sides_of_a_snapshot_are_carried_over() {
        let m = meta(vec![], 1);
        let columns = vec!["id".to_string(), "v".to_string()];
        let src = Source {
            name: "ice.ns.t",
            table: "t",
            meta: &m,
            columns: &columns,
            removes: false,
        };
        let sql = carry_over(&src, "SELECT 1");
        assert!(
            sql.contains("a.`id` <=> b.`id` AND a.`v` <=> b.`v`"),
            "{sql}"
        );
        assert!(sql.ends_with("WHERE a._change_type = 'insert')"), "{sql}");
        let with_deletes = carry_over(
            &Source {
                removes: true,
                ..src
            },
            "SELECT 1",
        );
        assert!(
            !with_deletes.contains("WHERE a._change_type"),
            "{with_deletes}"
        );
    }
}
