//! SCD type 2 planning (DESIGN §4): the history of each key, rebuilt from its stored
//! versions and this run's changes.
//!
//! Every stored version is an upsert event at its `__START_AT`; a stored `__END_AT` that no
//! other version starts at is a delete event. This run's changes are added (a change whose
//! sequence equals a stored event is a replay and is dropped), the events are sorted by
//! sequence, and folded: an upsert whose tracked columns equal the open version's updates it
//! in place; another upsert closes the open version and opens a new one; a delete closes
//! it. A late change thus lands at its place in history, splitting the version it falls in.
//!
//! A delete that closes no version — the key has no history yet or is already deleted at
//! its sequence — is part of the history all the same: the plan returns it as a tombstone to
//! keep, and later runs pass the stored tombstones back in as delete events, so a change
//! arriving later with an older sequence ends at it.

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::row::{Row, Rows};

use crate::dedupe::encode as encode_rows;
use crate::{CoreError, Result};

/// Where a value of an output version comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// Row `i` of the stored versions.
    Stored(u32),
    /// Row `i` of this run's changes.
    Change(u32),
}

/// Where a sequence value comes from: a stored version's start or end, or a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqFrom {
    /// `__START_AT` of stored row `i`.
    StoredStart(u32),
    /// `__END_AT` of stored row `i`.
    StoredEnd(u32),
    /// The sequence of change `i`.
    Change(u32),
    /// The sequence of stored tombstone `i`.
    Tombstone(u32),
    /// The sequence of the last change merged into stored row `i` in place.
    StoredLast(u32),
}

/// One version of a key's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// The key group.
    pub key: u32,
    /// Where its data columns come from.
    pub data: From,
    /// Its `__START_AT`.
    pub start: SeqFrom,
    /// Its `__END_AT` (`None`: current).
    pub end: Option<SeqFrom>,
}

/// Inputs of [`plan_scd2`]. Keys are given as group numbers `0..keys`.
pub struct Scd2Input<'a> {
    /// Number of key groups.
    pub keys: usize,
    /// Key group of every stored version.
    pub stored_key: &'a [u32],
    /// `__START_AT` of every stored version.
    pub stored_start: &'a ArrayRef,
    /// `__END_AT` of every stored version (NULL: current).
    pub stored_end: &'a ArrayRef,
    /// Data columns of the stored versions (every column but keys and history bounds).
    pub stored_data: &'a [ArrayRef],
    /// Per stored version, the sequence of the last change merged into it in place (its
    /// stored sequence column; equal to `__START_AT` when none was). A change that falls
    /// before it ends the version there and the merged state goes on from it.
    pub stored_last: &'a ArrayRef,
    /// Key group of every change, in input order.
    pub change_key: &'a [u32],
    /// Sequence of every change (same type as `stored_start`).
    pub change_seq: &'a ArrayRef,
    /// True where the change is a delete.
    pub change_delete: &'a BooleanArray,
    /// Data columns of the changes (same columns and types as `stored_data`).
    pub change_data: &'a [ArrayRef],
    /// Which data columns are tracked: a change in them starts a new version.
    pub tracked: &'a [usize],
    /// Key group of every stored tombstone (a delete the stored history does not show).
    pub tomb_key: &'a [u32],
    /// Sequence of every stored tombstone (same type as `stored_start`).
    pub tomb_seq: &'a ArrayRef,
}

