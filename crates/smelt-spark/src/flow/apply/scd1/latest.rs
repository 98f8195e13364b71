//! From change rows to what each key's winning change does: the typed changes
//! (`smelt_changes`: kind, cast values, cast failures), the latest change per key with the
//! embedded engine's tie-breaks, the guard against silver and tombstones, and the row each
//! key gets (`smelt_stage`). Both are cached on the cluster: every later statement of the run
//! reads them, not bronze.

use smelt_rules::order::latest_first;
use smelt_rules::scd1::{self, Action, Fact, Outcome};

use smelt_spec::{ApplyFlow, UpdateTimestampOn};

use crate::flow::apply::shape::{Shape, key_texts, newer};
use crate::sql::ident;
use crate::sql::{order_by, spark_type};
use crate::views::{CHANGES, STAGE};

/// What the stage needs to know about the tables a run writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Targets<'a> {
    /// Silver, when it exists and the run is guarded by it (not a rebuild).
    pub(crate) silver: Option<&'a str>,
    /// The tombstones, likewise.
    pub(crate) tombstones: Option<&'a str>,
    /// The run's time (µs): `_update_timestamp` of changed rows.
    pub(crate) run_us: i64,
    /// The tombstones carry a later watermark than silver (a run killed between them), the
    /// bronze version they were written through: a tombstone equal to a delete of a version
    /// up to it is that run's, not a guard against it (as embedded).
    pub(crate) replayed_through: Option<i64>,
}

/// `smelt_stage`: one row per key that has a change: silver's columns as the key would be
/// written, `__action` (`insert`, `update`, `unchanged`, `delete`, `tombstone`, `stale`,
/// `rejected`), `__tomb` (a tombstone is written), the delete's sequence for its tombstone (`__tomb<j>`) and
/// `__conflict` (the winner ties with a change whose data differs).
pub(crate) fn cache(spec: &ApplyFlow, shape: &Shape, targets: Targets<'_>) -> String {
    let mut sql = latest_ctes(shape);
    sql.push_str(&stored_cte(shape, targets));
    sql.push_str(&guard_cte(spec, shape, targets));
    let from = match &spec.filter {
        Some(pred) => {
            sql.push_str(&filter_ctes(shape, pred));
            "h"
        }
        None => "f",
    };
    sql.push_str(&action_cte(shape, from));
    sql.push_str(&output(spec, shape, targets.run_us));
    sql
}

/// `c` … `w`: the changes kept, ranked per key in the embedded engine's order, with the
/// winner's sequence and data to find conflicts; `w`: the winners.
fn latest_ctes(shape: &Shape) -> String {
    let keys: Vec<String> = shape.keys.iter().map(|i| format!("__v{i}")).collect();
    let seq_read: Vec<String> = shape.seq.iter().map(|s| s.read.clone()).collect();
    let order = order_by(&latest_first(&seq_read));
    let seq_struct = named_struct(&seq_read);
    // What a conflict compares: the cast columns but keys and sequence, and the kind.
    let seq_cols: Vec<&str> = seq_read.iter().map(String::as_str).collect();
    let data: Vec<String> = shape
        .data
        .iter()
        .map(|i| format!("__v{i}"))
        .filter(|c| !seq_cols.contains(&c.as_str()))
        .map(|c| format!("IF(__kind = 'delete', NULL, {c})"))
        .chain(["__kind = 'delete'".to_string()])
        .collect();
    let data_struct = named_struct(&data);
    let window = format!("PARTITION BY {} ORDER BY {}", keys.join(", "), order);
    let sql = format!(
        "CACHE TABLE {STAGE} AS\n\
         WITH c AS (SELECT * FROM {CHANGES} WHERE __kind IN ('upsert', 'delete') AND NOT __bad),\n\
         r AS (SELECT c.*, row_number() OVER w AS __rn, first_value({seq_struct}) OVER w AS __wseq,\n\
         \x20      first_value({data_struct}) OVER w AS __wdata FROM c WINDOW w AS ({window})),\n\
         k AS (SELECT r.*, max(CAST(__rn > 1 AND {seq_struct} <=> __wseq AND NOT ({data_struct} <=> __wdata) AS INT))\n\
         \x20      OVER (PARTITION BY {}) AS __conflict FROM r),\n\
         w AS (SELECT * FROM k WHERE __rn = 1),\n",
        keys.join(", ")
    );
    sql
}

