//! SCD type 1 with late, duplicate and conflicting changes, composite keys and NULL keys,
//! against a reference model written separately from the engine; run on every table
//! format and engine ([`Target`]).
//!
//! The flow keys silver on two columns, `a STRING NOT NULL` and `b BIGINT` (nullable), and
//! sequences it by a bronze column `seq`, with soft deletes (`op = 'D'`). The model follows
//! docs/semantics.md:
//! * latest per key (step 4): the highest `seq` of the run wins, ties go to the later change
//!   in bronze order (the default `on_sequence_conflict: last`);
//! * keys compare NULL-safely (docs/pipeline.md, `keys`): a NULL `b` is a value of its own,
//!   and so is the empty string in `a`;
//! * a NULL in the `NOT NULL` key column `a` cannot be stored: the key's latest change is
//!   counted as `rejected`, and written nowhere;
//! * guard (step 5): a change applies only if its sequence is greater than the stored row's
//!   and the key's tombstone's; a delete removes a stored row older than it, and leaves a
//!   tombstone when it is newer than the stored row (or there is none) and than the key's
//!   tombstone (step 6, `smelt_core::scd1::plan_scd1`'s contract).
//!
//! Random streams of upserts and deletes for 27 keys (deletes before inserts, late changes,
//! changes sent twice, two different changes of one key with one sequence in one commit)
//! are cut into bronze commits and applied over several runs, with replays (`--since`),
//! runs that crash before the silver commit, and runs in key partitions. Silver and its
//! tombstones must match the model after every run; `--full-refresh` must give the same
//! silver as the incremental runs.

use std::collections::BTreeMap;

use proptest::prelude::*;
use smelt_engine::flow::apply::tombstone_table;
use smelt_engine::rejects::rejects_table;
use smelt_engine::report::{FlowReport, ReportStatus};
use smelt_spec::ApplyFlow;

use crate::backend::{How, Target, block_on, cut_into_commits};
use crate::batches::{column, ints, text_batch, texts};

mod cases;

pub use cases::null_and_composite_keys;

/// Keys with `a` set: three values of `a` (the empty string among them) times eight of `b`
/// (NULL, 0..=6).
const KEYED: usize = 24;
/// Every key: the keyed ones, then three with a NULL `a` (`b` NULL, 0, 1), which silver
/// cannot store.
const KEYS: usize = 27;
const A: [&str; 3] = ["", "a1", "a2"];

/// Key `k`'s columns (a, b).
fn key_cols(k: usize) -> (Option<&'static str>, Option<i64>) {
    let b = |j: usize| (j > 0).then(|| j as i64 - 1);
    if k < KEYED {
        (Some(A[k % 3]), b(k / 3))
    } else {
        (None, b(k - KEYED))
    }
}

/// The key whose columns are (a, b).
fn key_of(a: Option<&str>, b: Option<i64>) -> usize {
    (0..KEYS)
        .find(|&k| {
            let (ka, kb) = key_cols(k);
            ka == a && kb == b
        })
        .expect("a model key")
}

fn val_text(v: u8) -> String {
    format!("v{v}")
}

/// One change of key `key`: an upsert of `val` (NULL when `None`), or a delete (whose
/// `val` is sent too, and means nothing).
#[derive(Debug, Clone, PartialEq)]
struct Change {
    key: usize,
    seq: i64,
    val: Option<u8>,
    delete: bool,
}

/// A silver row as read back: (a, b, val, seq).
type Row = (Option<String>, Option<i64>, Option<String>, Option<i64>);
/// A tombstone as read back: (a, b, seq).
type Tomb = (Option<String>, Option<i64>, Option<i64>);

/// The reference model: what silver and the tombstones hold, and the bronze version applied.
#[derive(Debug, Clone, Default)]
struct Model {
    /// Stored rows: key → (seq, val).
    silver: BTreeMap<usize, (i64, Option<u8>)>,
    /// Tombstones: key → seq of the delete.
    tombstones: BTreeMap<usize, i64>,
    watermark: Option<i64>,
}

/// The changes of bronze versions `(after, to]` (commit `i` is version `i`), in bronze order.
fn window(commits: &[Vec<Change>], after: Option<i64>, to: i64) -> Vec<&Change> {
    commits
        .iter()
        .enumerate()
        .filter(|&(v, _)| after.is_none_or(|a| v as i64 > a) && v as i64 <= to)
        .flat_map(|(_, c)| c.iter())
        .collect()
}