/// The rebuilt history of the keys this run changes.
#[derive(Debug, Clone, Default)]
pub struct Scd2Plan {
    /// Per key group: its history changed, so its stored versions are replaced by
    /// [`Scd2Plan::versions`] of that key.
    pub rewrite: Vec<bool>,
    /// The versions of the rewritten keys, by key then start.
    pub versions: Vec<Version>,
    /// Keys with no stored version: inserted.
    pub inserted: usize,
    /// Keys with stored versions whose history changed.
    pub updated: usize,
    /// Versions closed by a delete of this run.
    pub deleted: usize,
    /// Keys with two changes of one sequence whose data differ (the later one is kept).
    pub sequence_conflicts: usize,
    /// Changes dropped: their sequence is already in the stored history (replays), or a later
    /// change of the key in this run has the same sequence.
    pub stale: usize,
    /// Deletes that close no version of the rebuilt history and are no stored tombstone yet
    /// (a delete of this run, or a stored version end that a late delete left closing
    /// nothing): (key group, sequence), to keep as tombstones. Given for every key, its
    /// history rewritten or not.
    pub tombstones: Vec<(u32, SeqFrom)>,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Upsert {
        seq: SeqFrom,
        data: From,
    },
    /// `tomb`: a stored tombstone holds it.
    Delete {
        seq: SeqFrom,
        tomb: bool,
    },
}

impl Event {
    fn seq(&self) -> SeqFrom {
        match self {
            Event::Upsert { seq, .. } | Event::Delete { seq, .. } => *seq,
        }
    }
    fn is_stored(&self) -> bool {
        !matches!(self.seq(), SeqFrom::Change(_))
    }
}

/// Plans an SCD type 2 apply; see the module documentation.
pub fn plan_scd2(input: &Scd2Input<'_>) -> Result<Scd2Plan> {
    check_lengths(input)?;
    let enc = Encoded::new(input)?;
    let mut events = stored_events(input, &enc);
    let mut has_stored = vec![false; input.keys];
    for &k in input.stored_key {
        has_stored[k as usize] = true;
    }
    let has_change = add_change_events(input, &mut events);

    let mut plan = Scd2Plan {
        rewrite: vec![false; input.keys],
        ..Scd2Plan::default()
    };
    for (k, evs) in events.into_iter().enumerate() {
        if !has_change[k] {
            continue;
        }
        plan_key(input, &enc, k, evs, has_stored[k], &mut plan);
    }
    Ok(plan)
}

/// Checks that the inputs of [`plan_scd2`] agree: every column as long as its keys, as many
/// change data columns as stored ones, and every tracked column one of them.
fn check_lengths(input: &Scd2Input<'_>) -> Result<()> {
    let s = input.stored_key.len();
    let c = input.change_key.len();
    if input.stored_start.len() != s
        || input.stored_end.len() != s
        || input.change_seq.len() != c
        || input.change_delete.len() != c
        || input.stored_data.len() != input.change_data.len()
        || input.tracked.iter().any(|&t| t >= input.stored_data.len())
        || input.tomb_seq.len() != input.tomb_key.len()
        || input.stored_last.len() != s
    {
        return Err(CoreError::Internal(
            "plan_scd2 inputs differ in length".into(),
        ));
    }
    Ok(())
}

/// The row encodings the plan compares values in: every sequence value, and the tracked
/// and all data columns of the stored versions and the changes.
struct Encoded {
    /// Number of stored versions.
    stored: usize,
    /// Number of changes.
    changes: usize,
    /// Number of stored tombstones.
    tombs: usize,
    /// Every sequence value: stored starts, stored ends, changes, tombstones, stored
    /// in-place updates.
    seqs: Rows,
    /// The tracked columns, stored rows first (`None`: no column is tracked).
    tracked: Option<Rows>,
    /// All data columns, stored rows first (`None`: there is no data column).
    data: Option<Rows>,
}

impl Encoded {
    /// Encodes the sequence values and the data columns of `input` (its lengths checked).
    fn new(input: &Scd2Input<'_>) -> Result<Self> {
        let s = input.stored_key.len();
        let c = input.change_key.len();
        // One row encoding for every sequence value: stored starts, stored ends, changes,
        // tombstones, stored in-place updates.
        let t = input.tomb_key.len();
        let seqs = encode(&[
            input.stored_start.as_ref(),
            input.stored_end.as_ref(),
            input.change_seq.as_ref(),
            input.tomb_seq.as_ref(),
            input.stored_last.as_ref(),
        ])?;
        // Row encodings of the tracked columns and of all data columns, stored rows first.
        let tracked = encode_data(input, input.tracked)?;
        let every: Vec<usize> = (0..input.stored_data.len()).collect();
        let data = encode_data(input, &every)?;
        Ok(Encoded {
            stored: s,
            changes: c,
            tombs: t,
            seqs,
            tracked,
            data,
        })
    }