/// `j`: the winners with silver's stored row (`__s<i>`) and the tombstone's sequence (`__tq<j>`).
fn stored_cte(shape: &Shape, targets: Targets<'_>) -> String {
    let mut sql = String::new();
    let tomb_seq: Vec<_> = shape.seq.iter().collect();
    let n = shape.silver.columns.len();
    let mut joined = vec!["w.*".to_string()];
    let mut from = "w".to_string();
    let on = |alias: &str| -> String {
        shape
            .keys
            .iter()
            .map(|&i| format!("w.__v{i} <=> {alias}.{}", shape.name(i)))
            .collect::<Vec<_>>()
            .join(" AND ")
    };
    match targets.silver {
        Some(table) => {
            joined.push("s.__present AS __m".into());
            joined.extend((0..n).map(|i| match shape.absent.contains(&i) {
                true => format!(
                    "CAST(NULL AS {}) AS __s{i}",
                    spark_type(shape.silver.columns[i].ty)
                ),
                false => format!("s.{} AS __s{i}", shape.name(i)),
            }));
            from.push_str(&format!(
                " LEFT JOIN (SELECT *, true AS __present FROM {table}) s ON {}",
                on("s")
            ));
        }
        None => {
            joined.push("CAST(NULL AS BOOLEAN) AS __m".into());
            joined.extend((0..n).map(|i| {
                format!(
                    "CAST(NULL AS {}) AS __s{i}",
                    spark_type(shape.silver.columns[i].ty)
                )
            }));
        }
    }
    match targets.tombstones {
        Some(table) => {
            joined.push("t.__present AS __t".into());
            for (j, s) in tomb_seq.iter().enumerate() {
                joined.push(format!("t.{} AS __tq{j}", ident(&s.stored)));
            }
            from.push_str(&format!(
                " LEFT JOIN (SELECT *, true AS __present FROM {table}) t ON {}",
                on("t")
            ));
        }
        None => {
            joined.push("CAST(NULL AS BOOLEAN) AS __t".into());
            for (j, s) in tomb_seq.iter().enumerate() {
                joined.push(format!("CAST(NULL AS {}) AS __tq{j}", spark_type(s.ty)));
            }
        }
    }
    sql.push_str(&format!(
        "j AS (SELECT {} FROM {from}),\n",
        joined.join(", ")
    ));

    sql
}

/// `f`: the guard against silver and the tombstones, and the merged values (`__o<i>`).
fn guard_cte(spec: &ApplyFlow, shape: &Shape, targets: Targets<'_>) -> String {
    let mut sql = String::new();
    let seq_read: Vec<String> = shape.seq.iter().map(|s| s.read.clone()).collect();
    let tomb_seq: Vec<_> = shape.seq.iter().collect();
    let stored_seq: Vec<String> = shape
        .seq
        .iter()
        .map(|s| {
            let i = shape
                .silver
                .columns
                .iter()
                .position(|c| c.name == s.stored)
                .unwrap_or(0);
            format!("__s{i}")
        })
        .collect();
    let tomb_stored: Vec<String> = (0..tomb_seq.len()).map(|j| format!("__tq{j}")).collect();
    let mut flags = vec![
        "coalesce(__m, false) AS __m2".to_string(),
        format!("{} AS __n", newer(&seq_read, &stored_seq)),
        format!(
            "(NOT coalesce(__t, false) OR {}) AS __pt0",
            newer(&seq_read, &tomb_stored),
        ),
        // The tombstone equals the change: with `replayed`, the killed run's own, which does
        // not guard against the delete that wrote it (see `action_cte`).
        match targets.replayed_through {
            Some(through) => format!(
                "({} <=> {} AND _commit_version <= {through}) AS __rp",
                named_struct(&seq_read),
                named_struct(&tomb_stored)
            ),
            None => "false AS __rp".to_string(),
        },
    ];
    for &i in &shape.data {
        let name = &shape.silver.columns[i].name;
        let new = if spec.ignore_null_updates {
            format!("coalesce(__v{i}, __s{i})")
        } else {
            format!("__v{i}")
        };
        let merged = if shape.updates.updates(name) {
            new
        } else {
            format!("__s{i}")
        };
        flags.push(format!(
            "CASE WHEN coalesce(__m, false) THEN {merged} ELSE __v{i} END AS __o{i}"
        ));
    }
    sql.push_str(&format!(
        "f AS (SELECT j.*, {} FROM j),\n",
        flags.join(", ")
    ));

    sql
}