impl Model {
    /// One run over `changes` (bronze order); returns how many keys it rejects.
    fn apply(&mut self, changes: Vec<&Change>) -> usize {
        // The latest change per key: the greatest sequence, the later change on a tie.
        let mut latest: BTreeMap<usize, &Change> = BTreeMap::new();
        for c in changes {
            if latest.get(&c.key).is_none_or(|best| c.seq >= best.seq) {
                latest.insert(c.key, c);
            }
        }
        let mut rejected = 0;
        for (k, c) in latest {
            if key_cols(k).0.is_none() {
                rejected += 1; // NULL in the NOT NULL key column `a`
                continue;
            }
            let past_stored = self.silver.get(&k).is_none_or(|&(s, _)| c.seq > s);
            let past_tomb = self.tombstones.get(&k).is_none_or(|&t| c.seq > t);
            if c.delete {
                if past_stored {
                    self.silver.remove(&k);
                    if past_tomb {
                        self.tombstones.insert(k, c.seq);
                    }
                }
            } else if past_stored && past_tomb {
                self.silver.insert(k, (c.seq, c.val));
            }
        }
        rejected
    }

    /// A run with bronze at version `v` (`commits[..=v]` delivered): the versions after the
    /// watermark (all of them on the first run), nothing when silver is up to date.
    fn plain(&mut self, commits: &[Vec<Change>], v: i64) -> usize {
        if self.watermark == Some(v) {
            return 0;
        }
        let rejected = self.apply(window(commits, self.watermark, v));
        self.watermark = Some(v);
        rejected
    }

    /// A replay of the versions after `after` (`--since`) with bronze at version `v`; the
    /// watermark moves to `v` only if the window leaves no gap after it.
    fn replay(&mut self, commits: &[Vec<Change>], after: i64, v: i64) -> usize {
        let w = self.watermark.expect("a run before a replay");
        if after >= v {
            return 0;
        }
        let rejected = self.apply(window(commits, Some(after), v));
        self.watermark = Some(if after <= w { w.max(v) } else { w });
        rejected
    }

    fn rows(&self) -> Vec<Row> {
        let mut out: Vec<Row> = self
            .silver
            .iter()
            .map(|(&k, &(seq, val))| {
                let (a, b) = key_cols(k);
                (a.map(str::to_string), b, val.map(val_text), Some(seq))
            })
            .collect();
        out.sort();
        out
    }

    fn tombs(&self) -> Vec<Tomb> {
        let mut out: Vec<Tomb> = self
            .tombstones
            .iter()
            .map(|(&k, &seq)| {
                let (a, b) = key_cols(k);
                (a.map(str::to_string), b, Some(seq))
            })
            .collect();
        out.sort();
        out
    }
}

/// The flow: silver `s.t` keyed on (a, b), sequenced by `seq`, `op = 'D'` deletes,
/// written copy-on-write or merge-on-read.
fn flow<T: Target>(h: &T, merge_on_read: bool) -> ApplyFlow {
    let mode = if merge_on_read {
        "      write_mode: merge_on_read\n"
    } else {
        ""
    };
    let body = format!(
        "      keys: [a, b]\n      sequence_by: [seq]\n      apply_as_deletes: op = 'D'\n{mode}"
    );
    let ddl = "CREATE TABLE {into} (a STRING NOT NULL, b BIGINT, val STRING, seq BIGINT)";
    let flow = h.apply_flow("t", "s.t", ddl, &body);
    assert_eq!(flow.keys, ["a", "b"]);
    flow
}

/// Appends `changes` to bronze (all text, as bronze is) in one commit, in order.
async fn append<T: Target>(h: &mut T, changes: &[Change]) {
    let text = |f: &dyn Fn(&Change) -> Option<String>| changes.iter().map(f).collect::<Vec<_>>();
    h.append(text_batch(vec![
        ("a", text(&|c| key_cols(c.key).0.map(str::to_string))),
        ("b", text(&|c| key_cols(c.key).1.map(|b| b.to_string()))),
        ("val", text(&|c| c.val.map(val_text))),
        ("seq", text(&|c| Some(c.seq.to_string()))),
        (
            "op",
            text(&|c| Some(if c.delete { "D" } else { "U" }.to_string())),
        ),
    ]))
    .await;
}

/// The stored silver rows, read by the format's own reader (not smelt's lookups), sorted.
async fn silver_rows<T: Target>(h: &T, flow: &ApplyFlow) -> Vec<Row> {
    let Some(b) = h.scan(&flow.into).await else {
        return Vec::new();
    };
    let (a, key_b) = (texts(column(&b, "a")), ints(column(&b, "b")));
    let (val, seq) = (texts(column(&b, "val")), ints(column(&b, "seq")));
    let mut out: Vec<Row> = a
        .into_iter()
        .zip(key_b)
        .zip(val)
        .zip(seq)
        .map(|(((a, b), val), seq)| (a, b, val, seq))
        .collect();
    out.sort();
    out
}

