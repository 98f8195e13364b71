//! Skipping files in the guard's lookup: a file whose key statistics in the log (the least
//! and greatest value of the first key column) leave none of the keys looked up between them
//! is not probed. This pays when the keys written are clustered (new Ids above every stored
//! one, recent Ids changing): those files are never read. When the keys are spread over the
//! whole table every file's range holds some, nothing is skipped, and the cost is one sort of
//! the keys.

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, Rows, SortField};
use deltalake::datafusion::common::Column;
use deltalake::datafusion::physical_optimizer::pruning::PruningStatistics;
use deltalake::table::state::DeltaTableState;

use crate::error::Result;

/// Strings in statistics may be cut to this many UTF-16 code units (Spark and Databricks
/// cut at 32), so a greatest value this long is no bound.
const CUT_STRINGS_AT: usize = 32;

/// Whether a greatest string value may have been cut: as long as the cut, or ending in the
/// character a writer appends to a cut value (U+FFFD by older Delta writers, U+10FFFF).
fn may_be_cut(greatest: &str) -> bool {
    greatest.encode_utf16().count() >= CUT_STRINGS_AT
        || greatest.ends_with(['\u{FFFD}', '\u{10FFFF}'])
}

/// Per file of `state` (log order, as `active_files` lists them), whether it may hold one of
/// `keys`, the values of key column `column`. `None` when the statistics cannot say: a type
/// whose bounds smelt does not trust (timestamps are cut to milliseconds), or no statistics.
pub(super) fn files_to_probe(
    state: &DeltaTableState,
    column: &str,
    keys: &ArrayRef,
) -> Result<Option<Vec<bool>>> {
    // A NULL key matches stored NULL keys, which no least/greatest value bounds.
    if keys.null_count() > 0 {
        return Ok(None);
    }
    let log = state.log_data();
    let column = Column::from_name(column);
    let (Some(least), Some(greatest)) = (log.min_values(&column), log.max_values(&column)) else {
        return Ok(None);
    };
    // A type the row format or the cast cannot take: every file is probed.
    Ok(may_hold(keys, &least, &greatest, SAMPLE).unwrap_or(None))
}

/// Keys sorted first: a file with one of them in its range is probed without sorting every
/// key. Keys spread over the table put one in every file's range, and the full sort
/// (a fifth of a 200,000-key lookup's time before the probes) is skipped.
const SAMPLE: usize = 4096;

/// Whether each file (row `i` of `least`/`greatest`, NULL where unknown) may hold one of
/// `keys`: some key lies between its least and greatest value. Decided first on about
/// `sample` of the keys, then on all of them for the files no sampled key is in.
fn may_hold(
    keys: &ArrayRef,
    least: &ArrayRef,
    greatest: &ArrayRef,
    sample: usize,
) -> Result<Option<Vec<bool>>> {
    let ty = least.data_type();
    let strings = match ty {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        t if t.is_integer() || matches!(t, DataType::Date32 | DataType::Date64) => false,
        _ => return Ok(None),
    };
    if greatest.data_type() != ty || least.len() != greatest.len() {
        return Ok(None);
    }
    let keys = if keys.data_type() == ty {
        keys.clone()
    } else {
        arrow::compute::cast(keys, ty)?
    };
    let converter = RowConverter::new(vec![SortField::new(ty.clone())])?;
    let stored = converter.convert_columns(&[keys])?;
    let lows = converter.convert_columns(std::slice::from_ref(least))?;
    let highs = converter.convert_columns(std::slice::from_ref(greatest))?;
    let cut = |i: usize| {
        strings
            && arrow::compute::cast(&greatest.slice(i, 1), &DataType::Utf8)
                .ok()
                .and_then(|s| {
                    s.as_any()
                        .downcast_ref::<arrow::array::StringArray>()
                        .map(|s| may_be_cut(s.value(0)))
                })
                .unwrap_or(true)
    };
    let holds = |sorted: &[arrow::row::Row<'_>], i: usize| {
        let first = if least.is_null(i) {
            0
        } else {
            sorted.partition_point(|k| *k < lows.row(i))
        };
        sorted
            .get(first)
            .is_some_and(|k| greatest.is_null(i) || cut(i) || *k <= highs.row(i))
    };
    let step = stored.num_rows().div_ceil(sample.max(1)).max(1);
    let mut sampled: Vec<_> = stored.iter().step_by(step).collect();
    sampled.sort_unstable();
    let mut out: Vec<bool> = (0..least.len()).map(|i| holds(&sampled, i)).collect();
    if step > 1 && out.contains(&false) {
        let mut sorted: Vec<_> = stored.iter().collect();
        sorted.sort_unstable();
        for (i, probe) in out.iter_mut().enumerate() {
            *probe = *probe || holds(&sorted, i);
        }
    }
    Ok(Some(out))
}