    /// The encoded sequence value `f`.
    fn seq_row(&self, f: SeqFrom) -> Row<'_> {
        let (s, c, t) = (self.stored, self.changes, self.tombs);
        match f {
            SeqFrom::StoredStart(i) => self.seqs.row(i as usize),
            SeqFrom::StoredEnd(i) => self.seqs.row(s + i as usize),
            SeqFrom::Change(i) => self.seqs.row(2 * s + i as usize),
            SeqFrom::Tombstone(i) => self.seqs.row(2 * s + c + i as usize),
            SeqFrom::StoredLast(i) => self.seqs.row(2 * s + c + t + i as usize),
        }
    }

    /// The encoded sequence value `f`, if there is one.
    fn seq_of(&self, f: Option<SeqFrom>) -> Option<Row<'_>> {
        f.map(|f| self.seq_row(f))
    }

    /// Whether the rows `a` and `b` are equal in `rows` (always, when there is no column).
    fn same(&self, rows: &Option<Rows>, a: From, b: From) -> bool {
        match rows {
            None => true,
            Some(rows) => {
                let at = |f: From| match f {
                    From::Stored(i) => rows.row(i as usize),
                    From::Change(i) => rows.row(self.stored + i as usize),
                };
                at(a) == at(b)
            }
        }
    }

    /// Whether the rows `a` and `b` are equal in the tracked columns.
    fn same_tracked(&self, a: From, b: From) -> bool {
        self.same(&self.tracked, a, b)
    }

    /// Whether the rows `a` and `b` are equal in every data column.
    fn same_data(&self, a: From, b: From) -> bool {
        self.same(&self.data, a, b)
    }
}

/// One row encoding of the data `columns` of the stored versions, then of the changes
/// (`None` when `columns` is empty).
fn encode_data(input: &Scd2Input<'_>, columns: &[usize]) -> Result<Option<Rows>> {
    if columns.is_empty() {
        return Ok(None);
    }
    let mut all = Vec::with_capacity(columns.len());
    for &c in columns {
        all.push(arrow::compute::concat(&[
            input.stored_data[c].as_ref(),
            input.change_data[c].as_ref(),
        ])?);
    }
    encode_rows(&all)
}

/// The events of the stored history, per key group: an upsert at every stored version's
/// start (and at an in-place update inside it), a delete at every stored version end that
/// no stored version starts at, and a delete at every stored tombstone.
fn stored_events(input: &Scd2Input<'_>, enc: &Encoded) -> Vec<Vec<Event>> {
    let mut events: Vec<Vec<Event>> = vec![Vec::new(); input.keys];
    for (i, &k) in input.stored_key.iter().enumerate() {
        events[k as usize].push(Event::Upsert {
            seq: SeqFrom::StoredStart(i as u32),
            data: From::Stored(i as u32),
        });
        // An in-place update after the start (inside the version): an upsert of its own,
        // which the fold merges back unless a change now falls between the two.
        let last = SeqFrom::StoredLast(i as u32);
        let inside = !input.stored_last.is_null(i)
            && enc.seq_row(last) > enc.seq_row(SeqFrom::StoredStart(i as u32))
            && (input.stored_end.is_null(i)
                || enc.seq_row(last) < enc.seq_row(SeqFrom::StoredEnd(i as u32)));
        if inside {
            events[k as usize].push(Event::Upsert {
                seq: last,
                data: From::Stored(i as u32),
            });
        }
    }
    for (i, &k) in input.stored_key.iter().enumerate() {
        if input.stored_end.is_null(i) {
            continue;
        }
        // A closed version that no stored version follows was closed by a delete.
        let end = enc.seq_row(SeqFrom::StoredEnd(i as u32));
        let followed = events[k as usize].iter().any(|e| {
            matches!(
                e,
                Event::Upsert {
                    seq: SeqFrom::StoredStart(_),
                    ..
                }
            ) && enc.seq_row(e.seq()) == end
        });
        if !followed {
            events[k as usize].push(Event::Delete {
                seq: SeqFrom::StoredEnd(i as u32),
                tomb: false,
            });
        }
    }
    for (i, &k) in input.tomb_key.iter().enumerate() {
        events[k as usize].push(Event::Delete {
            seq: SeqFrom::Tombstone(i as u32),
            tomb: true,
        });
    }
    events
}

