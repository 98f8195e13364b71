//! Stored rows lined up with the keys of a lookup ([`Aligned`]).

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use smelt_core::dedupe::positions_of;

use crate::{EngineError, Result};

/// What [`KeyedTable::lookup_aligned`](super::KeyedTable::lookup_aligned) returns: per
/// row of the keys looked up, whether a stored row has its key, and that row's values.
#[derive(Debug, Clone)]
pub struct Aligned {
    /// Per key row: a stored row has its key.
    pub matched: BooleanArray,
    /// The columns asked for, in the order asked, one value per key row (NULL where
    /// unmatched). Types are the stored ones.
    pub columns: Vec<ArrayRef>,
}

impl Aligned {
    /// Lines up `found` (stored rows, as [`lookup`](super::KeyedTable::lookup) returns
    /// them) with the rows of `keys` by matching keys (NULL-safe); when stored rows share
    /// a key, the later one. `columns` are the columns of `found` wanted.
    pub fn by_key(keys: &RecordBatch, found: &RecordBatch, columns: &[String]) -> Result<Self> {
        let column = |name: &str| {
            found
                .column_by_name(name)
                .ok_or_else(|| EngineError::Internal(format!("the lookup lost column `{name}`")))
        };
        let mut found_keys = Vec::with_capacity(keys.num_columns());
        for (field, new) in keys.schema().fields().iter().zip(keys.columns()) {
            found_keys.push(arrow::compute::cast(
                column(field.name())?,
                new.data_type(),
            )?);
        }
        let positions = positions_of(keys.columns(), &found_keys)?;
        let wanted = columns
            .iter()
            .map(|c| column(c).cloned())
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            matched: arrow::compute::is_not_null(&positions)?,
            columns: smelt_core::columns::take_arrays(&wanted, &positions)?,
        })
    }

    /// The number of key rows.
    pub fn len(&self) -> usize {
        self.matched.len()
    }

    /// No key rows.
    pub fn is_empty(&self) -> bool {
        self.matched.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(names: &[&str], columns: Vec<Vec<Option<&str>>>) -> RecordBatch {
        let schema = Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let columns = columns
            .into_iter()
            .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
            .collect();
        RecordBatch::try_new(schema, columns).unwrap()
    }

    fn values(a: &ArrayRef) -> Vec<Option<&str>> {
        a.as_string::<i32>().iter().collect()
    }

    #[test]
    fn stored_rows_line_up_with_their_keys_and_a_later_one_wins() {
        let keys = batch(&["k"], vec![vec![Some("a"), Some("b"), None, Some("d")]]);
        let found = batch(
            &["k", "v"],
            vec![
                vec![Some("d"), None, Some("a"), Some("d")],
                vec![
                    Some("old d"),
                    Some("old null"),
                    Some("old a"),
                    Some("newer d"),
                ],
            ],
        );
        let aligned = Aligned::by_key(&keys, &found, &["v".into()]).unwrap();
        assert_eq!(aligned.len(), 4);
        let matched: Vec<bool> = aligned.matched.iter().map(Option::unwrap).collect();
        assert_eq!(matched, [true, false, true, true]);
        assert_eq!(
            values(&aligned.columns[0]),
            [Some("old a"), None, Some("old null"), Some("newer d")]
        );
    }

    #[test]
    fn a_column_the_lookup_did_not_return_is_an_internal_error() {
        let keys = batch(&["k"], vec![vec![Some("a")]]);
        let found = batch(&["k"], vec![vec![Some("a")]]);
        let err = Aligned::by_key(&keys, &found, &["v".into()]).unwrap_err();
        assert!(err.to_string().contains("lost column `v`"), "{err}");
    }
}