/// The key ranges (least and greatest value of the first key column) of a table's files,
/// converted once, to ask of any group of them whether they overlap.
pub(super) struct KeyRanges {
    lows: Rows,
    highs: Rows,
    /// Per file (log order, as `ActiveFile::index`): whether it has both bounds.
    bounded: Vec<bool>,
}

impl KeyRanges {
    /// The ranges of `state`'s files in key column `column`; `None` when the column's type
    /// is not one the lookup skips files by, or its statistics cannot be read (clustering
    /// would not help the lookup).
    pub(super) fn of(state: &DeltaTableState, column: &str) -> Result<Option<Self>> {
        let log = state.log_data();
        let column = Column::from_name(column);
        let (Some(least), Some(greatest)) = (log.min_values(&column), log.max_values(&column))
        else {
            return Ok(None);
        };
        Self::new(&least, &greatest)
    }

    fn new(least: &ArrayRef, greatest: &ArrayRef) -> Result<Option<Self>> {
        let ty = least.data_type();
        let skippable = matches!(
            ty,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) || ty.is_integer()
            || matches!(ty, DataType::Date32 | DataType::Date64);
        if !skippable || greatest.data_type() != ty || least.len() != greatest.len() {
            return Ok(None);
        }
        let converter = RowConverter::new(vec![SortField::new(ty.clone())])?;
        Ok(Some(Self {
            lows: converter.convert_columns(std::slice::from_ref(least))?,
            highs: converter.convert_columns(std::slice::from_ref(greatest))?,
            bounded: (0..least.len())
                .map(|i| !least.is_null(i) && !greatest.is_null(i))
                .collect(),
        }))
    }

    /// Whether the ranges of `files` (places in the log's file list) overlap: ordered by
    /// least value, some file's greatest lies above the next one's least. A file without
    /// both bounds overlaps every other. Equal bounds do not overlap: a composite key's
    /// first column may span two files written in key order.
    pub(super) fn overlap(&self, files: &[usize]) -> bool {
        if files
            .iter()
            .any(|&i| !self.bounded.get(i).copied().unwrap_or(false))
        {
            return files.len() > 1;
        }
        let mut ranges: Vec<_> = files
            .iter()
            .map(|&i| (self.lows.row(i), self.highs.row(i)))
            .collect();
        ranges.sort_unstable();
        ranges.windows(2).any(|w| w[0].1 > w[1].0)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray, TimestampMicrosecondArray};
    use proptest::prelude::*;

    use super::*;

