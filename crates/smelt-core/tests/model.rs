//! Property tests: dedupe + guard + SCD1 plan against a tiny reference model.
//!
//! Streams have composite keys with NULLs, duplicate keys, equal and out-of-order
//! sequences, NULL sequences, deletes (with tombstones), and are applied over several runs.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, StringArray, UInt32Array};
use arrow::compute::take;
use proptest::prelude::*;
use smelt_core::dedupe::latest_per_key;
use smelt_core::scd1::{ApplyCounts, Scd1Input, plan_scd1};

type Key = (Option<String>, Option<i64>);

#[derive(Debug, Clone)]
struct Change {
    key: Key,
    seq: Option<i64>,
    value: Option<String>,
    delete: bool,
}

/// Silver rows and the tombstones (sequence of the delete) of deleted keys.
#[derive(Debug, Clone, Default, PartialEq)]
struct State {
    silver: HashMap<Key, Stored>,
    tombstones: HashMap<Key, Option<i64>>,
}

#[derive(Debug, Clone, PartialEq)]
struct Stored {
    seq: Option<i64>,
    value: Option<String>,
}

/// The obviously-correct model: per run, the last of the changes with the greatest
/// sequence wins per key (NULL sequence lowest). An upsert is applied if its sequence is
/// strictly greater than the stored row's and the tombstone's (where they exist). A delete
/// newer than the stored row (if any) removes it, and records its sequence as the key's
/// tombstone when greater than the tombstone there.
fn model_run(state: &mut State, run: &[Change]) -> ApplyCounts {
    let mut winners: Vec<(Key, usize)> = Vec::new();
    for (i, c) in run.iter().enumerate() {
        match winners.iter_mut().find(|(k, _)| *k == c.key) {
            None => winners.push((c.key.clone(), i)),
            Some((_, best)) => {
                if c.seq >= run[*best].seq {
                    *best = i;
                }
            }
        }
    }
    let mut counts = ApplyCounts::default();
    let State { silver, tombstones } = state;
    for (key, i) in winners {
        let c = &run[i];
        let tomb = tombstones.get(&key).copied();
        if c.delete {
            let mut acted = false;
            let past_stored = silver.get(&key).is_none_or(|old| c.seq > old.seq);
            if past_stored && silver.remove(&key).is_some() {
                counts.deleted += 1;
                acted = true;
            }
            if past_stored && tomb.is_none_or(|t| c.seq > t) {
                tombstones.insert(key.clone(), c.seq);
                acted = true;
            }
            if !acted {
                counts.stale += 1;
            }
            continue;
        }
        if tomb.is_some_and(|t| c.seq <= t) {
            counts.stale += 1;
            continue;
        }
        match silver.get(&key) {
            None => {
                counts.inserted += 1;
                silver.insert(
                    key,
                    Stored {
                        seq: c.seq,
                        value: c.value.clone(),
                    },
                );
            }
            Some(old) if c.seq > old.seq => {
                if old.value == c.value {
                    counts.unchanged += 1;
                } else {
                    counts.updated += 1;
                }
                silver.insert(
                    key,
                    Stored {
                        seq: c.seq,
                        value: c.value.clone(),
                    },
                );
            }
            Some(_) => counts.stale += 1,
        }
    }
    counts
}

/// The engine's path: Arrow batches through the core functions.
fn engine_run(state: &mut State, run: &[Change]) -> ApplyCounts {
    let State { silver, tombstones } = state;
    let k1: ArrayRef = Arc::new(StringArray::from_iter(run.iter().map(|c| c.key.0.clone())));
    let k2: ArrayRef = Arc::new(Int64Array::from_iter(run.iter().map(|c| c.key.1)));
    let seq: ArrayRef = Arc::new(Int64Array::from_iter(run.iter().map(|c| c.seq)));
    let val: ArrayRef = Arc::new(StringArray::from_iter(run.iter().map(|c| c.value.clone())));
    let winners: UInt32Array = latest_per_key(&[k1, k2], std::slice::from_ref(&seq)).unwrap();
    let pick = |a: &ArrayRef| take(a.as_ref(), &winners, None).unwrap();
    let (new_seq, new_val) = (pick(&seq), pick(&val));
    let wins: Vec<&Change> = winners.values().iter().map(|&i| &run[i as usize]).collect();
    let stored: Vec<Option<&Stored>> = wins.iter().map(|c| silver.get(&c.key)).collect();
    let matched = BooleanArray::from_iter(stored.iter().map(|s| Some(s.is_some())));
    let old_seq: ArrayRef = Arc::new(Int64Array::from_iter(
        stored.iter().map(|s| s.and_then(|s| s.seq)),
    ));
    let old_val: ArrayRef = Arc::new(StringArray::from_iter(
        stored.iter().map(|s| s.and_then(|s| s.value.clone())),
    ));
    let delete = BooleanArray::from_iter(wins.iter().map(|c| Some(c.delete)));
    let tombs: Vec<Option<Option<i64>>> = wins
        .iter()
        .map(|c| tombstones.get(&c.key).copied())
        .collect();
    let tomb_exists = BooleanArray::from_iter(tombs.iter().map(|t| Some(t.is_some())));
    let tomb_seq: ArrayRef = Arc::new(Int64Array::from_iter(tombs.iter().map(|t| t.flatten())));
    let plan = plan_scd1(&Scd1Input {
        matched: &matched,
        new_sequence: &[new_seq],
        stored_sequence: &[old_seq],
        new_data: &[new_val],
        stored_data: Some(&[old_val]),
        delete: Some(&delete),
        tombstone: Some((&tomb_exists, &[tomb_seq])),
    })
    .unwrap();
    for (row, c) in wins.iter().enumerate() {
        if plan.remove.value(row) {
            silver.remove(&c.key);
        }
        if plan.tombstone.value(row) {
            tombstones.insert(c.key.clone(), c.seq);
        }
        if plan.write.value(row) {
            silver.insert(
                c.key.clone(),
                Stored {
                    seq: c.seq,
                    value: c.value.clone(),
                },
            );
        }
    }
    assert_eq!(plan.write.len(), wins.len());
    assert!(
        plan.changed
            .iter()
            .zip(plan.write.iter())
            .all(|(c, w)| !c.unwrap() || w.unwrap())
    );
    plan.counts
}

