//! The SCD1 apply plan (DESIGN §3.5–3.6): the facts of each change (the newer-than guard of
//! [`crate::guard`] among them) run through the decision table of [`smelt_rules::scd1`].
//!
//! Input: the latest change per key (already cast to silver types) lined up with what
//! silver stores for the same key (NULLs where the key is new) and with the key's
//! tombstone, if it was deleted before. Output: which rows to write, which of those changed
//! data (so they get a new `_update_timestamp`), which stored rows to delete, which
//! tombstones to write, and the counts the run report shows.

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::compute::is_null;
use arrow::compute::kernels::boolean::{and, and_not, not, or};
use arrow::compute::kernels::zip::zip;

use smelt_rules::scd1::{self, Action, Fact};

use crate::guard::newer_than;
use crate::{CoreError, Result};

/// What one run does to silver, per deduplicated change.
#[derive(Debug, Clone)]
pub struct ApplyPlan {
    /// Rows to write (insert or update).
    pub write: BooleanArray,
    /// Rows whose data is new or differs from silver: inserted or updated.
    pub changed: BooleanArray,
    /// Deletes whose key silver holds with an older sequence: remove the stored row.
    pub remove: BooleanArray,
    /// Deletes newer than the stored row and the key's tombstone (where they exist): write
    /// a tombstone (key, sequence), so an older upsert arriving later cannot bring the key
    /// back.
    pub tombstone: BooleanArray,
    /// Counts for the report.
    pub counts: ApplyCounts,
}

/// Counts of an apply plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyCounts {
    /// Keys not in silver: inserted.
    pub inserted: usize,
    /// Keys in silver with a newer sequence and different data: updated.
    pub updated: usize,
    /// Keys in silver with a newer sequence and identical data: only the sequence and
    /// ingest time are refreshed; `_update_timestamp` is kept.
    pub unchanged: usize,
    /// Keys removed from silver by a delete.
    pub deleted: usize,
    /// Changes whose sequence is not newer than silver's or the tombstone's: skipped by
    /// the guard.
    pub stale: usize,
}

/// Inputs of [`plan_scd1`], all of the same length (one row per deduplicated change).
pub struct Scd1Input<'a> {
    /// True where silver already holds the key.
    pub matched: &'a BooleanArray,
    /// The change's sequence columns.
    pub new_sequence: &'a [ArrayRef],
    /// Silver's stored sequence columns for the key (any value where unmatched).
    pub stored_sequence: &'a [ArrayRef],
    /// The change's data columns (silver columns except keys and audit columns).
    pub new_data: &'a [ArrayRef],
    /// Silver's stored data columns, same order and types; `None` when they were not read
    /// (derived change data): every newer upsert of a stored key then counts as updated.
    pub stored_data: Option<&'a [ArrayRef]>,
    /// True where the change deletes its key; `None`: every change is an upsert.
    pub delete: Option<&'a BooleanArray>,
    /// The keys' tombstones: true where one exists, and its sequence columns.
    pub tombstone: Option<(&'a BooleanArray, &'a [ArrayRef])>,
}

