//! SCD type 2 history with late and out-of-order changes, through the real Delta adapter
//! (bronze, silver and tombstones as Delta tables in temp dirs), against a reference model
//! written separately from the engine: each key's history rebuilt from all its changes
//! sorted by sequence. Random streams of upserts and deletes for a few dozen keys are
//! delivered in random order over several runs (with replays); history must match the model
//! after every run, and after a rebuild.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use proptest::prelude::*;
use smelt_delta::Lake;
use smelt_delta::source::DeltaSource;
use smelt_delta::table::DeltaLakeTable;
use smelt_engine::flow::FlowRun;
use smelt_engine::flow::apply::{ApplyTables, RunContext, run_apply, tombstone_table};
use smelt_engine::ports::{LakeTable, Silent};
use smelt_engine::rejects::rejects_table;
use smelt_spec::{ApplyFlow, FlowKind, Pipeline, TableName};

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

fn flow(dir: &std::path::Path) -> ApplyFlow {
    flow_tracking(dir, "")
}

/// The flow, with more options (`track_history: [val]`).
fn flow_tracking(dir: &std::path::Path, options: &str) -> ApplyFlow {
    std::fs::write(
        dir.join("s.sql"),
        "CREATE TABLE s.h (id STRING NOT NULL, val STRING, seq BIGINT, PRIMARY KEY (id))",
    )
    .unwrap();
    let yaml = format!(
        "lake: .\nflows:\n  h:\n    apply:\n      from: b.t\n      into: s.h\n      schema: s.sql\n      scd: 2\n      sequence_by: [seq]\n      apply_as_deletes: op = 'D'\n{options}"
    );
    let p = Pipeline::from_str(&yaml, &dir.join("smelt.yaml")).unwrap();
    let FlowKind::Apply(a) = p.flows[0].kind.clone() else {
        panic!("an apply flow")
    };
    a
}

/// Appends `changes` to bronze `b.t` (all text, as bronze is) in one commit.
async fn append(lake: &Lake, changes: &[Change], commit: i64) {
    let schema = Arc::new(Schema::new(
        ["id", "val", "seq", "op"]
            .map(|n| Field::new(n, DataType::Utf8, true))
            .to_vec(),
    ));
    let text = |f: &dyn Fn(&Change) -> Option<String>| -> Arc<dyn Array> {
        Arc::new(StringArray::from(changes.iter().map(f).collect::<Vec<_>>()))
    };
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            text(&|c| Some(key_name(c.key))),
            text(&|c| c.val.map(|v| format!("v{v}"))),
            text(&|c| Some(c.seq.to_string())),
            text(&|c| Some(if c.val.is_some() { "U" } else { "D" }.to_string())),
        ],
    )
    .unwrap();
    support::commit_bronze(lake, schema, batch, commit).await;
}

/// One run of the flow, as `smelt run` does it (every table opened anew).
async fn run(lake: &Lake, flow: &ApplyFlow, replay_after: Option<i64>, full_refresh: bool) {
    run_or_crash(lake, flow, replay_after, full_refresh, false).await;
}

/// [`run`], or with `crash`, one that stops after the tombstones commit, before silver's.
async fn run_or_crash(
    lake: &Lake,
    flow: &ApplyFlow,
    replay_after: Option<i64>,
    full_refresh: bool,
    crash: bool,
) {
    let source = DeltaSource::open(lake, &flow.from).await.unwrap();
    let silver = DeltaLakeTable::open(lake, &flow.into).await.unwrap();
    let mut crashing;
    let mut plain;
    let silver: &mut dyn LakeTable = if crash {
        crashing = support::CrashOnCommit(silver);
        &mut crashing
    } else {
        plain = silver;
        &mut plain
    };
    let mut tombstones = DeltaLakeTable::open(lake, &tombstone_table(&flow.into))
        .await
        .unwrap();
    let mut rejects = DeltaLakeTable::open(lake, &rejects_table(&flow.into))
        .await
        .unwrap();
    let mut ctx = RunContext::new(false, full_refresh);
    ctx.replay_after = replay_after;
    let tables = ApplyTables {
        silver,
        tombstones: &mut tombstones,
        rejects: &mut rejects,
    };
    let result = run_apply(FlowRun::new("h", flow, &ctx, &Silent), &source, tables).await;
    if crash {
        assert!(
            matches!(result, Err(smelt_engine::EngineError::Failpoint(_))),
            "{result:?}"
        );
        return;
    }
    assert_eq!(result.unwrap().rejected, 0);
}

