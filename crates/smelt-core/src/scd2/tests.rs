//! Unit tests of SCD type 2 planning.
use std::sync::Arc;

use arrow::array::{Int64Array, StringArray};

use super::*;

fn ints(v: Vec<Option<i64>>) -> ArrayRef {
    Arc::new(Int64Array::from(v))
}
fn texts(v: Vec<&str>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}

/// (start, end, data) of each version, data resolved to its text.
fn show(
    plan: &Scd2Plan,
    input: &Scd2Input<'_>,
    stored_data: &[&str],
    change_data: &[&str],
) -> Vec<(i64, Option<i64>, String)> {
    let seq = |f: SeqFrom| {
        let (a, i) = match f {
            SeqFrom::StoredStart(i) => (input.stored_start, i),
            SeqFrom::StoredEnd(i) => (input.stored_end, i),
            SeqFrom::Change(i) => (input.change_seq, i),
            SeqFrom::Tombstone(i) => (input.tomb_seq, i),
            SeqFrom::StoredLast(i) => (input.stored_last, i),
        };
        a.as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(i as usize)
    };
    plan.versions
        .iter()
        .map(|v| {
            let data = match v.data {
                From::Stored(i) => stored_data[i as usize],
                From::Change(i) => change_data[i as usize],
            };
            (seq(v.start), v.end.map(seq), data.to_string())
        })
        .collect()
}

#[test]
fn a_late_change_splits_the_version_it_falls_in_and_replays_are_dropped() {
    // Stored: A from 10 to 20, B from 20 (current).
    let stored_start = ints(vec![Some(10), Some(20)]);
    let stored_end = ints(vec![Some(20), None]);
    let stored_tracked = [texts(vec!["A", "B"])];
    // Changes: late C at 15, replay of B at 20, D at 30, delete at 40.
    let change_seq = ints(vec![Some(15), Some(20), Some(30), Some(40)]);
    let change_tracked = [texts(vec!["C", "B", "D", "-"])];
    let delete = BooleanArray::from(vec![false, false, false, true]);
    let input = Scd2Input {
        keys: 1,
        stored_key: &[0, 0],
        stored_start: &stored_start,
        stored_end: &stored_end,
        stored_data: &stored_tracked,
        stored_last: &stored_start,
        change_key: &[0, 0, 0, 0],
        change_seq: &change_seq,
        change_delete: &delete,
        change_data: &change_tracked,
        tracked: &[0],
        tomb_key: &[],
        tomb_seq: &ints(vec![]),
    };
    let plan = plan_scd2(&input).unwrap();
    assert_eq!(plan.rewrite, vec![true]);
    assert_eq!(
        (plan.inserted, plan.updated, plan.stale, plan.deleted),
        (0, 1, 1, 1)
    );
    assert_eq!(plan.sequence_conflicts, 0);
    assert_eq!(
        show(&plan, &input, &["A", "B"], &["C", "B", "D", "-"]),
        vec![
            (10, Some(15), "A".into()),
            (15, Some(20), "C".into()),
            (20, Some(30), "B".into()),
            (30, Some(40), "D".into()),
        ]
    );

    // Replaying the same changes over that history changes nothing, the delete included.
    let stored_start = ints(vec![Some(10), Some(15), Some(20), Some(30)]);
    let stored_end = ints(vec![Some(15), Some(20), Some(30), Some(40)]);
    let stored_tracked = [texts(vec!["A", "C", "B", "D"])];
    let again = Scd2Input {
        keys: 1,
        stored_key: &[0, 0, 0, 0],
        stored_start: &stored_start,
        stored_end: &stored_end,
        stored_data: &stored_tracked,
        stored_last: &stored_start,
        ..input
    };
    let plan = plan_scd2(&again).unwrap();
    assert_eq!(plan.rewrite, vec![false]);
    assert_eq!(plan.stale, 4);
}

/// Plans changes `(seq, tracked value, delete)` of one key with no stored history; the
/// versions are shown with `labels` as their data.
fn plan_new_key(
    changes: &[(i64, &str, bool)],
    labels: &[&str],
) -> (Scd2Plan, Vec<(i64, Option<i64>, String)>) {
    let empty = ints(vec![]);
    let change_seq = ints(changes.iter().map(|c| Some(c.0)).collect());
    let change_data = [texts(changes.iter().map(|c| c.1).collect())];
    let delete = BooleanArray::from(changes.iter().map(|c| c.2).collect::<Vec<_>>());
    let key = vec![0; changes.len()];
    let input = Scd2Input {
        keys: 1,
        stored_key: &[],
        stored_start: &empty,
        stored_end: &empty,
        stored_data: &[texts(vec![])],
        stored_last: &empty,
        change_key: &key,
        change_seq: &change_seq,
        change_delete: &delete,
        change_data: &change_data,
        tracked: &[0],
        tomb_key: &[],
        tomb_seq: &empty,
    };
    let plan = plan_scd2(&input).unwrap();
    let shown = show(&plan, &input, &[], labels);
    (plan, shown)
}

