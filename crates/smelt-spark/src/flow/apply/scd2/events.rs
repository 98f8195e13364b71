//! The caches of an SCD2 run, set-based over the keys the run changes, as
//! [`smelt_core::scd2`] folds them embedded. Each statement reads one cache (a CTE where it
//! needs it more than once). The views keep their analyzed plans
//! (`spark.sql.legacy.storeAnalyzedPlanForView`): Spark would analyze a view kept as text
//! again at every mention, down the chain of views over bronze's log, seconds a statement;
//! and Spark cannot join two views whose analyzed plans share a view, so no statement does.
//!
//! - `smelt_hchanges`: the typed changes kept (deletes, upserts failing `where` as deletes),
//!   keyed `__k<j>`, sequenced `__seq`, their values `__c<i>`, in read order (`__o1..3`).
//! - `smelt_events`: every event of the keys changed — silver's version starts (`__vs`, with
//!   the version's end in `__send`), the in-place updates inside a version, version ends no
//!   version starts at (deletes), stored tombstones, the changes — one per key and sequence
//!   (stored events win, then the last change read), folded by window functions: an upsert
//!   opens a version unless it follows an upsert with equal tracked columns; a delete
//!   closes the open version, or is a tombstone.
//!   Per key (windows over the keys: one exchange feeds them all) what the run did, and
//!   whether its history changed: a rebuilt version — a run of upserts, the last one's data
//!   — that is no stored one (start, end, data), or a stored one not rebuilt.

use smelt_rules::order::SortKey;
use smelt_spec::ApplyFlow;

use super::names::Names;
use crate::flow::apply::Shape;
use crate::sql::ident;
use crate::views::{CHANGES, EVENTS, HCHANGES};

/// Where the run reads the stored state from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stored<'a> {
    /// Silver, when it exists and the run is not a rebuild.
    pub(crate) silver: Option<&'a str>,
    /// The tombstones, likewise.
    pub(crate) tombstones: Option<&'a str>,
    /// The tombstones carry the watermark of a run killed before silver's write (bronze
    /// version `t`): the tombstones the deletes of versions up to `t` wrote are theirs, not
    /// stored history.
    pub(crate) replayed_through: Option<i64>,
}

/// Every cache of an SCD2 run, in order: (what it does, statement).
pub(crate) fn caches(
    spec: &ApplyFlow,
    shape: &Shape,
    stored: Stored<'_>,
) -> Option<Vec<(&'static str, String)>> {
    let n = Names::new(shape)?;
    Some(vec![
        ("key and sequence the changes", changes(spec, &n)),
        (
            "rebuild the history of the keys changed",
            events(&n, stored),
        ),
    ])
}

/// `smelt_hchanges`: the changes not left out, keyed and sequenced; `__rej`: a NULL in a NOT
/// NULL key (rejected); `__wf`: an upsert failing `where` (applied as a delete).
fn changes(spec: &ApplyFlow, n: &Names<'_>) -> String {
    let shape = n.shape;
    let seq = &shape.seq[0].read;
    let kept =
        format!("SELECT * FROM {CHANGES} WHERE __kind IN ('upsert', 'delete') AND NOT __bad");
    let from = match &spec.filter {
        Some(pred) => {
            // The predicate sees the change's values under silver's names.
            let mut state: Vec<String> = shape
                .cast_columns()
                .map(|i| format!("__v{i} AS {}", shape.name(i)))
                .collect();
            if let Some(ingest) = &shape.ingest {
                state.push(format!("_commit_timestamp AS {}", ident(ingest)));
            }
            format!(
                "(SELECT __row.*, (__row.__kind = 'upsert' AND NOT coalesce(({pred}), false)) AS __wf \
                 FROM (SELECT {}, struct(c.*) AS __row FROM ({kept}) c) g)",
                state.join(", ")
            )
        }
        None => format!("(SELECT *, false AS __wf FROM ({kept}) c)"),
    };
    let mut cols: Vec<String> = shape
        .keys
        .iter()
        .enumerate()
        .map(|(j, i)| format!("__v{i} AS __k{j}"))
        .collect();
    cols.push(format!("CAST({seq} AS {}) AS __seq", n.seq_type()));
    cols.push("CASE WHEN __kind = 'delete' OR __wf THEN 'delete' ELSE 'upsert' END AS __op".into());
    cols.push("__wf".into());
    cols.push(format!("{} AS __rej", shape.null_key()));
    cols.extend(n.carried(|i| match shape.data.contains(&i) {
        true => format!("__v{i}"),
        false => "_commit_timestamp".to_string(),
    }));
    // The read order (`smelt_rules::order`), as `__o1` … `__o3`.
    for (i, c) in smelt_rules::order::READ_ORDER.iter().enumerate() {
        cols.push(format!("{c} AS __o{}", i + 1));
    }
    format!(
        "CACHE TABLE {HCHANGES} AS SELECT {} FROM {from} c",
        cols.join(", ")
    )
}