/// Plans an SCD type 1 apply. An upsert inserts a new key, or updates a stored key whose
/// sequence is strictly smaller; a delete removes a stored key whose sequence is strictly
/// smaller. A key's tombstone guards like a stored row: an upsert not newer than the
/// tombstone is stale, so a deleted key never comes back through an older change. The
/// rest is stale.
pub fn plan_scd1(input: &Scd1Input<'_>) -> Result<ApplyPlan> {
    let n = input.matched.len();
    if input.new_sequence.len() != input.stored_sequence.len()
        || input
            .stored_data
            .is_some_and(|d| d.len() != input.new_data.len())
        || input
            .tombstone
            .is_some_and(|(_, seq)| seq.len() != input.new_sequence.len())
    {
        return Err(CoreError::Internal(
            "apply plan inputs differ in width".into(),
        ));
    }
    for (a, b) in input.new_sequence.iter().zip(input.stored_sequence).chain(
        input
            .new_data
            .iter()
            .zip(input.stored_data.unwrap_or_default()),
    ) {
        if a.len() != n || b.len() != n || a.data_type() != b.data_type() {
            return Err(CoreError::Internal(format!(
                "apply plan column mismatch: {} vs {}",
                a.data_type(),
                b.data_type()
            )));
        }
    }
    let matched = strip_nulls(input.matched);
    // Sequences are compared only where there is something stored to compare with.
    let newer = if matched.true_count() == 0 {
        BooleanArray::from(vec![false; n])
    } else {
        newer_than(input.new_sequence, input.stored_sequence, n)?
    };
    let delete = match input.delete {
        Some(d) => strip_nulls(d),
        None => BooleanArray::from(vec![false; n]),
    };
    // Newer than the tombstone, or no tombstone.
    let past_tombstone = match input.tombstone {
        Some((exists, _)) if exists.true_count() == 0 => BooleanArray::from(vec![true; n]),
        Some((exists, seq)) => {
            let exists = strip_nulls(exists);
            or(
                &not(&exists)?,
                &and(&exists, &newer_than(input.new_sequence, seq, n)?)?,
            )?
        }
        None => BooleanArray::from(vec![true; n]),
    };
    // Data is only compared where silver has the key (nothing to compare for inserts).
    let differs = match input.stored_data {
        _ if matched.true_count() == 0 => BooleanArray::from(vec![false; n]),
        Some(stored) => strip_nulls(&crate::columns::any_distinct(input.new_data, stored, n)?),
        None => BooleanArray::from(vec![true; n]),
    };
    let facts = Facts {
        delete: &delete,
        stored: &matched,
        newer: &strip_nulls(&newer),
        past_tombstone: &strip_nulls(&past_tombstone),
        differs: &differs,
    };
    let decided = facts.decide()?;
    let count = |b: &BooleanArray| b.true_count();
    let counts = ApplyCounts {
        inserted: count(decided.of(Action::Insert)),
        updated: count(decided.of(Action::Update)),
        unchanged: count(decided.of(Action::Unchanged)),
        deleted: count(decided.of(Action::Delete)),
        stale: count(decided.of(Action::Stale)),
    };
    let write = decided.any(|a| a.writes_row())?;
    let changed = decided.any(|a| a.changes_data())?;
    let remove = decided.of(Action::Delete).clone();
    let tombstone = decided.tombstone;
    Ok(ApplyPlan {
        write,
        changed,
        remove,
        tombstone,
        counts,
    })
}

/// The values an upsert leaves in each data column: the change's value, except where the
/// key is stored (`matched`) and the column is not updated (`updates[i]` false,
/// `column_list`) or, with `ignore_null_updates`, the change's value is NULL: there the
/// stored value stays.
pub fn merge_updates(
    matched: &BooleanArray,
    new_data: &[ArrayRef],
    stored_data: &[ArrayRef],
    updates: &[bool],
    ignore_null_updates: bool,
) -> Result<Vec<ArrayRef>> {
    if new_data.len() != stored_data.len() || new_data.len() != updates.len() {
        return Err(CoreError::Internal(
            "merge_updates inputs differ in width".into(),
        ));
    }
    let matched = strip_nulls(matched);
    if matched.true_count() == 0 {
        return Ok(new_data.to_vec());
    }
    new_data
        .iter()
        .zip(stored_data)
        .zip(updates)
        .map(|((new, stored), &update)| {
            let keep = if !update {
                matched.clone()
            } else if ignore_null_updates && new.null_count() > 0 {
                and(&matched, &is_null(new)?)?
            } else {
                return Ok(std::sync::Arc::clone(new));
            };
            Ok(zip(&keep, stored, new)?)
        })
        .collect()
}

/// The facts of [`smelt_rules::scd1`] for each deduplicated change, NULL-free.
struct Facts<'a> {
    delete: &'a BooleanArray,
    stored: &'a BooleanArray,
    newer: &'a BooleanArray,
    past_tombstone: &'a BooleanArray,
    differs: &'a BooleanArray,
}

/// Which changes take each action, and which write a tombstone.
struct Decided {
    actions: Vec<(Action, BooleanArray)>,
    tombstone: BooleanArray,
}