fn change() -> impl Strategy<Value = Change> {
    (
        proptest::option::weighted(0.9, prop::sample::select(vec!["a", "b", "c"])),
        proptest::option::weighted(0.8, 0i64..3),
        proptest::option::weighted(0.9, 0i64..6),
        proptest::option::weighted(0.8, prop::sample::select(vec!["x", "y"])),
        proptest::bool::weighted(0.25),
    )
        .prop_map(|(k1, k2, seq, v, delete)| Change {
            key: (k1.map(str::to_string), k2),
            seq,
            value: v.map(str::to_string),
            delete,
        })
}

fn runs() -> impl Strategy<Value = Vec<Vec<Change>>> {
    prop::collection::vec(prop::collection::vec(change(), 0..30), 1..5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn engine_equals_model_over_several_runs(runs in runs()) {
        let (mut model, mut engine) = (State::default(), State::default());
        for run in &runs {
            let want = model_run(&mut model, run);
            let got = engine_run(&mut engine, run);
            prop_assert_eq!(got, want);
            prop_assert_eq!(&engine, &model);
        }
    }

    #[test]
    fn replaying_any_run_is_a_no_op(runs in runs(), replay in 0usize..5) {
        let mut state = State::default();
        for run in &runs {
            engine_run(&mut state, run);
        }
        let before = state.clone();
        let run = &runs[replay % runs.len()];
        let counts = engine_run(&mut state, run);
        prop_assert_eq!(counts.inserted + counts.updated + counts.unchanged + counts.deleted, 0);
        prop_assert_eq!(state, before);
    }

    #[test]
    fn distinct_sequences_give_the_same_silver_however_runs_are_split(
        changes in prop::collection::vec(change(), 0..40),
        cut in prop::collection::vec(0usize..40, 0..4),
    ) {
        // Make every (key, sequence) unique and non-NULL so "latest" is well defined.
        let changes: Vec<Change> = changes
            .into_iter()
            .enumerate()
            .map(|(i, mut c)| { c.seq = Some(c.seq.unwrap_or(0) * 100 + i as i64); c })
            .collect();
        let mut whole = State::default();
        engine_run(&mut whole, &changes);
        let mut cuts: Vec<usize> = cut.into_iter().map(|c| c.min(changes.len())).collect();
        cuts.sort_unstable();
        let mut split = State::default();
        let mut start = 0;
        for c in cuts.into_iter().chain([changes.len()]) {
            engine_run(&mut split, &changes[start..c]);
            start = c;
        }
        // Silver is the latest change of every key (absent when it is a delete); the
        // tombstones may differ (a split run sees deletes a whole run collapses).
        prop_assert_eq!(split.silver, whole.silver);
    }
}

#[test]
fn null_key_parts_are_compared_null_safely() {
    let run = vec![
        Change {
            key: (None, Some(1)),
            seq: Some(1),
            value: Some("a".into()),
            delete: false,
        },
        Change {
            key: (None, Some(1)),
            seq: Some(2),
            value: Some("b".into()),
            delete: false,
        },
        Change {
            key: (None, None),
            seq: Some(1),
            value: Some("c".into()),
            delete: false,
        },
    ];
    let mut state = State::default();
    let counts = engine_run(&mut state, &run);
    assert_eq!(counts.inserted, 2);
    let silver = &state.silver;
    assert_eq!(silver[&(None, Some(1))].value.as_deref(), Some("b"));
    assert!(silver.values().all(|s| s.value.as_deref() != Some("a")));
}