/// Adds this run's changes to `events`, in input order: a delete or an upsert each.
/// Returns, per key group, whether it has a change.
fn add_change_events(input: &Scd2Input<'_>, events: &mut [Vec<Event>]) -> Vec<bool> {
    let mut has_change = vec![false; input.keys];
    for (i, &k) in input.change_key.iter().enumerate() {
        let seq = SeqFrom::Change(i as u32);
        events[k as usize].push(if input.change_delete.value(i) {
            Event::Delete { seq, tomb: false }
        } else {
            Event::Upsert {
                seq,
                data: From::Change(i as u32),
            }
        });
        has_change[k as usize] = true;
    }
    has_change
}

/// Rebuilds the history of key group `k`, which this run changes, from its events `evs`,
/// into `plan`: its versions when they differ from the stored ones, and its counts.
/// `stored_before`: the key has stored versions.
fn plan_key(
    input: &Scd2Input<'_>,
    enc: &Encoded,
    k: usize,
    evs: Vec<Event>,
    stored_before: bool,
    plan: &mut Scd2Plan,
) {
    let kept = keep_one_per_sequence(enc, evs, plan);
    if kept.iter().all(Event::is_stored) {
        return; // every change of the key was a replay
    }
    let changes_kept = kept.iter().filter(|e| !e.is_stored()).count();
    let deleted_before = plan.deleted;
    let (out, tomb_changes) = fold_versions(enc, k, kept, plan);
    let deleted_here = plan.deleted - deleted_before;
    // Changes that leave every stored version as it was (e.g. a replayed in-place
    // update) rewrite nothing.
    if stored_unchanged(input, enc, k, &out) {
        plan.stale += changes_kept - tomb_changes;
        plan.deleted -= deleted_here;
        return;
    }
    plan.rewrite[k] = true;
    if stored_before {
        plan.updated += 1;
    } else {
        plan.inserted += 1;
    }
    plan.versions.extend(out);
}

/// Sorts the events of one key by sequence and keeps one event per sequence value: the
/// stored ones, else the last change. Adds the changes dropped to `plan.stale`, and the
/// key to `plan.sequence_conflicts` when two changes of one sequence differ.
fn keep_one_per_sequence(enc: &Encoded, mut evs: Vec<Event>, plan: &mut Scd2Plan) -> Vec<Event> {
    // By sequence; on ties stored events first, then changes in input order (stable).
    evs.sort_by(|a, b| {
        enc.seq_row(a.seq())
            .cmp(&enc.seq_row(b.seq()))
            .then(b.is_stored().cmp(&a.is_stored()))
    });
    // Per sequence value keep the stored events, else the last change.
    let mut kept: Vec<Event> = Vec::with_capacity(evs.len());
    let mut dropped = 0;
    let mut conflict = false;
    for e in evs {
        if let Some(last) = kept.last_mut()
            && enc.seq_row(last.seq()) == enc.seq_row(e.seq())
        {
            if last.is_stored() && e.is_stored() {
                // A stored delete twice (a version end and a tombstone of one
                // sequence): one delete, held by a tombstone if either is. A tombstone
                // at a stored version's start: the history wins.
                if let (Event::Delete { tomb, .. }, Event::Delete { tomb: t, .. }) = (&mut *last, e)
                {
                    *tomb |= t;
                    continue;
                }
                if matches!(e, Event::Delete { tomb: true, .. }) {
                    continue;
                }
            }
            if last.is_stored() && !e.is_stored() {
                dropped += 1;
                continue;
            }
            if !last.is_stored() && !e.is_stored() {
                let differs = match (*last, e) {
                    (Event::Upsert { data: a, .. }, Event::Upsert { data: b, .. }) => {
                        !enc.same_data(a, b)
                    }
                    (Event::Delete { .. }, Event::Delete { .. }) => false,
                    _ => true,
                };
                conflict |= differs;
                dropped += 1;
                kept.pop();
            }
        }
        kept.push(e);
    }
    plan.stale += dropped;
    plan.sequence_conflicts += usize::from(conflict);
    kept
}

