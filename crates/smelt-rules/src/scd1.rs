//! What a key's latest change does to SCD1 silver (DESIGN §3.5–3.6), as a decision table.
//!
//! Each key's winning change is described by five facts; the first row of [`ACTIONS`]
//! whose conditions hold gives its [`Outcome`], and a change no row matches is stale. The
//! embedded engine evaluates the table over Arrow boolean arrays (`smelt_core::scd1`), the
//! Spark engine renders it as a `CASE` expression; neither writes the rules out again.

/// A fact about a key's winning change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fact {
    /// The change deletes its key (a bronze delete, `apply_as_deletes`, or an upsert whose
    /// state fails `where`).
    Delete,
    /// Silver holds the key.
    Stored,
    /// The change's sequence is greater than silver's stored one (only read where stored).
    Newer,
    /// The key has no tombstone, or the change's sequence is greater than the tombstone's
    /// (or the tombstone is the killed run's own, replayed: DESIGN §3.8).
    PastTombstone,
    /// The change's data differs from silver's stored row (only read where stored).
    Differs,
}

/// What a change does to its key in silver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// A new key: its row is written, with a new update time.
    Insert,
    /// A stored key, newer, with other data: its row is rewritten, with a new update time.
    Update,
    /// A stored key, newer, with the same data: its sequence and ingest time are refreshed,
    /// the update time kept.
    Unchanged,
    /// A stored key deleted by a newer change: its row is removed.
    Delete,
    /// A key silver does not hold, deleted: nothing to remove, a tombstone remembers it.
    Tombstone,
    /// Not newer than what silver or the tombstone holds: skipped by the guard.
    Stale,
}

impl Action {
    /// Every action, in the order of the report's counts.
    pub const ALL: [Action; 6] = [
        Action::Insert,
        Action::Update,
        Action::Unchanged,
        Action::Delete,
        Action::Tombstone,
        Action::Stale,
    ];

    /// Its name, as the Spark engine's stage and the report say it.
    pub fn name(self) -> &'static str {
        match self {
            Action::Insert => "insert",
            Action::Update => "update",
            Action::Unchanged => "unchanged",
            Action::Delete => "delete",
            Action::Tombstone => "tombstone",
            Action::Stale => "stale",
        }
    }

    /// Whether the key's row is written (inserted, updated or refreshed).
    pub fn writes_row(self) -> bool {
        matches!(self, Action::Insert | Action::Update | Action::Unchanged)
    }

    /// Whether the row's data is new or changed (it gets a new update time).
    pub fn changes_data(self) -> bool {
        matches!(self, Action::Insert | Action::Update)
    }
}

/// What a row of the table does: the action, and whether a tombstone (the key and the
/// delete's sequence) is written so an older upsert arriving later cannot bring it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The action.
    pub action: Action,
    /// Whether a tombstone is written.
    pub tombstone: bool,
}

/// A row of the decision table: the facts that must hold (`true`) or not (`false`), and
/// the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The conditions, all of which must hold.
    pub when: &'static [(Fact, bool)],
    /// The outcome.
    pub then: Outcome,
}

const fn rule(when: &'static [(Fact, bool)], action: Action, tombstone: bool) -> Rule {
    Rule {
        when,
        then: Outcome { action, tombstone },
    }
}

use Fact::{Delete, Differs, Newer, PastTombstone, Stored};

/// The SCD1 decision table, first match wins; no match: [`STALE`]. An upsert inserts a new
/// key or updates a stored one it is newer than; a delete removes a stored key it is newer
/// than; a key's tombstone guards like a stored row, so a deleted key never comes back
/// through an older change; a delete leaves a tombstone unless it is older than the stored
/// row or the tombstone (then it changes nothing).
pub const ACTIONS: [Rule; 6] = [
    rule(
        &[(Delete, false), (Stored, false), (PastTombstone, true)],
        Action::Insert,
        false,
    ),
    rule(
        &[
            (Delete, false),
            (Stored, true),
            (Newer, true),
            (PastTombstone, true),
            (Differs, true),
        ],
        Action::Update,
        false,
    ),
    rule(
        &[
            (Delete, false),
            (Stored, true),
            (Newer, true),
            (PastTombstone, true),
        ],
        Action::Unchanged,
        false,
    ),
    rule(
        &[
            (Delete, true),
            (Stored, true),
            (Newer, true),
            (PastTombstone, true),
        ],
        Action::Delete,
        true,
    ),
    rule(
        &[(Delete, true), (Stored, true), (Newer, true)],
        Action::Delete,
        false,
    ),
    rule(
        &[(Delete, true), (Stored, false), (PastTombstone, true)],
        Action::Tombstone,
        true,
    ),
];

/// What a change no row of [`ACTIONS`] matches does.
pub const STALE: Outcome = Outcome {
    action: Action::Stale,
    tombstone: false,
};

/// The outcome of one change, given how to read each fact of it.
pub fn decide(fact: impl Fn(Fact) -> bool) -> Outcome {
    ACTIONS
        .iter()
        .find(|r| r.when.iter().all(|&(f, holds)| fact(f) == holds))
        .map_or(STALE, |r| r.then)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table spelled out case by case, as DESIGN §3.5–3.6 words it.
    fn by_hand(delete: bool, stored: bool, newer: bool, past: bool, differs: bool) -> Outcome {
        let o = |action, tombstone| Outcome { action, tombstone };
        match (delete, stored) {
            (false, false) if past => o(Action::Insert, false),
            (false, true) if newer && past && differs => o(Action::Update, false),
            (false, true) if newer && past => o(Action::Unchanged, false),
            (true, true) if newer => o(Action::Delete, past),
            (true, false) if past => o(Action::Tombstone, true),
            _ => STALE,
        }
    }

    #[test]
    fn the_table_says_what_the_design_says_for_every_case() {
        for bits in 0..32u8 {
            let f = |i: u8| bits & (1 << i) != 0;
            let got = decide(|fact| match fact {
                Delete => f(0),
                Stored => f(1),
                Newer => f(2),
                PastTombstone => f(3),
                Differs => f(4),
            });
            assert_eq!(
                got,
                by_hand(f(0), f(1), f(2), f(3), f(4)),
                "case {bits:05b}"
            );
        }
    }

    #[test]
    fn a_row_is_written_and_changed_for_the_actions_that_say_so() {
        let written: Vec<_> = Action::ALL.iter().filter(|a| a.writes_row()).collect();
        assert_eq!(
            written,
            [&Action::Insert, &Action::Update, &Action::Unchanged]
        );
        assert!(
            Action::ALL
                .iter()
                .all(|a| !a.changes_data() || a.writes_row())
        );
    }
}
