//! The lookup behind the guard: the stored rows of silver (or its tombstones) for the keys of
//! a partition, lined up with those keys.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::{Schema, SchemaRef};
use smelt_core::dedupe::positions_of;

use crate::ports::SilverTable;
use crate::{EngineError, Result};

/// The stored rows of `table` for `keys`, lined up with them: `matched[i]` and the
/// `wanted` columns (NULL where unmatched). No table: nothing matches.
pub(super) async fn lookup_aligned(
    table: Option<&dyn SilverTable>,
    table_schema: &SchemaRef,
    keys: &[String],
    new_keys: &[ArrayRef],
    wanted: &[String],
) -> Result<(BooleanArray, HashMap<String, ArrayRef>)> {
    let m = new_keys.first().map_or(0, |k| k.len());
    if let Some(table) = table.filter(|t| t.version().is_some())
        && m > 0
    {
        let key_schema = Arc::new(Schema::new(
            keys.iter()
                .map(|k| Ok(table_schema.field_with_name(k)?.clone().with_nullable(true)))
                .collect::<Result<Vec<_>>>()?,
        ));
        let keys_batch = RecordBatch::try_new(key_schema, new_keys.to_vec())?;
        let (found, key_rows) = table.lookup_matched(keys_batch, wanted).await?;
        align(
            new_keys,
            &found,
            key_rows.as_ref(),
            keys,
            wanted,
            table_schema,
        )
    } else {
        let empty: HashMap<String, ArrayRef> = wanted
            .iter()
            .map(|c| {
                Ok((
                    c.clone(),
                    arrow::array::new_null_array(table_schema.field_with_name(c)?.data_type(), m),
                ))
            })
            .collect::<Result<_>>()?;
        Ok((BooleanArray::from(vec![false; m]), empty))
    }
}

/// Lines up stored silver rows with the new keys: `matched[i]` and, per wanted column, the
/// stored value for new row `i` (NULL where unmatched). `key_rows`, when the table gave
/// them, say which new row each stored row matches; otherwise keys are matched here.
fn align(
    new_keys: &[ArrayRef],
    found: &RecordBatch,
    key_rows: Option<&UInt32Array>,
    keys: &[String],
    wanted: &[String],
    schema: &SchemaRef,
) -> Result<(BooleanArray, HashMap<String, ArrayRef>)> {
    let m = new_keys.first().map_or(0, |k| k.len());
    let positions = match key_rows {
        Some(key_rows) => invert(key_rows, found.num_rows(), m)?,
        None => {
            let mut found_cols = Vec::new();
            for (k, new) in keys.iter().zip(new_keys) {
                let c = found
                    .column_by_name(k)
                    .ok_or_else(|| EngineError::Internal(format!("lookup lost key `{k}`")))?;
                found_cols.push(arrow::compute::cast(c, new.data_type())?);
            }
            positions_of(new_keys, &found_cols)?
        }
    };
    let matched = arrow::compute::is_not_null(&positions)?;
    let mut columns = Vec::with_capacity(wanted.len());
    for c in wanted {
        let target = schema
            .field_with_name(c)
            .map_err(|_| EngineError::Internal(format!("no silver column `{c}`")))?;
        let col = found
            .column_by_name(c)
            .ok_or_else(|| EngineError::Internal(format!("lookup lost column `{c}`")))?;
        columns.push(arrow::compute::cast(col, target.data_type())?);
    }
    let taken = smelt_core::columns::take_arrays(&columns, &positions)?;
    Ok((matched, wanted.iter().cloned().zip(taken).collect()))
}