/// Silver's columns of the stored versions of the keys changed (`hk`), as `__k<j>`,
/// `__start`, `__end`, `__last` (the sequence of the last change merged in place) and the
/// carried columns.
fn stored_versions(n: &Names<'_>, silver: &str) -> String {
    let shape = n.shape;
    let h = n.history;
    let value = |i: usize| match shape.absent.contains(&i) {
        true => format!("CAST(NULL AS {})", n.ty(i)),
        false => format!("t.{}", shape.name(i)),
    };
    let stored_seq = &shape.seq[0].stored;
    let last = shape
        .silver
        .columns
        .iter()
        .position(|c| &c.name == stored_seq)
        .map_or("NULL".to_string(), value);
    let mut cols = n.keys_of("t");
    cols.push(format!("t.{} AS __start", shape.name(h.start)));
    cols.push(format!("t.{} AS __end", shape.name(h.end)));
    cols.push(format!("CAST({last} AS {}) AS __last", n.seq_type()));
    cols.extend(n.carried(value));
    format!(
        "SELECT {} FROM {silver} t LEFT SEMI JOIN hk k ON {}",
        cols.join(", "),
        n.key_on("t", "k")
    )
}

/// The events of one stored version, as an array of structs to `inline`: its start, an
/// in-place update inside it, its end when no version starts there (a delete); `__keep`
/// says which are events.
fn stored_events(n: &Names<'_>) -> String {
    let seq_type = n.seq_type();
    let event = |seq: &str, op: &str, vs: bool, send: &str, keep: &str, data: bool| {
        let mut fields = vec![
            format!("'__seq', CAST({seq} AS {seq_type})"),
            format!("'__op', '{op}'"),
            format!("'__vs', {vs}"),
            format!("'__send', CAST({send} AS {seq_type})"),
            format!("'__keep', {keep}"),
        ];
        for &i in &n.carried {
            let value = match data {
                true => format!("__c{i}"),
                false => format!("CAST(NULL AS {})", n.ty(i)),
            };
            fields.push(format!("'__c{i}', {value}"));
        }
        format!("named_struct({})", fields.join(", "))
    };
    let inside = "(__last IS NOT NULL AND (__start IS NULL OR __last > __start) AND (__end IS NULL OR __last < __end))";
    let closed = "(__end IS NOT NULL AND NOT (__nstart <=> __end))";
    format!(
        "array({}, {}, {})",
        event("__start", "upsert", true, "__end", "true", true),
        event("__last", "upsert", false, "NULL", inside, true),
        event("__end", "delete", false, "NULL", closed, false),
    )
}