/// The stored history, read through delta-rs' own scan (not smelt's lookups).
async fn history(lake: &Lake) -> History {
    let ctx = lake.session().await.unwrap();
    if !lake
        .exists(&TableName::parse("s.h").unwrap())
        .await
        .unwrap()
    {
        return History::new();
    }
    let batches = ctx
        .sql("SELECT id, val, __START_AT AS s, __END_AT AS e FROM s.h")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut out = History::new();
    for b in batches {
        let text = |i: usize| {
            arrow::compute::cast(b.column(i), &DataType::Utf8)
                .unwrap()
                .as_string::<i32>()
                .clone()
        };
        let (id, val) = (text(0), text(1));
        let start = arrow::compute::cast(b.column(2), &DataType::Int64).unwrap();
        let end = arrow::compute::cast(b.column(3), &DataType::Int64).unwrap();
        let (start, end) = (
            start.as_primitive::<Int64Type>(),
            end.as_primitive::<Int64Type>(),
        );
        for r in 0..b.num_rows() {
            out.entry(id.value(r).to_string()).or_default().push((
                start.value(r),
                (!end.is_null(r)).then(|| end.value(r)),
                val.value(r).to_string(),
            ));
        }
    }
    for versions in out.values_mut() {
        versions.sort();
    }
    out
}

/// The stored tombstones (key, sequence), sorted.
async fn tombstones(lake: &Lake) -> Vec<(String, i64)> {
    if !lake
        .exists(&TableName::parse("s.h__tombstones").unwrap())
        .await
        .unwrap()
    {
        return Vec::new();
    }
    let ctx = lake.session().await.unwrap();
    let batches = ctx
        .sql("SELECT id, seq FROM s.h__tombstones")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut out = Vec::new();
    for b in batches {
        let id = arrow::compute::cast(b.column(0), &DataType::Utf8).unwrap();
        let seq = arrow::compute::cast(b.column(1), &DataType::Int64).unwrap();
        for r in 0..b.num_rows() {
            out.push((
                id.as_string::<i32>().value(r).to_string(),
                seq.as_primitive::<Int64Type>().value(r),
            ));
        }
    }
    out.sort();
    out
}

/// History as the model says, and tombstones that are delivered deletes, each once.
async fn check(lake: &Lake, delivered: &[Change], only_val_tracked: bool, when: &str) {
    assert_eq!(
        history(lake).await,
        model(delivered, only_val_tracked),
        "{when}"
    );
    let tombs = tombstones(lake).await;
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
struct Plan {
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

fn delivery() -> impl Strategy<Value = Plan> {
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
                let mut commits = Vec::new();
                let mut rest = shuffled.as_slice();
                for &cut in &cuts {
                    if rest.is_empty() {
                        break;
                    }
                    let take = cut.min(rest.len());
                    commits.push(rest[..take].to_vec());
                    rest = &rest[take..];
                }
                if !rest.is_empty() {
                    commits.push(rest.to_vec());
                }
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

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(24),
        max_shrink_iters: 50,
        ..ProptestConfig::default()
    })]

    #[test]
    fn history_matches_the_model_after_every_run(plan in delivery()) {
        deliver(&plan, false);
    }

    #[test]
    fn history_matches_the_model_with_an_untracked_sequence(plan in delivery()) {
        deliver(&plan, true);
    }
}

/// Delivers `plan` and checks the history after every run; with `only_val_tracked`,
/// through a flow that tracks `val` alone (in-place updates keep a version's start), where
/// each key's upserts, in sequence order, come in pairs of one value: a version takes at
/// most one in-place update, the one whose sequence smelt keeps (docs/pipeline.md, limits).
fn deliver(plan: &Plan, only_val_tracked: bool) {
    let plan = &if only_val_tracked {
        paired(plan)
    } else {
        plan.clone()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(dir.path().join("lake")).unwrap();
        let flow = flow_tracking(
            dir.path(),
            if only_val_tracked {
                "      track_history: [val]\n"
            } else {
                ""
            },
        );
        let mut delivered = Vec::new();
        let mut ran = false;
        for (i, commit) in plan.commits.iter().enumerate() {
            append(&lake, commit, i as i64).await;
            delivered.extend(commit.iter().cloned());
            let Some(kind) = plan.runs[i] else { continue };
            match kind {
                // A replay (`--since`) needs a run before it.
                Run::Replay(after) if ran => run(&lake, &flow, Some(after), false).await,
                Run::Crash => run_or_crash(&lake, &flow, None, false, true).await,
                _ => {}
            }
            run(&lake, &flow, None, false).await;
            ran = true;
            check(
                &lake,
                &delivered,
                only_val_tracked,
                &format!("after bronze commit {i}"),
            )
            .await;
        }
        run(&lake, &flow, None, false).await;
        check(&lake, &delivered, only_val_tracked, "after the last commit").await;
        run(&lake, &flow, None, true).await;
        check(&lake, &delivered, only_val_tracked, "after --full-refresh").await;
    });
}

/// The two histories of issue 13, delivered as reported.
#[test]
fn deletes_that_arrive_before_the_versions_they_close() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(dir.path().join("lake")).unwrap();
        let flow = flow(dir.path());
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
        for (i, changes) in runs.iter().enumerate() {
            append(&lake, changes, i as i64).await;
            delivered.extend(changes.iter().cloned());
            run(&lake, &flow, None, false).await;
        }
        let h = history(&lake).await;
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