impl Decided {
    /// The changes that take `action`.
    fn of(&self, action: Action) -> &BooleanArray {
        let (_, mask) = self
            .actions
            .iter()
            .find(|(a, _)| *a == action)
            .expect("every action has a mask");
        mask
    }

    /// The changes whose action is one `which` picks.
    fn any(&self, which: impl Fn(Action) -> bool) -> Result<BooleanArray> {
        let n = self.tombstone.len();
        self.actions
            .iter()
            .filter(|(a, _)| which(*a))
            .try_fold(BooleanArray::from(vec![false; n]), |acc, (_, m)| {
                Ok(or(&acc, m)?)
            })
    }
}

impl Facts<'_> {
    fn get(&self, fact: Fact) -> &BooleanArray {
        match fact {
            Fact::Delete => self.delete,
            Fact::Stored => self.stored,
            Fact::Newer => self.newer,
            Fact::PastTombstone => self.past_tombstone,
            Fact::Differs => self.differs,
        }
    }

    /// The decision table of [`smelt_rules::scd1::ACTIONS`] over every change at once:
    /// each rule takes the changes no earlier rule took and that meet its conditions.
    fn decide(&self) -> Result<Decided> {
        let n = self.delete.len();
        let mut left = BooleanArray::from(vec![true; n]);
        let mut actions: Vec<(Action, BooleanArray)> = Action::ALL
            .iter()
            .map(|&a| (a, BooleanArray::from(vec![false; n])))
            .collect();
        let mut tombstone = BooleanArray::from(vec![false; n]);
        for rule in scd1::ACTIONS.iter() {
            let mut taken = left.clone();
            for &(fact, holds) in rule.when {
                taken = match holds {
                    true => and(&taken, self.get(fact))?,
                    false => and_not(&taken, self.get(fact))?,
                };
            }
            left = and_not(&left, &taken)?;
            let (_, mask) = actions
                .iter_mut()
                .find(|(a, _)| *a == rule.then.action)
                .expect("every action has a mask");
            *mask = or(mask, &taken)?;
            if rule.then.tombstone {
                tombstone = or(&tombstone, &taken)?;
            }
        }
        let (_, stale) = actions
            .iter_mut()
            .find(|(a, _)| *a == scd1::STALE.action)
            .expect("every action has a mask");
        *stale = or(stale, &left)?;
        Ok(Decided { actions, tombstone })
    }
}