/// The stored tombstones, sorted.
async fn tombstones<T: Target>(h: &T, flow: &ApplyFlow) -> Vec<Tomb> {
    let Some(b) = h.scan(&tombstone_table(&flow.into)).await else {
        return Vec::new();
    };
    let (a, key_b, seq) = (
        texts(column(&b, "a")),
        ints(column(&b, "b")),
        ints(column(&b, "seq")),
    );
    let mut out: Vec<Tomb> = a
        .into_iter()
        .zip(key_b)
        .zip(seq)
        .map(|((a, b), seq)| (a, b, seq))
        .collect();
    out.sort();
    out
}

/// Silver, the tombstones and the run's rejected count as the model says.
async fn check<T: Target>(
    h: &T,
    flow: &ApplyFlow,
    model: &Model,
    report: &FlowReport,
    rejected: usize,
    when: &str,
) {
    assert_eq!(
        report.rejected, rejected,
        "{when}: keys rejected (NULL in `a`)"
    );
    assert_eq!(silver_rows(h, flow).await, model.rows(), "{when}: silver");
    assert_eq!(
        tombstones(h, flow).await,
        model.tombs(),
        "{when}: tombstones"
    );
}

/// The changes of every key, in bundles that stay together in one bronze commit: 1–5
/// changes per key with distinct sequences, some upserting NULL; the first change of every
/// fourth key is a delete (a delete before the insert), every fourth key (offset 1) has a
/// delete between two upserts; for some keys one change comes with a twin of the same
/// sequence and other data (another value, or delete against upsert), right before or
/// after it.
fn changes() -> impl Strategy<Value = Vec<Vec<Change>>> {
    let per_key: Vec<_> = (0..KEYS)
        .map(|k| {
            (
                proptest::sample::subsequence((0..300i64).collect::<Vec<_>>(), 1..=5),
                proptest::collection::vec(
                    (
                        prop_oneof![4 => (0u8..4).prop_map(Some), 1 => Just(None)],
                        proptest::bool::weighted(0.35),
                    ),
                    5,
                ),
                proptest::option::weighted(0.25, (0usize..5, any::<bool>(), 0u8..3)),
            )
                .prop_map(move |(mut seqs, kinds, tie)| {
                    seqs.sort();
                    let mut out: Vec<Change> = seqs
                        .iter()
                        .zip(kinds)
                        .map(|(&seq, (val, delete))| Change {
                            key: k,
                            seq,
                            val,
                            delete,
                        })
                        .collect();
                    if k % 4 == 0 {
                        out[0].delete = true;
                    }
                    if k % 4 == 1 && out.len() >= 3 {
                        out[0].delete = false;
                        out[1].delete = true;
                        out[2].delete = false;
                    }
                    let mut bundles: Vec<Vec<Change>> = out.into_iter().map(|c| vec![c]).collect();
                    if let Some((at, twin_first, how)) = tie {
                        let at = at % bundles.len();
                        let change = bundles[at][0].clone();
                        let twin = twin_of(&change, how);
                        bundles[at] = if twin_first {
                            vec![twin, change]
                        } else {
                            vec![change, twin]
                        };
                    }
                    bundles
                })
        })
        .collect();
    per_key.prop_map(|keys| keys.into_iter().flatten().collect())
}

/// A change of `c`'s key and sequence with other data: an upsert for a delete; for an
/// upsert, a delete (`how` 0) or an upsert of another value.
fn twin_of(c: &Change, how: u8) -> Change {
    let mut twin = c.clone();
    if c.delete {
        twin.delete = false;
        twin.val = Some(how);
    } else if how == 0 {
        twin.delete = true;
    } else {
        twin.val = Some(c.val.map_or(how, |v| (v + how) % 4));
    }
    twin
}

/// A delivery: the changes shuffled (some sent again later), cut into bronze commits, runs
/// after some commits.
#[derive(Debug, Clone)]
pub struct Plan {
    commits: Vec<Vec<Change>>,
    /// After commit `i`: a run of this kind (or none).
    runs: Vec<Option<Run>>,
    /// Silver and its tombstones are written merge-on-read.
    merge_on_read: bool,
}

#[derive(Debug, Clone, Copy)]
enum Run {
    Plain,
    /// Replays the bronze versions after this one (`--since`) first, then a plain run.
    Replay(i64),
    /// Crashes once before silver's commit first, then a plain run.
    Crash,
    /// A run in key partitions.
    Partitioned,
}