/// Folds the kept events of key group `k`, in sequence order, into its versions: an upsert
/// equal to the open version in the tracked columns updates it in place, another upsert
/// closes it and opens a new one, a delete closes it. Adds the versions a change deletes
/// to `plan.deleted`, and a delete that closes nothing (and no stored tombstone holds) to
/// `plan.tombstones`. Returns the versions and how many changes only left a tombstone.
fn fold_versions(
    enc: &Encoded,
    k: usize,
    kept: Vec<Event>,
    plan: &mut Scd2Plan,
) -> (Vec<Version>, usize) {
    // Changes that only leave a tombstone (they are not stale).
    let mut tomb_changes = 0;
    let mut open: Option<Version> = None;
    let mut out = Vec::new();
    for e in kept {
        match e {
            Event::Upsert { seq, data } => {
                if let Some(v) = open.as_mut()
                    && enc.same_tracked(v.data, data)
                {
                    v.data = data;
                    continue;
                }
                if let Some(mut v) = open.take() {
                    v.end = Some(seq);
                    out.push(v);
                }
                open = Some(Version {
                    key: k as u32,
                    data,
                    start: seq,
                    end: None,
                });
            }
            Event::Delete { seq, tomb } => match open.take() {
                Some(mut v) => {
                    v.end = Some(seq);
                    out.push(v);
                    if !e.is_stored() {
                        plan.deleted += 1;
                    }
                }
                // Closes nothing: kept as a tombstone, unless one holds it already.
                None if !tomb => {
                    plan.tombstones.push((k as u32, seq));
                    if !e.is_stored() {
                        tomb_changes += 1;
                    }
                }
                None => {}
            },
        }
    }
    out.extend(open);
    (out, tomb_changes)
}

/// Whether the versions `out` rebuilt for key group `k` are its stored versions as they
/// were: as many, each with the start, end and data of a stored one.
fn stored_unchanged(input: &Scd2Input<'_>, enc: &Encoded, k: usize, out: &[Version]) -> bool {
    let stored_versions: Vec<Version> = input
        .stored_key
        .iter()
        .enumerate()
        .filter(|(_, key)| **key as usize == k)
        .map(|(i, _)| Version {
            key: k as u32,
            data: From::Stored(i as u32),
            start: SeqFrom::StoredStart(i as u32),
            end: (!input.stored_end.is_null(i)).then_some(SeqFrom::StoredEnd(i as u32)),
        })
        .collect();
    stored_versions.len() == out.len()
        && out.iter().all(|v| {
            stored_versions.iter().any(|st| {
                enc.seq_row(st.start) == enc.seq_row(v.start)
                    && enc.seq_of(st.end) == enc.seq_of(v.end)
                    && enc.same_data(st.data, v.data)
            })
        })
}

/// One row encoding of the values of `columns` (same type), one after another.
fn encode(columns: &[&dyn Array]) -> Result<Rows> {
    let all = arrow::compute::concat(columns)?;
    Ok(encode_rows(&[all])?.expect("one column"))
}

#[cfg(test)]
mod tests;
