//! SCD type 2 history with late and out-of-order changes, against a reference model
//! written separately from the engine (each key's history rebuilt from all its changes
//! sorted by sequence); run on every table format and engine ([`Target`]). Random streams of upserts
//! and deletes for a few dozen keys are delivered in random order over several runs (with
//! replays and crashes); history must match the model after every run, and after a
//! rebuild.

use std::collections::BTreeMap;

use proptest::prelude::*;
use smelt_engine::flow::apply::tombstone_table;
use smelt_spec::ApplyFlow;

use crate::backend::{How, Target, block_on, cut_into_commits};
use crate::batches::{column, ints, text_batch, texts};

/// One change of key `key`: an upsert of `val`, or a delete (`None`).
#[derive(Debug, Clone)]
struct Change {
    key: usize,
    seq: i64,
    val: Option<u8>,
}

/// (start, end, value) of every version of a key.
type History = BTreeMap<String, Vec<(i64, Option<i64>, String)>>;

fn key_name(k: usize) -> String {
    format!("k{k:03}")
}

/// The true history of every key from all its changes: sorted by sequence, an upsert ends
/// the open version and opens one (its sequence is tracked, so upserts always differ), a
/// delete ends the open version, a delete with nothing open does nothing.
fn reference(changes: &[Change]) -> History {
    model(changes, false)
}

/// [`reference`]; with `only_val_tracked`, an upsert of the open version's value updates it
/// in place (the sequence column is not tracked).
fn model(changes: &[Change], only_val_tracked: bool) -> History {
    let mut by_key: BTreeMap<usize, Vec<&Change>> = BTreeMap::new();
    for c in changes {
        by_key.entry(c.key).or_default().push(c);
    }
    let mut out = History::new();
    for (k, mut cs) in by_key {
        cs.sort_by_key(|c| c.seq);
        cs.dedup_by_key(|c| c.seq); // a change sent twice
        let mut versions = Vec::new();
        let mut open: Option<(i64, u8)> = None;
        for c in cs {
            if only_val_tracked && c.val.is_some() && open.map(|(_, v)| v) == c.val {
                continue;
            }
            if let Some((start, v)) = open.take() {
                versions.push((start, Some(c.seq), format!("v{v}")));
            }
            if let Some(v) = c.val {
                open = Some((c.seq, v));
            }
        }
        versions.extend(open.map(|(start, v)| (start, None, format!("v{v}"))));
        if !versions.is_empty() {
            out.insert(key_name(k), versions);
        }
    }
    out
}

/// The flow: silver `s.h` keyed on `id`, its history by `seq`, `op = 'D'` deletes; with
/// `options` (`track_history: [val]`).
fn flow<T: Target>(h: &T, options: &str) -> ApplyFlow {
    let ddl = "CREATE TABLE {into} (id STRING NOT NULL, val STRING, seq BIGINT, PRIMARY KEY (id))";
    let body = format!(
        "      scd: 2\n      sequence_by: [seq]\n      apply_as_deletes: op = 'D'\n{options}"
    );
    h.apply_flow("h", "s.h", ddl, &body)
}

/// Appends `changes` to bronze (all text, as bronze is) in one commit.
async fn append<T: Target>(h: &mut T, changes: &[Change]) {
    let text = |f: &dyn Fn(&Change) -> Option<String>| changes.iter().map(f).collect::<Vec<_>>();
    h.append(text_batch(vec![
        ("id", text(&|c| Some(key_name(c.key)))),
        ("val", text(&|c| c.val.map(|v| format!("v{v}")))),
        ("seq", text(&|c| Some(c.seq.to_string()))),
        (
            "op",
            text(&|c| Some(if c.val.is_some() { "U" } else { "D" }.to_string())),
        ),
    ]))
    .await;
}

/// One run of the flow (`crash`: one that dies at silver's commit, after the tombstones
/// commit); no key is ever rejected.
async fn run<T: Target>(h: &T, flow: &ApplyFlow, how: How) {
    if let Some(report) = h.run("h", flow, how).await {
        assert_eq!(report.rejected, 0);
    }
}

/// The stored history, read by the format's own reader (not smelt's lookups).
async fn history<T: Target>(h: &T, flow: &ApplyFlow) -> History {
    let Some(b) = h.scan(&flow.into).await else {
        return History::new();
    };
    let (id, val) = (texts(column(&b, "id")), texts(column(&b, "val")));
    let (start, end) = (ints(column(&b, "__START_AT")), ints(column(&b, "__END_AT")));
    let mut out = History::new();
    for (((id, val), start), end) in id.into_iter().zip(val).zip(start).zip(end) {
        out.entry(id.expect("a key")).or_default().push((
            start.expect("a start"),
            end,
            val.expect("a value"),
        ));
    }
    for versions in out.values_mut() {
        versions.sort();
    }
    out
}