    fn ints(v: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(v.to_vec()))
    }

    #[test]
    fn a_file_is_probed_when_a_key_lies_in_its_range() {
        let keys = ints(&[Some(50), Some(7), Some(200)]);
        let least = ints(&[Some(0), Some(10), Some(60), None, Some(201), Some(8)]);
        let greatest = ints(&[Some(9), Some(49), Some(200), Some(5), None, Some(6)]);
        let got = may_hold(&keys, &least, &greatest, SAMPLE).unwrap().unwrap();
        // [0,9] holds 7; [10,49] none; [60,200] holds 200; [?,5] none; [201,?] none;
        // [8,6] (no row can be in it) none.
        assert_eq!(got, vec![true, false, true, false, false, false]);
    }

    #[test]
    fn a_string_bound_that_may_be_cut_is_no_bound() {
        let long = "k".repeat(CUT_STRINGS_AT);
        let keys: ArrayRef = Arc::new(StringArray::from(vec![format!("{long}zzz")]));
        let least: ArrayRef = Arc::new(StringArray::from(vec!["a", "a"]));
        let greatest: ArrayRef = Arc::new(StringArray::from(vec![long.as_str(), "b"]));
        let got = may_hold(&keys, &least, &greatest, SAMPLE).unwrap().unwrap();
        assert_eq!(got, vec![true, false]);
    }

    #[test]
    fn a_string_cut_in_utf16_units_or_marked_is_no_bound() {
        // 16 emoji: 16 chars, 32 UTF-16 code units.
        assert!(may_be_cut(&"😀".repeat(16)));
        assert!(may_be_cut("abc\u{FFFD}"));
        assert!(!may_be_cut("abc"));
    }

    #[test]
    fn timestamps_are_not_trusted() {
        let ts: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![1_001]));
        assert!(may_hold(&ts, &ts, &ts, SAMPLE).unwrap().is_none());
    }

    /// Whether `files` of the table with these bounds overlap (`None`: not known).
    fn overlap(least: &ArrayRef, greatest: &ArrayRef, files: &[usize]) -> Result<Option<bool>> {
        Ok(KeyRanges::new(least, greatest)?.map(|r| r.overlap(files)))
    }

    #[test]
    fn key_ranges_overlap_when_a_greatest_passes_the_next_least() {
        let least = ints(&[Some(0), Some(10), Some(5), None, Some(20)]);
        let greatest = ints(&[Some(9), Some(19), Some(12), Some(3), Some(20)]);
        // [0,9] [10,19] [20,20]: apart.
        assert_eq!(overlap(&least, &greatest, &[4, 1, 0]).unwrap(), Some(false));
        // [5,12] overlaps [0,9] and [10,19].
        assert_eq!(overlap(&least, &greatest, &[0, 2]).unwrap(), Some(true));
        // Equal bounds: a composite key's first column spanning two files.
        let least2 = ints(&[Some(0), Some(9)]);
        let greatest2 = ints(&[Some(9), Some(15)]);
        assert_eq!(overlap(&least2, &greatest2, &[0, 1]).unwrap(), Some(false));
        // A file without a least value overlaps the others, not itself.
        assert_eq!(overlap(&least, &greatest, &[3, 4]).unwrap(), Some(true));
        assert_eq!(overlap(&least, &greatest, &[3]).unwrap(), Some(false));
        // Timestamps are not skipped by.
        let ts: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![1_001, 2_000]));
        assert_eq!(overlap(&ts, &ts, &[0, 1]).unwrap(), None);
    }

    proptest! {
        /// Against a model: a file may hold a key exactly when some key is in its range.
        #[test]
        fn matches_a_scan_of_every_key(
            keys in proptest::collection::vec(-50i64..50, 0..40),
            files in proptest::collection::vec(
                (proptest::option::of(-60i64..60), proptest::option::of(-60i64..60)), 0..20),
            sample in 1usize..50,
        ) {
            let key_array = ints(&keys.iter().copied().map(Some).collect::<Vec<_>>());
            let least = ints(&files.iter().map(|f| f.0).collect::<Vec<_>>());
            let greatest = ints(&files.iter().map(|f| f.1).collect::<Vec<_>>());
            let got = may_hold(&key_array, &least, &greatest, sample).unwrap().unwrap();
            let want: Vec<bool> = files
                .iter()
                .map(|(lo, hi)| {
                    keys.iter().any(|k| lo.is_none_or(|lo| *k >= lo) && hi.is_none_or(|hi| *k <= hi))
                })
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
