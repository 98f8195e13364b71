//! The latest change per key (DESIGN §3.4).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::compute::SortOptions;
use arrow::compute::take;
use arrow::row::{RowConverter, Rows, SortField};

use crate::{CoreError, Result};

/// Row-encodes columns so that byte order is value order, NULLs first (lowest).
pub(crate) fn encode(columns: &[ArrayRef]) -> Result<Option<Rows>> {
    if columns.is_empty() {
        return Ok(None);
    }
    let converter = RowConverter::new(
        columns
            .iter()
            .map(|c| {
                SortField::new_with_options(
                    c.data_type().clone(),
                    SortOptions {
                        descending: false,
                        nulls_first: true,
                    },
                )
            })
            .collect(),
    )?;
    Ok(Some(converter.convert_columns(columns)?))
}

/// Picks, for every distinct key, the row of its latest change.
///
/// * `keys`: the key columns; keys compare NULL-safely (NULL equals NULL), column by column.
/// * `sequence`: the columns that order changes of one key, compared in order; a NULL
///   sequence is older than any value.
///
/// Ties on the whole sequence go to the later row, so callers pass rows in input order
/// (commit version, file, row). Returns the winning row numbers, ascending.
pub fn latest_per_key(keys: &[ArrayRef], sequence: &[ArrayRef]) -> Result<UInt32Array> {
    Ok(latest_per_key_with_ties(keys, sequence)?.winners)
}

/// The latest change per key, and the changes tied with it.
#[derive(Debug, Clone)]
pub struct Latest {
    /// The winning row of every key, ascending (see [`latest_per_key`]).
    pub winners: UInt32Array,
    /// `(row, winner)` for every other row of a key whose sequence equals the winner's.
    pub ties: Vec<(u32, u32)>,
}

/// [`latest_per_key`], also noting the rows tied with their key's winner (same whole
/// sequence). Found during the same pass, so it costs nothing when nothing ties.
pub fn latest_per_key_with_ties(keys: &[ArrayRef], sequence: &[ArrayRef]) -> Result<Latest> {
    let Some(first) = keys.first() else {
        return Err(CoreError::Internal(
            "latest_per_key needs at least one key column".into(),
        ));
    };
    let n = first.len();
    if keys.iter().chain(sequence).any(|c| c.len() != n) {
        return Err(CoreError::Internal(
            "key and sequence columns differ in length".into(),
        ));
    }
    let key_rows = encode(keys)?.expect("keys is not empty");
    let seq_rows = encode(sequence)?;
    let mut best: HashMap<arrow::row::Row<'_>, u32, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(n.min(1 << 22), foldhash::fast::RandomState::default());
    // (earlier, later) rows whose sequences were equal when the later one arrived.
    let mut equal: Vec<(u32, u32)> = Vec::new();
    for i in 0..n {
        match best.entry(key_rows.row(i)) {
            Entry::Vacant(e) => {
                e.insert(i as u32);
            }
            Entry::Occupied(mut e) => {
                let prev = *e.get() as usize;
                let later_wins = match &seq_rows {
                    Some(seq) => match seq.row(i).cmp(&seq.row(prev)) {
                        std::cmp::Ordering::Greater => true,
                        std::cmp::Ordering::Equal => {
                            equal.push((prev as u32, i as u32));
                            true
                        }
                        std::cmp::Ordering::Less => false,
                    },
                    None => {
                        equal.push((prev as u32, i as u32));
                        true
                    }
                };
                if later_wins {
                    e.insert(i as u32);
                }
            }
        }
    }
    // Keep the ties at each key's final sequence, as (row, winner).
    let mut ties = Vec::new();
    for (earlier, later) in equal {
        let winner = best[&key_rows.row(later as usize)];
        let at_winner = match &seq_rows {
            Some(seq) => seq.row(later as usize) == seq.row(winner as usize),
            None => true,
        };
        if at_winner {
            for row in [earlier, later] {
                if row != winner {
                    ties.push((row, winner));
                }
            }
        }
    }
    ties.sort_unstable();
    ties.dedup();
    let mut winners: Vec<u32> = best.into_values().collect();
    winners.sort_unstable();
    Ok(Latest {
        winners: UInt32Array::from(winners),
        ties,
    })
}