fn strip_nulls(b: &BooleanArray) -> BooleanArray {
    if b.null_count() == 0 {
        return b.clone();
    }
    BooleanArray::from_iter(b.iter().map(|v| Some(v.unwrap_or(false))))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};

    use super::*;

    #[test]
    fn classifies_insert_update_unchanged_stale() {
        let matched = BooleanArray::from(vec![false, true, true, true, true]);
        let new_seq: ArrayRef = Arc::new(Int64Array::from(vec![1, 5, 5, 3, 4]));
        let old_seq: ArrayRef = Arc::new(Int64Array::from(vec![
            None,
            Some(4),
            Some(4),
            Some(3),
            None,
        ]));
        let new_val: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            Some("b"),
            Some("c"),
            Some("d"),
            None,
        ]));
        let old_val: ArrayRef = Arc::new(StringArray::from(vec![
            None,
            Some("x"),
            Some("c"),
            Some("z"),
            None,
        ]));
        let plan = plan_scd1(&Scd1Input {
            matched: &matched,
            new_sequence: &[Arc::clone(&new_seq)],
            stored_sequence: &[Arc::clone(&old_seq)],
            new_data: &[Arc::clone(&new_val)],
            stored_data: Some(&[old_val]),
            delete: None,
            tombstone: None,
        })
        .unwrap();
        assert_eq!(
            plan.counts,
            ApplyCounts {
                inserted: 1,
                updated: 1,
                unchanged: 2,
                deleted: 0,
                stale: 1
            }
        );
        assert_eq!(
            plan.write,
            BooleanArray::from(vec![true, true, true, false, true])
        );
        assert_eq!(
            plan.changed,
            BooleanArray::from(vec![true, true, false, false, false])
        );
        // Stored data not read: the same rows written, the unchanged counted as updated.
        let unread = plan_scd1(&Scd1Input {
            matched: &matched,
            new_sequence: &[new_seq],
            stored_sequence: &[old_seq],
            new_data: &[new_val],
            stored_data: None,
            delete: None,
            tombstone: None,
        })
        .unwrap();
        assert_eq!(unread.write, plan.write);
        assert_eq!((unread.counts.updated, unread.counts.unchanged), (3, 0));
    }

    fn seq(values: Vec<Option<i64>>) -> ArrayRef {
        Arc::new(Int64Array::from(values))
    }

    #[test]
    fn deletes_remove_newer_and_leave_tombstones_that_guard_upserts() {
        // 0: delete of a stored key (newer)       → remove + tombstone
        // 1: delete of a stored key (older)       → stale
        // 2: delete of an unknown key             → tombstone only
        // 3: upsert older than the key's tombstone → stale (no resurrection)
        // 4: upsert newer than the key's tombstone → insert
        // 5: delete equal to its tombstone (replay) of a stored, older row → remove only
        let matched = BooleanArray::from(vec![true, true, false, false, false, true]);
        let delete = BooleanArray::from(vec![true, true, true, false, false, true]);
        let new_seq = seq(vec![Some(5), Some(2), Some(1), Some(3), Some(9), Some(6)]);
        let stored_seq = seq(vec![Some(4), Some(3), None, None, None, Some(5)]);
        let tomb = BooleanArray::from(vec![false, false, false, true, true, true]);
        let tomb_seq = seq(vec![None, None, None, Some(4), Some(4), Some(6)]);
        let data: ArrayRef = Arc::new(StringArray::from(vec![Some("v"); 6]));
        let plan = plan_scd1(&Scd1Input {
            matched: &matched,
            new_sequence: &[new_seq],
            stored_sequence: &[stored_seq],
            new_data: &[Arc::clone(&data)],
            stored_data: Some(&[data]),
            delete: Some(&delete),
            tombstone: Some((&tomb, &[tomb_seq])),
        })
        .unwrap();
        assert_eq!(
            plan.remove,
            BooleanArray::from(vec![true, false, false, false, false, true])
        );
        assert_eq!(
            plan.tombstone,
            BooleanArray::from(vec![true, false, true, false, false, false])
        );
        assert_eq!(
            plan.write,
            BooleanArray::from(vec![false, false, false, false, true, false])
        );
        assert_eq!(
            plan.counts,
            ApplyCounts {
                inserted: 1,
                updated: 0,
                unchanged: 0,
                deleted: 2,
                stale: 2
            }
        );
    }

    #[test]
    fn partial_updates_keep_stored_values() {
        let matched = BooleanArray::from(vec![true, true, false]);
        let new_a: ArrayRef = Arc::new(StringArray::from(vec![None, Some("a2"), None]));
        let old_a: ArrayRef = Arc::new(StringArray::from(vec![Some("a0"), Some("a1"), None]));
        let new_b: ArrayRef = Arc::new(StringArray::from(vec![Some("b9"), Some("b9"), Some("b9")]));
        let old_b: ArrayRef = Arc::new(StringArray::from(vec![Some("b0"), Some("b1"), None]));
        let news = [new_a, new_b];
        let olds = [old_a, old_b];
        let text = |a: &ArrayRef| -> Vec<Option<String>> {
            a.as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect()
        };
        // ignore_null_updates: NULL keeps the stored value where the key is stored.
        let merged = merge_updates(&matched, &news, &olds, &[true, true], true).unwrap();
        assert_eq!(
            text(&merged[0]),
            vec![Some("a0".into()), Some("a2".into()), None]
        );
        assert_eq!(text(&merged[1]), vec![Some("b9".into()); 3]);
        // column_list: [a]: b keeps its stored value on updates, takes the new on inserts.
        let merged = merge_updates(&matched, &news, &olds, &[true, false], false).unwrap();
        assert_eq!(text(&merged[0]), vec![None, Some("a2".into()), None]);
        assert_eq!(
            text(&merged[1]),
            vec![Some("b0".into()), Some("b1".into()), Some("b9".into())]
        );
    }
}