/// `smelt_events`: see the module documentation.
fn events(n: &Names<'_>, stored: Stored<'_>) -> String {
    let keys = n.keys();
    let shape = n.shape;
    let seq_type = n.seq_type();
    let no_order =
        "CAST(NULL AS BIGINT) AS __o1, CAST(NULL AS BIGINT) AS __o2, CAST(NULL AS BIGINT) AS __o3";
    let null_carried = n.null_carried().join(", ");
    let carried: Vec<String> = n.carried.iter().map(|i| format!("__c{i}")).collect();
    let mut ctes = vec![
        format!("hc AS (SELECT * FROM {HCHANGES} WHERE NOT __rej)"),
        format!("hk AS (SELECT DISTINCT {keys} FROM hc)"),
    ];
    let mut parts = Vec::new();
    if let Some(silver) = stored.silver {
        ctes.push(format!(
            "sv AS (SELECT st.*, lead(__start) OVER (PARTITION BY {keys} ORDER BY __start) AS __nstart FROM ({}) st)",
            stored_versions(n, silver)
        ));
        // One pass over the stored versions: each makes up to three events.
        parts.push(format!(
            "SELECT {keys}, x.__seq, x.__op, true AS __st, false AS __tb, x.__vs, x.__send, {}, {no_order} \
             FROM sv LATERAL VIEW inline({}) x WHERE x.__keep",
            carried
                .iter()
                .map(|c| format!("x.{c}"))
                .collect::<Vec<_>>()
                .join(", "),
            stored_events(n)
        ));
    }
    if let Some(tombs) = stored.tombstones {
        let t_keys = n.keys_of("t");
        let mut tomb = format!(
            "SELECT {}, CAST(t.{} AS {seq_type}) AS __seq FROM {tombs} t LEFT SEMI JOIN hk k ON {}",
            t_keys.join(", "),
            ident(&shape.seq[0].stored),
            n.key_on("t", "k")
        );
        if let Some(through) = stored.replayed_through {
            // The killed run's own tombstones: written by this run's deletes, replayed.
            tomb = format!(
                "SELECT * FROM ({tomb}) t LEFT ANTI JOIN (SELECT {keys}, __seq FROM hc \
                 WHERE __op = 'delete' AND __o1 <= {through}) o ON {} AND t.__seq <=> o.__seq",
                n.on("t", "o")
            );
        }
        parts.push(format!(
            "SELECT {keys}, __seq, 'delete' AS __op, true AS __st, true AS __tb, false AS __vs, \
             CAST(NULL AS {seq_type}) AS __send, {null_carried}, {no_order} FROM ({tomb}) t"
        ));
    }
    // A delete's values do not count: two deletes of one sequence are one.
    let change_carried = n
        .carried(|i| format!("IF(__op = 'delete', NULL, __c{i})"))
        .join(", ");
    parts.push(format!(
        "SELECT {keys}, __seq, __op, false AS __st, false AS __tb, false AS __vs, \
         CAST(NULL AS {seq_type}) AS __send, {change_carried}, __o1, __o2, __o3 FROM hc"
    ));
    let cmp = format!("named_struct('op', __op, 'd', {})", n.data_struct(""));
    // Per key and sequence: stored events first (a version start before a delete), then
    // the changes, the last read first (an upsert or a delete).
    let at = format!("PARTITION BY {keys}, __seq");
    // The read order's columns as `__o1` … `__o3` (see the cache above).
    let last_read_first: Vec<SortKey> = smelt_rules::order::last_read_first()
        .into_iter()
        .enumerate()
        .map(|(i, k)| SortKey {
            column: format!("__o{}", i + 1),
            ..k
        })
        .collect();
    let rank = format!(
        "{at} ORDER BY __st DESC, (__st AND __op = 'upsert') DESC, {}",
        crate::sql::order_by(&last_read_first)
    );
    let by_key = format!("PARTITION BY {keys}");
    let by_seq = format!("PARTITION BY {keys} ORDER BY __seq");
    let by_version = format!("PARTITION BY {keys}, __grp ORDER BY __seq");
    let tracked = n.tracked_struct();
    let data = n.data_struct("");
    // Every window is partitioned by the keys (and more): one exchange, by the keys, feeds
    // them all.
    format!(
        "CACHE TABLE {EVENTS} AS\n\
         WITH {},\n\
         ev AS (SELECT * FROM ({}) u DISTRIBUTE BY {keys}),\n\
         d AS (SELECT ev.*, row_number() OVER ({rank}) AS __rn,\n\
         \x20 bool_or(__tb) OVER ({at}) AS __tball, bool_or(__st) OVER ({at}) AS __gst,\n\
         \x20 first_value({cmp}) OVER ({rank}) AS __wcmp FROM ev),\n\
         e AS (SELECT d.*, sum(CAST(NOT __st AND __rn > 1 AS INT)) OVER ({by_key}) AS __dropped,\n\
         \x20 max(CAST(NOT __st AND NOT __gst AND NOT ({cmp} <=> __wcmp) AS INT)) OVER ({by_key}) AS __conflict FROM d),\n\
         kv AS (SELECT e.*, count_if(NOT __st) OVER ({by_key}) AS __kc FROM e WHERE __rn = 1),\n\
         f AS (SELECT kv.*, lag(__op) OVER ({by_seq}) AS __pop, lag({tracked}) OVER ({by_seq}) AS __ptrk,\n\
         \x20 {tracked} AS __trk, {data} AS __data FROM kv),\n\
         g AS (SELECT f.*, (__op = 'upsert' AND (__pop IS NULL OR __pop = 'delete' OR NOT (__ptrk <=> __trk))) AS __opens,\n\
         \x20 (__op = 'delete' AND __pop = 'upsert') AS __closes,\n\
         \x20 (__op = 'delete' AND coalesce(__pop, 'delete') = 'delete' AND NOT __tball) AS __newtomb FROM f),\n\
         h AS (SELECT g.*, sum(CAST(__opens AS INT)) OVER ({by_seq} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS __grp,\n\
         \x20 lead(__seq) OVER ({by_seq}) AS __next, lead(__op) OVER ({by_seq}) AS __nop,\n\
         \x20 lead(__opens) OVER ({by_seq}) AS __nopens, row_number() OVER ({by_seq}) = 1 AS __first FROM g),\n\
         i AS (SELECT h.*, (__op = 'upsert' AND (__nop IS NULL OR __nop = 'delete' OR __nopens)) AS __vlast,\n\
         \x20 first_value(__seq) OVER ({by_version}) AS __vstart, first_value(__vs) OVER ({by_version}) AS __fvs,\n\
         \x20 first_value(__send) OVER ({by_version}) AS __fsend, first_value(__data) OVER ({by_version}) AS __fdata FROM h),\n\
         j AS (SELECT i.*, (__vs AND NOT __opens) OR (__vlast AND NOT (__fvs AND __fsend <=> __next AND __fdata <=> __data)) AS __differs FROM i)\n\
         SELECT j.*, bool_or(__vs) OVER ({by_key}) AS __had,\n\
         \x20 __kc > 0 AND bool_or(__differs) OVER ({by_key}) AS __changed,\n\
         \x20 count_if(__closes AND NOT __st) OVER ({by_key}) AS __closed, count_if(__newtomb) OVER ({by_key}) AS __tombs,\n\
         \x20 count_if(__newtomb AND NOT __st) OVER ({by_key}) AS __tombch FROM j",
        ctes.join(",\n"),
        parts.join("\nUNION ALL "),
    )
}