/// Equal-sequence conflicts among the changes of one run (see [`sequence_conflicts`]).
#[derive(Debug, Clone)]
pub struct SequenceConflicts {
    /// Per winner: another change of its key has the same sequence and different data.
    pub conflicted: BooleanArray,
    /// The input rows tied with a conflicting winner, the winner included, ascending.
    pub rows: UInt32Array,
}

/// Finds the keys whose latest changes conflict: two or more changes with the key's
/// greatest sequence whose `data` differ (NULL-safely). `latest` comes from
/// [`latest_per_key_with_ties`]. Without a conflict the tie-break (the later row) is
/// harmless: the tied changes carry the same data.
pub fn sequence_conflicts(data: &[ArrayRef], latest: &Latest) -> Result<SequenceConflicts> {
    let winners = &latest.winners;
    let w = winners.len();
    let none = || SequenceConflicts {
        conflicted: BooleanArray::from(vec![false; w]),
        rows: UInt32Array::from(Vec::<u32>::new()),
    };
    if latest.ties.is_empty() {
        return Ok(none());
    }
    let tied_rows = UInt32Array::from_iter_values(latest.ties.iter().map(|t| t.0));
    let tied_winners = UInt32Array::from_iter_values(latest.ties.iter().map(|t| t.1));
    let mut differs = BooleanArray::from(vec![false; tied_rows.len()]);
    for c in data {
        let a = take(c.as_ref(), &tied_rows, None)?;
        let b = take(c.as_ref(), &tied_winners, None)?;
        differs = arrow::compute::or(&differs, &arrow::compute::kernels::cmp::distinct(&a, &b)?)?;
    }
    if differs.true_count() == 0 {
        return Ok(none());
    }
    let position = |winner: u32| {
        winners
            .values()
            .binary_search(&winner)
            .expect("a tie's winner is a winner")
    };
    let mut conflicted = vec![false; w];
    for (i, d) in differs.iter().enumerate() {
        if d == Some(true) {
            conflicted[position(tied_winners.value(i))] = true;
        }
    }
    let mut rows: Vec<u32> = latest
        .ties
        .iter()
        .filter(|t| conflicted[position(t.1)])
        .flat_map(|t| [t.0, t.1])
        .collect();
    rows.sort_unstable();
    rows.dedup();
    Ok(SequenceConflicts {
        conflicted: BooleanArray::from(conflicted),
        rows: UInt32Array::from(rows),
    })
}

/// For every row of `keys`, the row of `candidates` with an equal key (NULL-safe), or
/// NULL. Column types must match. Used to line stored silver rows up with new changes.
pub fn positions_of(keys: &[ArrayRef], candidates: &[ArrayRef]) -> Result<UInt32Array> {
    KeyIndex::new(candidates)?.positions(keys)
}

/// For every row of `keys`, a partition in `0..partitions` chosen by a hash of its key
/// (NULL-safe: NULL keys share a partition). All changes of one key land in the same
/// partition, so partitions can be deduplicated and applied independently. Stable within
/// a process.
pub fn partition_of(keys: &[ArrayRef], partitions: usize) -> Result<UInt32Array> {
    let rows = encode(keys)?
        .ok_or_else(|| CoreError::Internal("partition_of needs key columns".into()))?;
    let state = foldhash::fast::FixedState::with_seed(0x5E17);
    let n = partitions.max(1) as u64;
    Ok(UInt32Array::from_iter_values((0..rows.num_rows()).map(
        |i| (state.hash_one(rows.row(i).as_ref()) % n) as u32,
    )))
}