/// For each of `m` new rows, the stored row (of `found` rows) that matches it, from the
/// new row each stored row matches (`key_rows`); a later stored row wins, as when matching
/// by key.
fn invert(key_rows: &UInt32Array, found: usize, m: usize) -> Result<UInt32Array> {
    if key_rows.len() != found || key_rows.null_count() > 0 {
        return Err(EngineError::Internal(format!(
            "a lookup matched {} of its {found} stored rows to keys",
            key_rows.len() - key_rows.null_count()
        )));
    }
    let mut positions: Vec<Option<u32>> = vec![None; m];
    for (stored, &new) in key_rows.values().iter().enumerate() {
        let slot = positions.get_mut(new as usize).ok_or_else(|| {
            EngineError::Internal(format!(
                "a lookup matched a stored row to key row {new} of {m}"
            ))
        })?;
        *slot = Some(stored as u32);
    }
    Ok(UInt32Array::from(positions))
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, StringArray};
    use arrow::datatypes::{DataType, Field};
    use proptest::prelude::*;

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Utf8, true),
        ]))
    }

    /// Stored rows `(key, value)` as the lookup returns them.
    fn found(rows: &[(&str, &str)]) -> RecordBatch {
        let (k, v): (Vec<_>, Vec<_>) = rows.iter().copied().unzip();
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringArray::from(k)),
                Arc::new(StringArray::from(v)),
            ],
        )
        .unwrap()
    }

    /// `align` with the lookup's key rows, and by hashing the keys.
    fn both(
        new: &[&str],
        stored: &[(&str, &str)],
        key_rows: &[u32],
    ) -> [(Vec<bool>, Vec<Option<String>>); 2] {
        let new_keys: Vec<ArrayRef> = vec![Arc::new(StringArray::from(new.to_vec()))];
        let found = found(stored);
        let (k, w) = (["k".to_string()], ["k".to_string(), "v".to_string()]);
        let key_rows = UInt32Array::from(key_rows.to_vec());
        [Some(&key_rows), None].map(|rows| {
            let (matched, stored) = align(&new_keys, &found, rows, &k, &w, &schema()).unwrap();
            let values = stored["v"].as_string::<i32>();
            (
                matched.iter().map(|m| m.unwrap()).collect(),
                values.iter().map(|v| v.map(str::to_string)).collect(),
            )
        })
    }

    #[test]
    fn key_rows_line_stored_rows_up_as_matching_by_key_does() {
        let [given, hashed] = both(
            &["a", "b", "c", "d"],
            &[("c", "old c"), ("a", "old a")],
            &[2, 0],
        );
        assert_eq!(given, hashed);
        assert_eq!(given.0, [true, false, true, false]);
        assert_eq!(
            given.1,
            [Some("old a".into()), None, Some("old c".into()), None]
        );
        // Two stored rows of one key: the later one, either way.
        let [given, hashed] = both(&["a", "b"], &[("b", "first"), ("b", "second")], &[1, 1]);
        assert_eq!(given, hashed);
        assert_eq!(given.1, [None, Some("second".into())]);
    }

    #[test]
    fn key_rows_that_do_not_fit_are_an_internal_error() {
        let new_keys: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec!["a"]))];
        let found = found(&[("a", "x")]);
        let (k, w) = (["k".to_string()], ["v".to_string()]);
        for rows in [vec![1u32], vec![0, 0]] {
            let rows = UInt32Array::from(rows);
            let err = align(&new_keys, &found, Some(&rows), &k, &w, &schema()).unwrap_err();
            assert!(err.to_string().contains("lookup matched"), "{err}");
        }
    }

    proptest! {
        /// Any subset of the new keys stored, in any order: both ways agree.
        #[test]
        fn key_rows_agree_with_matching_by_key(
            n in 1usize..40,
            picks in proptest::collection::vec((0usize..40, any::<u8>()), 0..60),
        ) {
            let names: Vec<String> = (0..n).map(|i| format!("key{i}")).collect();
            let new: Vec<&str> = names.iter().map(String::as_str).collect();
            let picked: Vec<(usize, String)> = picks
                .into_iter()
                .filter(|(i, _)| *i < n)
                .map(|(i, v)| (i, v.to_string()))
                .collect();
            let stored: Vec<(&str, &str)> =
                picked.iter().map(|(i, v)| (new[*i], v.as_str())).collect();
            let rows: Vec<u32> = picked.iter().map(|(i, _)| *i as u32).collect();
            let [given, hashed] = both(&new, &stored, &rows);
            prop_assert_eq!(given, hashed);
        }
    }
}