#[test]
fn untracked_changes_update_in_place_and_deleted_keys_come_back() {
    // Tracked value x, x (in place), then a delete, then y.
    let (plan, versions) = plan_new_key(
        &[
            (1, "x", false),
            (2, "x", false),
            (3, "-", true),
            (4, "y", false),
        ],
        &["x1", "x2", "-", "y"],
    );
    assert_eq!(plan.inserted, 1);
    assert_eq!(
        versions,
        vec![(1, Some(3), "x2".into()), (4, None, "y".into())]
    );
}

#[test]
fn two_changes_of_one_sequence_keep_the_later_and_count_a_conflict_if_they_differ() {
    let (plan, versions) = plan_new_key(
        &[
            (1, "a", false),
            (1, "b", false),
            (2, "c", false),
            (2, "c", false),
        ],
        &["a", "b", "c", "c"],
    );
    assert_eq!((plan.sequence_conflicts, plan.stale), (1, 2));
    assert_eq!(
        versions,
        vec![(1, Some(2), "b".into()), (2, None, "c".into())]
    );
}

/// A version as (start, end, value).
type Shown = (i64, Option<i64>, String);

/// Plans one key: stored versions `(start, end, value)`, stored tombstones, changes
/// `(seq, value, delete)`. Returns the plan, the rebuilt versions (when rewritten) with
/// their values, and the sequences of the tombstones to add.
fn plan_one(
    stored: &[(i64, Option<i64>, &str)],
    tombs: &[i64],
    changes: &[(i64, &str, bool)],
) -> (Scd2Plan, Vec<Shown>, Vec<i64>) {
    plan_merged(stored, &[], tombs, changes)
}

/// [`plan_one`] where stored version `i` took an in-place update at `merged[i]`.
fn plan_merged(
    stored: &[(i64, Option<i64>, &str)],
    merged: &[Option<i64>],
    tombs: &[i64],
    changes: &[(i64, &str, bool)],
) -> (Scd2Plan, Vec<Shown>, Vec<i64>) {
    let stored_last = ints(
        (0..stored.len())
            .map(|i| merged.get(i).copied().flatten().or(Some(stored[i].0)))
            .collect(),
    );
    let stored_start = ints(stored.iter().map(|v| Some(v.0)).collect());
    let stored_end = ints(stored.iter().map(|v| v.1).collect());
    let stored_values: Vec<&str> = stored.iter().map(|v| v.2).collect();
    let change_values: Vec<&str> = changes.iter().map(|c| c.1).collect();
    let change_seq = ints(changes.iter().map(|c| Some(c.0)).collect());
    let tomb_seq = ints(tombs.iter().map(|&t| Some(t)).collect());
    let delete = BooleanArray::from(changes.iter().map(|c| c.2).collect::<Vec<_>>());
    let input = Scd2Input {
        keys: 1,
        stored_key: &vec![0; stored.len()],
        stored_start: &stored_start,
        stored_end: &stored_end,
        stored_data: &[texts(stored_values.clone())],
        stored_last: &stored_last,
        change_key: &vec![0; changes.len()],
        change_seq: &change_seq,
        change_delete: &delete,
        change_data: &[texts(change_values.clone())],
        tracked: &[0],
        tomb_key: &vec![0; tombs.len()],
        tomb_seq: &tomb_seq,
    };
    let plan = plan_scd2(&input).unwrap();
    let versions = show(&plan, &input, &stored_values, &change_values);
    let seq = |f: SeqFrom| match f {
        SeqFrom::StoredStart(i) => stored[i as usize].0,
        SeqFrom::StoredEnd(i) => stored[i as usize].1.unwrap(),
        SeqFrom::Change(i) => changes[i as usize].0,
        SeqFrom::Tombstone(i) => tombs[i as usize],
        SeqFrom::StoredLast(i) => merged[i as usize].unwrap(),
    };
    let new_tombs = plan.tombstones.iter().map(|&(_, f)| seq(f)).collect();
    (plan, versions, new_tombs)
}