/// The stored tombstones (key, sequence), sorted.
async fn tombstones<T: Target>(h: &T, flow: &ApplyFlow) -> Vec<(String, i64)> {
    let Some(b) = h.scan(&tombstone_table(&flow.into)).await else {
        return Vec::new();
    };
    let mut out: Vec<(String, i64)> = texts(column(&b, "id"))
        .into_iter()
        .zip(ints(column(&b, "seq")))
        .map(|(id, seq)| (id.expect("a key"), seq.expect("a sequence")))
        .collect();
    out.sort();
    out
}

/// History as the model says, and tombstones that are delivered deletes, each once.
async fn check<T: Target>(
    h: &T,
    flow: &ApplyFlow,
    delivered: &[Change],
    only_val_tracked: bool,
    when: &str,
) {
    assert_eq!(
        history(h, flow).await,
        model(delivered, only_val_tracked),
        "{when}"
    );
    let tombs = tombstones(h, flow).await;
    let mut unique = tombs.clone();
    unique.dedup();
    assert_eq!(unique, tombs, "{when}: a tombstone twice");
    for (id, seq) in &tombs {
        assert!(
            delivered
                .iter()
                .any(|c| &key_name(c.key) == id && c.seq == *seq && c.val.is_none()),
            "{when}: tombstone ({id}, {seq}) is no delivered delete"
        );
    }
}

/// Changes of `keys` keys: 1–5 per key with distinct sequences; the first change of every
/// fourth key is a delete, every fourth key (offset 1) has a delete between two upserts.
fn changes(keys: usize) -> impl Strategy<Value = Vec<Change>> {
    let per_key: Vec<_> = (0..keys)
        .map(|k| {
            (
                proptest::sample::subsequence((0..300i64).collect::<Vec<_>>(), 1..=5),
                proptest::collection::vec(
                    prop_oneof![3 => (0u8..4).prop_map(Some), 2 => Just(None)],
                    5,
                ),
            )
                .prop_map(move |(mut seqs, vals)| {
                    seqs.sort();
                    let mut out: Vec<Change> = seqs
                        .iter()
                        .zip(vals)
                        .map(|(&seq, val)| Change { key: k, seq, val })
                        .collect();
                    if k % 4 == 0 {
                        out[0].val = None;
                    }
                    if k % 4 == 1 && out.len() >= 3 {
                        out[0].val = Some(1);
                        out[1].val = None;
                        out[2].val = Some(2);
                    }
                    out
                })
        })
        .collect();
    per_key.prop_map(|ks| ks.into_iter().flatten().collect())
}

/// A delivery: the changes shuffled (some sent twice), cut into bronze commits, runs after
/// some commits, and replays.
#[derive(Debug, Clone)]
pub struct Plan {
    commits: Vec<Vec<Change>>,
    /// After commit `i`: a run (or none), then a plain run.
    runs: Vec<Option<Run>>,
}

#[derive(Debug, Clone, Copy)]
enum Run {
    Plain,
    /// Replays the bronze versions after this one (`--since`) first.
    Replay(i64),
    /// Crashes once before silver's commit first.
    Crash,
}

pub fn delivery() -> impl Strategy<Value = Plan> {
    changes(24).prop_flat_map(|all| {
        (
            Just(all).prop_shuffle(),
            proptest::collection::vec(1usize..=12, 1..=10),
            proptest::collection::vec(0u8..10, 12),
        )
            .prop_map(|(mut shuffled, cuts, run_kinds)| {
                // A few changes sent again later (re-sent rows).
                let again: Vec<Change> = shuffled.iter().step_by(7).cloned().collect();
                shuffled.extend(again);
                let bundles: Vec<Vec<Change>> = shuffled.into_iter().map(|c| vec![c]).collect();
                let commits = cut_into_commits(&bundles, &cuts);
                let runs = (0..commits.len())
                    .map(|i| match run_kinds.get(i).copied().unwrap_or(0) {
                        // Not every commit is followed by a run.
                        0..=2 if i + 1 < commits.len() => None,
                        // A replay of the bronze versions after an earlier one.
                        3 if i > 0 => Some(Run::Replay((i as i64 - 1) / 2)),
                        // A run that dies between the tombstones and silver commits.
                        4 => Some(Run::Crash),
                        _ => Some(Run::Plain),
                    })
                    .collect();
                Plan { commits, runs }
            })
    })
}