/// A hash index over the keys of a set of rows (NULL-safe: NULL equals NULL), to probe
/// other rows against, batch by batch. Built once per write, it finds which rows of a
/// stored file carry one of the keys being written. It holds the keys' own arrays and a
/// table of row numbers into them (no copy per key), so the table stays small enough to
/// stay in cache while millions of stored keys are probed.
pub struct KeyIndex {
    inner: Index,
    rows: RowTable,
}

enum Index {
    /// One string column (the common case): values hashed as they are; the last NULL row.
    Text {
        keys: arrow::array::StringArray,
        null: Option<u32>,
    },
    /// Anything else: row-encoded keys.
    Rows { converter: RowConverter, keys: Rows },
}

impl Index {
    /// The bytes row `i` is indexed by (`None`: a NULL text key).
    fn key(&self, i: usize) -> Option<&[u8]> {
        match self {
            Index::Text { keys, .. } => keys.is_valid(i).then(|| keys.value(i).as_bytes()),
            Index::Rows { keys, .. } => Some(keys.row(i).data()),
        }
    }
}

/// Row numbers by the hash of their key's bytes.
struct RowTable {
    table: hashbrown::HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl RowTable {
    /// Indexes rows `0..n` of `index` (a repeated key: its last row).
    fn build(index: &Index, n: usize) -> Self {
        let hasher = foldhash::fast::RandomState::default();
        let mut table = hashbrown::HashTable::with_capacity(n);
        let rehash = |&j: &u32| hasher.hash_one(index.key(j as usize).unwrap_or_default());
        for i in 0..n {
            let Some(key) = index.key(i) else { continue };
            let same = |&j: &u32| index.key(j as usize) == Some(key);
            match table.entry(hasher.hash_one(key), same, rehash) {
                hashbrown::hash_table::Entry::Occupied(mut e) => *e.get_mut() = i as u32,
                hashbrown::hash_table::Entry::Vacant(e) => {
                    e.insert(i as u32);
                }
            }
        }
        Self { table, hasher }
    }

    /// The row of `index` whose key is `key`.
    fn get(&self, index: &Index, key: &[u8]) -> Option<u32> {
        self.table
            .find(self.hasher.hash_one(key), |&j| {
                index.key(j as usize) == Some(key)
            })
            .copied()
    }
}

impl std::fmt::Debug for KeyIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyIndex")
            .field("keys", &self.len())
            .finish()
    }
}

/// `column` as a `Utf8` array, if it is text.
fn as_text(column: &ArrayRef) -> Result<Option<arrow::array::StringArray>> {
    use arrow::array::AsArray;
    use arrow::datatypes::DataType;
    Ok(match column.data_type() {
        DataType::Utf8 => Some(column.as_string::<i32>().clone()),
        DataType::LargeUtf8 | DataType::Utf8View => Some(
            arrow::compute::cast(column, &DataType::Utf8)?
                .as_string::<i32>()
                .clone(),
        ),
        _ => None,
    })
}

impl KeyIndex {
    /// Indexes the rows of `keys` (one array per key column). When a key repeats, the
    /// last row holding it is indexed.
    pub fn new(keys: &[ArrayRef]) -> Result<Self> {
        let Some(first) = keys.first() else {
            return Err(CoreError::Internal("a key index needs key columns".into()));
        };
        let single_text = if keys.len() == 1 {
            as_text(first)?
        } else {
            None
        };
        let n = first.len();
        let inner = match single_text {
            Some(text) => {
                let null = (text.null_count() > 0)
                    .then(|| (0..text.len()).rev().find(|&i| text.is_null(i)))
                    .flatten();
                Index::Text {
                    keys: text,
                    null: null.map(|i| i as u32),
                }
            }
            None => {
                let converter = RowConverter::new(
                    keys.iter()
                        .map(|c| SortField::new(c.data_type().clone()))
                        .collect(),
                )?;
                let keys = converter.convert_columns(keys)?;
                Index::Rows { converter, keys }
            }
        };
        let rows = RowTable::build(&inner, n);
        Ok(Self { inner, rows })
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        let null = match &self.inner {
            Index::Text { null, .. } => null.is_some(),
            Index::Rows { .. } => false,
        };
        self.rows.table.len() + usize::from(null)
    }