/// `g`, `h`: `where` over each key's latest state — silver's columns as the winner would
/// leave them (after partial updates; the ingest audit column is the change's commit time;
/// not the update audit column) — and `__wf`: an upsert whose state fails it (false or NULL)
/// and is applied as a delete, as embedded.
fn filter_ctes(shape: &Shape, pred: &str) -> String {
    let state: Vec<String> = shape
        .silver
        .columns
        .iter()
        .enumerate()
        .filter_map(|(i, _)| Some(format!("{} AS {}", state_value(shape, i)?, shape.name(i))))
        .collect();
    format!(
        "g AS (SELECT {}, struct(f.*) AS __row FROM f),
         h AS (SELECT __row.*, (__row.__kind = 'upsert' AND NOT coalesce(({pred}), false)) AS __wf FROM g),
",
        state.join(", ")
    )
}

/// `p`: whether the key's tombstone lets the winner pass (`__pt`: none, older, or the killed
/// run's own for a delete — a winner failing `where` included, as embedded); `a`: what each
/// key's winner does (`__action`), from `from` (`f`, or `h` with `where`: a winner failing
/// it is a delete).
fn action_cte(shape: &Shape, from: &str) -> String {
    let mut sql = String::new();
    let differs: Vec<String> = shape
        .data
        .iter()
        .map(|i| format!("NOT (__o{i} <=> __s{i})"))
        .chain(["false".to_string()])
        .collect();
    let delete = match from {
        "h" => "(__kind = 'delete' OR __wf)",
        _ => "__kind = 'delete'",
    };
    let differs = format!("({})", differs.join(" OR "));
    let fact = |f: Fact| -> String {
        let sql = match f {
            Fact::Delete => delete,
            Fact::Stored => "__m2",
            Fact::Newer => "__n",
            Fact::PastTombstone => "__pt",
            Fact::Differs => &differs,
        };
        format!("coalesce({sql}, false)")
    };
    let null_key = shape.null_key();
    let action = decision(&null_key, "'rejected'", &fact, |o| {
        format!("'{}'", o.action.name())
    });
    let tomb = decision(&null_key, "false", &fact, |o| o.tombstone.to_string());
    sql.push_str(&format!(
        "p AS (SELECT {from}.*, (__pt0 OR ({delete} AND __rp)) AS __pt FROM {from}),\n\
         a AS (SELECT p.*, {action} AS __action, {tomb} AS __tomb FROM p)\n"
    ));

    sql
}

/// Silver column `i` as the winner leaves it, but the update audit column (`None`): a key
/// as read, a data column merged, the ingest audit column the change's commit time.
fn state_value(shape: &Shape, i: usize) -> Option<String> {
    if shape.keys.contains(&i) {
        Some(format!("__v{i}"))
    } else if shape.data.contains(&i) {
        Some(format!("__o{i}"))
    } else if shape.ingest.as_deref() == Some(shape.silver.columns[i].name.as_str()) {
        Some("_commit_timestamp".to_string())
    } else {
        None
    }
}