/// Silver's columns of the rows `smelt_events` writes, and `__op`: the rebuilt versions of
/// the keys whose history changed (`upsert`: one per run of upserts, its start the first
/// one's, its data the last one's, its end the event after it; the update audit column the
/// run's time) and their stored versions that no rebuilt one starts at (`delete`: keys and
/// `__START_AT`). One event can be both: a stored version merged into the version before it
/// is deleted at its own start, and that version, ending with its data, is written.
pub(super) fn rows_written(shape: &Shape, run_us: i64) -> Option<String> {
    let n = Names::new(shape)?;
    let h = n.history;
    let update = update_column(shape);
    let columns = |version: bool| -> String {
        (0..shape.silver.columns.len())
            .map(|i| {
                let value = if let Some(j) = shape.keys.iter().position(|&k| k == i) {
                    format!("__k{j}")
                } else if i == h.start {
                    match version {
                        true => "__vstart".to_string(),
                        false => "__seq".to_string(),
                    }
                } else if !version {
                    format!("CAST(NULL AS {})", n.ty(i))
                } else if i == h.end {
                    "__next".to_string()
                } else if n.carried.contains(&i) {
                    format!("__c{i}")
                } else if Some(i) == update {
                    format!("timestamp_micros({run_us}L)")
                } else {
                    format!("CAST(NULL AS {})", n.ty(i))
                };
                format!("{value} AS {}", shape.name(i))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(format!(
        "SELECT {}, 'upsert' AS __op FROM {EVENTS} WHERE __changed AND __vlast \
         UNION ALL SELECT {}, 'delete' AS __op FROM {EVENTS} WHERE __changed AND __vs AND NOT __opens",
        columns(true),
        columns(false)
    ))
}

/// The update audit column: neither key, data, ingest audit nor history bound.
pub(super) fn update_column(shape: &Shape) -> Option<usize> {
    let h = shape.history.as_ref()?;
    (0..shape.silver.columns.len()).find(|&i| {
        !shape.keys.contains(&i)
            && !shape.data.contains(&i)
            && i != h.start
            && i != h.end
            && shape.ingest.as_deref() != Some(shape.silver.columns[i].name.as_str())
    })
}

#[cfg(test)]
mod tests {
    use smelt_spec::ddl::{ColumnDef, parse_table};
    use smelt_spec::{ColumnType, FlowKind, Pipeline};

    use super::*;

    /// The shape of an SCD2 flow over `(id, seq, v, w)`, tracking `v` only.
    fn shape() -> Shape {
        let yaml = "lake: l\nflows:\n  h:\n    apply:\n      from: b.t\n      into: s.t\n      keys: [id]\n      scd: 2\n      sequence_by: [seq]\n      track_history: [v]\n";
        let pipeline = Pipeline::from_str(yaml, "smelt.yaml".as_ref()).unwrap();
        let FlowKind::Apply(spec) = &pipeline.flows[0].kind else {
            panic!("not an apply flow");
        };
        let mut silver = parse_table(
            "CREATE TABLE s.t (id STRING NOT NULL, seq INT, v INT, w STRING)",
            "s.sql".as_ref(),
        )
        .unwrap();
        for (name, ty) in [
            ("_ingest_timestamp", ColumnType::Timestamp),
            ("_update_timestamp", ColumnType::Timestamp),
            ("__START_AT", ColumnType::Int32),
            ("__END_AT", ColumnType::Int32),
        ] {
            silver.columns.push(ColumnDef {
                name: name.into(),
                ty,
                nullable: true,
            });
        }
        Shape::new(spec, &silver)
    }

    #[test]
    fn only_the_tracked_columns_open_a_version_and_the_bounds_are_no_data() {
        let shape = shape();
        let h = shape.history.as_ref().unwrap();
        let name = |i: usize| shape.silver.columns[i].name.as_str();
        assert_eq!((name(h.start), name(h.end)), ("__START_AT", "__END_AT"));
        assert_eq!(
            h.tracked.iter().map(|&i| name(i)).collect::<Vec<_>>(),
            ["v"]
        );
        let data: Vec<&str> = shape.data.iter().map(|&i| name(i)).collect();
        assert_eq!(data, ["seq", "v", "w"]);
        assert_eq!(update_column(&shape).map(name), Some("_update_timestamp"));
    }

    #[test]
    fn every_window_of_the_events_is_partitioned_by_the_keys_they_are_distributed_by() {
        let shape = shape();
        let spec_yaml = Stored {
            silver: Some("delta.`/l/s/t`"),
            tombstones: Some("delta.`/l/s/t__tombstones`"),
            replayed_through: Some(4),
        };
        let n = Names::new(&shape).unwrap();
        let sql = events(&n, spec_yaml);
        assert!(sql.contains("DISTRIBUTE BY __k0"), "{sql}");
        let windows = sql.matches("OVER (").count();
        assert!(windows >= 10, "{sql}");
        assert_eq!(
            sql.matches("OVER (PARTITION BY __k0").count(),
            windows,
            "{sql}"
        );
        // The killed run's own tombstones are left out: deletes up to the tombstones' version.
        assert!(sql.contains("__o1 <= 4"), "{sql}");
        // One pass over silver.
        assert_eq!(sql.matches("delta.`/l/s/t` t").count(), 1, "{sql}");
    }

    #[test]
    fn a_rebuilt_version_is_written_with_its_bounds_and_the_run_time() {
        let rows = rows_written(&shape(), 42).unwrap();
        for part in [
            "__vstart AS `__START_AT`".to_string(),
            "__next AS `__END_AT`".to_string(),
            "timestamp_micros(42L) AS `_update_timestamp`".to_string(),
            "__k0 AS `id`".to_string(),
            format!("'upsert' AS __op FROM {EVENTS} WHERE __changed AND __vlast"),
            "__seq AS `__START_AT`".to_string(),
            format!("'delete' AS __op FROM {EVENTS} WHERE __changed AND __vs AND NOT __opens"),
        ] {
            assert!(rows.contains(&part), "`{part}` not in {rows}");
        }
    }
}
