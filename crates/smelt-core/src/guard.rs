//! The newer-than guard (DESIGN §3.5): a change applies only when its sequence is newer
//! than what silver stores for its key and than the key's tombstone, so a late or replayed
//! change never overwrites a newer row or brings a deleted key back.

use arrow::array::{ArrayRef, BooleanArray};

use crate::Result;
use crate::dedupe::encode;

/// The row of `columns` that is greatest, comparing the columns in order (a NULL is the
/// smallest value); `None` when there are no rows or no columns.
pub fn greatest(columns: &[ArrayRef]) -> Result<Option<usize>> {
    let Some(rows) = encode(columns)? else {
        return Ok(None);
    };
    Ok((0..rows.num_rows()).max_by(|&a, &b| rows.row(a).cmp(&rows.row(b))))
}

/// Row-wise "new sequence > stored sequence", lexicographic over the columns; a NULL
/// is older than any value. With no sequence columns every change is newer.
pub fn newer_than(new: &[ArrayRef], stored: &[ArrayRef], n: usize) -> Result<BooleanArray> {
    let (Some(new_rows), Some(stored_rows)) = (encode(new)?, encode(stored)?) else {
        return Ok(BooleanArray::from(vec![true; n]));
    };
    Ok(BooleanArray::from_iter(
        (0..n).map(|i| Some(new_rows.row(i) > stored_rows.row(i))),
    ))
}