pub fn delivery() -> impl Strategy<Value = Plan> {
    changes().prop_flat_map(|all| {
        (
            Just(all).prop_shuffle(),
            proptest::collection::vec(1usize..=12, 1..=10),
            proptest::collection::vec(0u8..12, 12),
            any::<bool>(),
        )
            .prop_map(|(mut shuffled, cuts, run_kinds, merge_on_read)| {
                // A few changes sent again later (re-sent rows); never one of a tied pair,
                // whose winner is decided by bronze order.
                let again: Vec<Vec<Change>> = shuffled
                    .iter()
                    .filter(|b| b.len() == 1)
                    .step_by(7)
                    .cloned()
                    .collect();
                shuffled.extend(again);
                let commits = cut_into_commits(&shuffled, &cuts);
                let runs = (0..commits.len())
                    .map(|i| match run_kinds.get(i).copied().unwrap_or(0) {
                        // Not every commit is followed by a run.
                        0..=2 if i + 1 < commits.len() => None,
                        // A replay of the bronze versions after an earlier one.
                        3 if i > 0 => Some(Run::Replay((i as i64 - 1) / 2)),
                        // A run that dies between the tombstones and silver commits.
                        4 => Some(Run::Crash),
                        5 => Some(Run::Partitioned),
                        _ => Some(Run::Plain),
                    })
                    .collect();
                Plan {
                    commits,
                    runs,
                    merge_on_read,
                }
            })
    })
}

/// Delivers `plan`, checking silver, the tombstones and the rejected count after every
/// run; then a `--full-refresh`, which must give the incremental silver, and the
/// tombstones of a single run over all of bronze.
pub fn deliver<T: Target>(plan: &Plan) {
    block_on(async {
        let mut h = T::start().await;
        let flow = flow(&h, plan.merge_on_read);
        let mut model = Model::default();
        for (i, commit) in plan.commits.iter().enumerate() {
            let v = i as i64;
            append(&mut h, commit).await;
            let Some(kind) = plan.runs[i] else { continue };
            let delivered = &plan.commits[..=i];
            match kind {
                // A replay (`--since`) needs a run before it.
                Run::Replay(after) if model.watermark.is_some() && T::REPLAYS => {
                    let how = How {
                        replay_after: Some(after as usize),
                        ..How::default()
                    };
                    let report = h.run("t", &flow, how).await.unwrap();
                    let rejected = model.replay(delivered, after, v);
                    let when = format!("replay after commit {after} at bronze commit {i}");
                    check(&h, &flow, &model, &report, rejected, &when).await;
                }
                Run::Crash => {
                    let how = How {
                        crash: true,
                        ..How::default()
                    };
                    assert!(h.run("t", &flow, how).await.is_none());
                    // Silver is as it was (its tombstones may be ahead: they commit first).
                    assert_eq!(
                        silver_rows(&h, &flow).await,
                        model.rows(),
                        "after a crash at bronze commit {i}"
                    );
                }
                _ => {}
            }
            let how = How {
                partitioned: matches!(kind, Run::Partitioned),
                ..How::default()
            };
            let report = h.run("t", &flow, how).await.unwrap();
            let rejected = model.plain(delivered, v);
            let when = format!("after bronze commit {i} ({kind:?})");
            check(&h, &flow, &model, &report, rejected, &when).await;
        }
        // The last commit always gets a run: nothing left to do.
        let last = plan.commits.len() as i64 - 1;
        let report = h.run("t", &flow, How::default()).await.unwrap();
        assert_eq!(report.status, ReportStatus::UpToDate);
        let rejected = model.plain(&plan.commits, last);
        check(
            &h,
            &flow,
            &model,
            &report,
            rejected,
            "after the last commit",
        )
        .await;

        let incremental = silver_rows(&h, &flow).await;
        let mut fresh = Model::default();
        let rejected = fresh.plain(&plan.commits, last);
        // Tied changes of one sequence share a commit, so the same bronze gives the same
        // silver however it is cut into runs.
        assert_eq!(
            fresh.rows(),
            model.rows(),
            "the model: a rebuild vs the runs"
        );
        let how = How {
            full_refresh: true,
            ..How::default()
        };
        let report = h.run("t", &flow, how).await.unwrap();
        assert_eq!(
            (report.mode.as_str(), report.inserted),
            ("rebuild", fresh.silver.len()),
            "{report:?}"
        );
        check(&h, &flow, &fresh, &report, rejected, "after --full-refresh").await;
        assert_eq!(
            silver_rows(&h, &flow).await,
            incremental,
            "--full-refresh vs the runs"
        );
    });
}