/// The row each key gets, its action, its tombstone and whether it conflicts.
fn output(spec: &ApplyFlow, shape: &Shape, run_us: i64) -> String {
    let mut sql = String::new();
    let tomb_seq: Vec<_> = shape.seq.iter().collect();
    let run = format!("timestamp_micros({run_us}L)");
    let mut out = Vec::new();
    for (i, c) in shape.silver.columns.iter().enumerate() {
        let name = ident(&c.name);
        let value = if let Some(value) = state_value(shape, i) {
            value
        } else if spec.audit.update_timestamp_on == UpdateTimestampOn::Apply {
            run.clone()
        } else {
            format!(
                "CASE WHEN __action IN ({}) THEN {run} ELSE __s{i} END",
                named(Action::changes_data)
            )
        };
        out.push(format!("{value} AS {name}"));
    }
    out.push("__action".into());
    out.push("__tomb".into());
    for (j, s) in tomb_seq.iter().enumerate() {
        out.push(format!("{} AS __tomb{j}", s.read));
    }
    out.push("__conflict".into());
    out.push(match spec.filter {
        Some(_) => "__wf AS __filtered".into(),
        None => "false AS __filtered".into(),
    });
    sql.push_str(&format!("SELECT {} FROM a", out.join(", ")));
    sql
}

/// The decision table of [`smelt_rules::scd1::ACTIONS`] as one `CASE`: `rejected` (SQL) for
/// a change whose key is NULL (`null_key`), else `then` of the first rule whose facts hold,
/// else `then` of [`scd1::STALE`].
fn decision(
    null_key: &str,
    rejected: &str,
    fact: &dyn Fn(Fact) -> String,
    then: impl Fn(Outcome) -> String,
) -> String {
    let rules: Vec<String> = scd1::ACTIONS
        .iter()
        .map(|rule| {
            let when: Vec<String> = rule
                .when
                .iter()
                .map(|&(f, holds)| match holds {
                    true => fact(f),
                    false => format!("NOT {}", fact(f)),
                })
                .collect();
            format!("WHEN {} THEN {}", when.join(" AND "), then(rule.then))
        })
        .collect();
    format!(
        "CASE WHEN {null_key} THEN {rejected}\n  {}\n  ELSE {} END",
        rules.join("\n  "),
        then(scd1::STALE)
    )
}

fn named_struct(values: &[String]) -> String {
    let fields: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("'c{i}', {v}"))
        .collect();
    format!("named_struct({})", fields.join(", "))
}

/// The first key (by key) whose latest changes conflict, for `on_sequence_conflict: fail`
/// (collected): its keys and the winner's sequence (`__tomb<j>`) as text.
pub(crate) fn first_conflict(shape: &Shape) -> String {
    let seq: Vec<String> = (0..shape.seq.len())
        .map(|j| format!("CAST(__tomb{j} AS STRING) AS __tomb{j}"))
        .collect();
    let order: Vec<String> = shape.keys.iter().map(|&k| shape.name(k)).collect();
    format!(
        "SELECT {}, {} FROM {STAGE} WHERE __conflict = 1 ORDER BY {} LIMIT 1",
        key_texts(shape).join(", "),
        seq.join(", "),
        order.join(", ")
    )
}

/// The counts of the stage (collected): the winners, each action's (named as the report
/// names them), the tombstones, the rejected, the conflicts and the deletes `where` made.
pub(crate) fn counts() -> String {
    let actions: Vec<String> = [
        (Action::Insert, "inserted"),
        (Action::Update, "updated"),
        (Action::Unchanged, "unchanged"),
        (Action::Delete, "deleted"),
        (Action::Stale, "stale"),
    ]
    .iter()
    .map(|(a, name)| format!("count_if(__action = '{}') AS {name}", a.name()))
    .collect();
    format!(
        "SELECT count(*) AS winners, {}, count_if(__tomb) AS tombstones, \
         count_if(__action = 'rejected') AS rejected, count_if(__conflict = 1) AS conflicts, \
         count_if(__filtered AND (__action = '{}' OR __tomb)) AS filtered FROM {STAGE}",
        actions.join(", "),
        Action::Delete.name()
    )
}

/// The actions `which` picks, as a Spark SQL list of their names (`'insert', 'update'`).
pub(crate) fn named(which: impl Fn(Action) -> bool) -> String {
    let names: Vec<String> = Action::ALL
        .iter()
        .filter(|&&a| which(a))
        .map(|a| format!("'{}'", a.name()))
        .collect();
    names.join(", ")
}