#[test]
fn a_delete_that_closes_nothing_is_kept_and_ends_a_later_older_upsert() {
    // Issue 13, key k024: run 1 brings only a delete at 1001.
    let (plan, versions, tombs) = plan_one(&[], &[], &[(1001, "-", true)]);
    assert_eq!((versions.len(), tombs), (0, vec![1001]));
    assert_eq!((plan.stale, plan.inserted), (0, 0), "not a stale change");
    // Run 2: a delete at 1081, an upsert at 1083, a late upsert at 756.
    let (plan, versions, tombs) = plan_one(
        &[],
        &[1001],
        &[(1081, "-", true), (1083, "b", false), (756, "a", false)],
    );
    assert_eq!(
        versions,
        vec![(756, Some(1001), "a".into()), (1083, None, "b".into())]
    );
    assert_eq!(
        tombs,
        vec![1081],
        "the delete at 1081 closes nothing either"
    );
    assert_eq!(plan.inserted, 1);
}

#[test]
fn a_late_delete_before_every_version_ends_a_later_older_upsert() {
    // Issue 13, key k017: history [1062, 1093), [1134, …); a late delete at 993.
    let stored = [(1062, Some(1093), "x"), (1134, None, "y")];
    let (plan, _, tombs) = plan_one(&stored, &[], &[(993, "-", true)]);
    assert_eq!((plan.rewrite.clone(), tombs), (vec![false], vec![993]));
    // Then a late upsert at 890: it ends at 993.
    let (_, versions, tombs) = plan_one(&stored, &[993], &[(890, "w", false)]);
    assert_eq!(
        versions,
        vec![
            (890, Some(993), "w".into()),
            (1062, Some(1093), "x".into()),
            (1134, None, "y".into()),
        ]
    );
    assert!(tombs.is_empty());
}

#[test]
fn a_version_end_a_late_delete_leaves_closing_nothing_becomes_a_tombstone() {
    // Stored [10, 30); a late delete at 20 ends it there: the delete at 30 is kept.
    let (_, versions, tombs) = plan_one(&[(10, Some(30), "a")], &[], &[(20, "-", true)]);
    assert_eq!(versions, vec![(10, Some(20), "a".into())]);
    assert_eq!(tombs, vec![30]);
    // A later upsert at 25 then ends at 30.
    let (_, versions, _) = plan_one(&[(10, Some(20), "a")], &[30], &[(25, "b", false)]);
    assert_eq!(
        versions,
        vec![(10, Some(20), "a".into()), (25, Some(30), "b".into())]
    );
}

#[test]
fn replays_of_kept_deletes_and_a_crash_between_the_two_commits_change_nothing() {
    // The tombstone replayed: stale, nothing new.
    let (plan, _, tombs) = plan_one(&[], &[1001], &[(1001, "-", true)]);
    assert_eq!((plan.stale, plan.rewrite.clone()), (1, vec![false]));
    assert!(tombs.is_empty());
    // Tombstones committed, history not (a crash): the rerun rewrites history the same
    // way and adds no second tombstone for the stored end at 30.
    let (_, versions, tombs) = plan_one(&[(10, Some(30), "a")], &[30], &[(20, "-", true)]);
    assert_eq!(versions, vec![(10, Some(20), "a".into())]);
    assert!(tombs.is_empty());
}

#[test]
fn a_late_change_before_an_in_place_update_ends_the_version_there() {
    // Stored [10, …) "a", updated in place (untracked columns) at 20.
    let stored = [(10, None, "a")];
    let (_, versions, tombs) = plan_merged(&stored, &[Some(20)], &[], &[(15, "-", true)]);
    assert_eq!(
        versions,
        vec![(10, Some(15), "a".into()), (20, None, "a".into())],
        "the update at 20 comes back after the late delete"
    );
    assert!(tombs.is_empty());
    let (_, versions, _) = plan_merged(&stored, &[Some(20)], &[], &[(15, "b", false)]);
    assert_eq!(
        versions,
        vec![
            (10, Some(15), "a".into()),
            (15, Some(20), "b".into()),
            (20, None, "a".into())
        ]
    );
    // A replay of the in-place update itself changes nothing.
    let (plan, _, _) = plan_merged(&stored, &[Some(20)], &[], &[(20, "a", false)]);
    assert_eq!((plan.rewrite.clone(), plan.stale), (vec![false], 1));
}