    /// True when no key is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// For every row of `probe` (same key columns and types as the index), the indexed
    /// row with an equal key, or NULL.
    pub fn positions(&self, probe: &[ArrayRef]) -> Result<UInt32Array> {
        match &self.inner {
            Index::Text { null, .. } => {
                let [column] = probe else {
                    return Err(CoreError::Internal(
                        "probe has the wrong key columns".into(),
                    ));
                };
                let text = as_text(column)?.ok_or_else(|| {
                    CoreError::Internal("probe key is not text like the index".into())
                })?;
                Ok(UInt32Array::from_iter(text.iter().map(|v| match v {
                    Some(v) => self.rows.get(&self.inner, v.as_bytes()),
                    None => *null,
                })))
            }
            Index::Rows { converter, .. } => {
                let rows = converter.convert_columns(probe)?;
                Ok(UInt32Array::from_iter(
                    (0..rows.num_rows()).map(|i| self.rows.get(&self.inner, rows.row(i).as_ref())),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};

    use super::*;

    fn s(v: Vec<Option<&str>>) -> ArrayRef {
        Arc::new(StringArray::from(v))
    }
    fn i(v: Vec<Option<i64>>) -> ArrayRef {
        Arc::new(Int64Array::from(v))
    }

    #[test]
    fn highest_sequence_wins_and_ties_go_to_the_later_row() {
        let keys = s(vec![Some("a"), Some("a"), Some("b"), Some("a"), Some("b")]);
        let seq = i(vec![Some(5), Some(9), Some(1), Some(9), Some(0)]);
        let w = latest_per_key(&[keys], &[seq]).unwrap();
        assert_eq!(w.values(), &[2, 3]);
    }

    #[test]
    fn null_keys_are_one_key_and_null_sequences_lose() {
        let k1 = s(vec![None, None, Some("x"), Some("x")]);
        let k2 = i(vec![Some(1), Some(1), None, None]);
        let seq = i(vec![Some(3), None, None, Some(0)]);
        let w = latest_per_key(&[k1, k2], &[seq]).unwrap();
        assert_eq!(w.values(), &[0, 3]);
    }

    #[test]
    fn positions_match_null_safely() {
        let keys = s(vec![Some("b"), None, Some("z")]);
        let found = s(vec![None, Some("a"), Some("b")]);
        let p = positions_of(&[keys], &[found]).unwrap();
        assert_eq!(p, UInt32Array::from(vec![Some(2), Some(0), None]));
    }

    #[test]
    fn partitions_keep_every_change_of_a_key_together() {
        let keys = s(vec![Some("a"), None, Some("b"), Some("a"), None, Some("c")]);
        let p = partition_of(&[keys], 4).unwrap();
        assert!(p.values().iter().all(|&p| p < 4));
        assert_eq!(p.value(0), p.value(3));
        assert_eq!(p.value(1), p.value(4));
        let all_one = partition_of(&[s(vec![Some("x"), Some("y")])], 1).unwrap();
        assert_eq!(all_one.values(), &[0, 0]);
    }

    #[test]
    fn key_index_probes_composite_keys_batch_by_batch() {
        let index = KeyIndex::new(&[
            s(vec![Some("a"), None, Some("a")]),
            i(vec![Some(1), Some(2), None]),
        ])
        .unwrap();
        assert_eq!(index.len(), 3);
        let p = index
            .positions(&[
                s(vec![None, Some("a"), Some("a")]),
                i(vec![Some(2), Some(2), None]),
            ])
            .unwrap();
        assert_eq!(p, UInt32Array::from(vec![Some(1), None, Some(2)]));
        let p = index
            .positions(&[s(vec![Some("a")]), i(vec![Some(1)])])
            .unwrap();
        assert_eq!(p, UInt32Array::from(vec![Some(0)]));
    }

    proptest::proptest! {
        /// The index agrees with a map of each key to its last row, for text keys (NULL
        /// and empty among them) and composite keys.
        #[test]
        fn key_index_finds_the_last_row_of_each_key(
            keys in proptest::collection::vec(
                (proptest::option::of("[ab]{0,2}"), proptest::option::of(0i64..3)),
                0..40,
            ),
            probe in proptest::collection::vec(
                (proptest::option::of("[ab]{0,2}"), proptest::option::of(0i64..3)),
                0..40,
            ),
        ) {
            let text = |v: &[(Option<String>, Option<i64>)]| -> ArrayRef {
                Arc::new(StringArray::from_iter(v.iter().map(|k| k.0.clone())))
            };
            let int = |v: &[(Option<String>, Option<i64>)]| -> ArrayRef {
                Arc::new(Int64Array::from_iter(v.iter().map(|k| k.1)))
            };
            let mut last = std::collections::HashMap::new();
            let mut last_text = std::collections::HashMap::new();
            for (i, k) in keys.iter().enumerate() {
                last.insert(k.clone(), i as u32);
                last_text.insert(k.0.clone(), i as u32);
            }
            let index = KeyIndex::new(&[text(&keys)]).unwrap();
            proptest::prop_assert_eq!(index.len(), last_text.len());
            let got = index.positions(&[text(&probe)]).unwrap();
            let want: UInt32Array = probe.iter().map(|k| last_text.get(&k.0).copied()).collect();
            proptest::prop_assert_eq!(got, want);
            let index = KeyIndex::new(&[text(&keys), int(&keys)]).unwrap();
            proptest::prop_assert_eq!(index.len(), last.len());
            let got = index.positions(&[text(&probe), int(&probe)]).unwrap();
            let want: UInt32Array = probe.iter().map(|k| last.get(k).copied()).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn key_index_on_one_text_column_matches_nulls_and_repeats() {
        let index = KeyIndex::new(&[s(vec![Some("a"), None, Some("b"), Some("a")])]).unwrap();
        assert_eq!(index.len(), 3);
        let probe: ArrayRef = Arc::new(arrow::array::StringViewArray::from(vec![
            Some("b"),
            None,
            Some("a"),
            Some("z"),
        ]));
        let p = index.positions(&[probe]).unwrap();
        assert_eq!(p, UInt32Array::from(vec![Some(2), Some(1), Some(3), None]));
    }

    #[test]
    fn no_sequence_means_last_row_wins() {
        let keys = s(vec![Some("a"), Some("a")]);
        assert_eq!(latest_per_key(&[keys], &[]).unwrap().values(), &[1]);
    }

    #[test]
    fn equal_sequences_with_different_data_conflict() {
        // key a: seq 2 twice, different data → conflict (rows 1, 2); row 0 is older.
        // key b: seq 5 twice, same data → no conflict.
        // key c: one change.
        let keys: ArrayRef = Arc::new(StringArray::from(vec!["a", "a", "a", "b", "b", "c"]));
        let seq: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 2, 5, 5, 1]));
        let data: ArrayRef = Arc::new(StringArray::from(vec![
            Some("x"),
            Some("y"),
            Some("z"),
            None,
            None,
            Some("q"),
        ]));
        let latest = latest_per_key_with_ties(&[keys], &[seq]).unwrap();
        assert_eq!(latest.winners.values().to_vec(), vec![2, 4, 5]);
        assert_eq!(
            latest.ties,
            vec![(1, 2), (3, 4)],
            "row 0 is older, not tied"
        );
        let c = sequence_conflicts(std::slice::from_ref(&data), &latest).unwrap();
        assert_eq!(c.conflicted, BooleanArray::from(vec![true, false, false]));
        assert_eq!(c.rows.values().to_vec(), vec![1, 2]);
    }
}