/// `plan` with each key's upserts valued 0, 0, 1, 1, 2, … in sequence order.
fn paired(plan: &Plan) -> Plan {
    let mut upserts: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    for c in plan.commits.iter().flatten().filter(|c| c.val.is_some()) {
        upserts.entry(c.key).or_default().push(c.seq);
    }
    for seqs in upserts.values_mut() {
        seqs.sort();
        seqs.dedup();
    }
    let mut out = plan.clone();
    for c in out.commits.iter_mut().flatten().filter(|c| c.val.is_some()) {
        let at = upserts[&c.key].binary_search(&c.seq).unwrap();
        c.val = Some((at / 2) as u8);
    }
    out
}

/// Delivers `plan` and checks the history after every run; with `only_val_tracked`,
/// through a flow that tracks `val` alone (in-place updates keep a version's start), where
/// each key's upserts, in sequence order, come in pairs of one value: a version takes at
/// most one in-place update, the one whose sequence smelt keeps (docs/pipeline.md, limits).
pub fn deliver<T: Target>(plan: &Plan, only_val_tracked: bool) {
    let plan = &if only_val_tracked {
        paired(plan)
    } else {
        plan.clone()
    };
    block_on(async {
        let mut h = T::start().await;
        let options = if only_val_tracked {
            "      track_history: [val]\n"
        } else {
            ""
        };
        let flow = flow(&h, options);
        let mut delivered = Vec::new();
        let mut ran = false;
        for (i, commit) in plan.commits.iter().enumerate() {
            append(&mut h, commit).await;
            delivered.extend(commit.iter().cloned());
            let Some(kind) = plan.runs[i] else { continue };
            match kind {
                // A replay (`--since`) needs a run before it.
                Run::Replay(after) if ran && T::REPLAYS => {
                    let how = How {
                        replay_after: Some(after as usize),
                        ..How::default()
                    };
                    run(&h, &flow, how).await
                }
                Run::Crash => {
                    let how = How {
                        crash: true,
                        ..How::default()
                    };
                    run(&h, &flow, how).await
                }
                _ => {}
            }
            run(&h, &flow, How::default()).await;
            ran = true;
            let when = format!("after bronze commit {i}");
            check(&h, &flow, &delivered, only_val_tracked, &when).await;
        }
        run(&h, &flow, How::default()).await;
        check(
            &h,
            &flow,
            &delivered,
            only_val_tracked,
            "after the last commit",
        )
        .await;
        let how = How {
            full_refresh: true,
            ..How::default()
        };
        run(&h, &flow, how).await;
        check(
            &h,
            &flow,
            &delivered,
            only_val_tracked,
            "after --full-refresh",
        )
        .await;
    });
}

/// The two histories of issue 13, delivered as reported.
pub fn deletes_that_arrive_before_the_versions_they_close<T: Target>() {
    block_on(async {
        let mut h = T::start().await;
        let flow = flow(&h, "");
        let ch = |key, seq, val| Change { key, seq, val };
        // k024 (key 24): a delete at 1001 first; then a delete at 1081, an upsert at 1083
        // and a late upsert at 756.
        // k017 (key 17): history [1062, 1093), [1134, …); a late delete at 993, then a late
        // upsert at 890.
        let runs = [
            vec![
                ch(24, 1001, None),
                ch(17, 1062, Some(1)),
                ch(17, 1093, None),
                ch(17, 1134, Some(2)),
            ],
            vec![
                ch(24, 1081, None),
                ch(24, 1083, Some(3)),
                ch(24, 756, Some(4)),
                ch(17, 993, None),
            ],
            vec![ch(17, 890, Some(5))],
        ];
        let mut delivered = Vec::new();
        for changes in &runs {
            append(&mut h, changes).await;
            delivered.extend(changes.iter().cloned());
            run(&h, &flow, How::default()).await;
        }
        let h = history(&h, &flow).await;
        assert_eq!(
            h["k024"],
            vec![
                (756, Some(1001), "v4".to_string()),
                (1083, None, "v3".to_string())
            ]
        );
        assert_eq!(
            h["k017"],
            vec![
                (890, Some(993), "v5".to_string()),
                (1062, Some(1093), "v1".to_string()),
                (1134, None, "v2".to_string()),
            ]
        );
        assert_eq!(h, reference(&delivered));
    });
}
