//! The rows a copy-on-write snapshot carried over: a snapshot that rewrites a data file
//! removes it and adds a copy without the changed rows; the rows on both sides (equal in
//! every bronze column) did not change. As Iceberg's own change views do, they are left out,
//! so that an old row copied into a new file is not read as a new change.

use std::collections::HashMap;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::row::{OwnedRow, RowConverter, SortField};

use crate::error::Result;

/// What changed between `removed` and `added` rows (change batches whose first `columns`
/// columns are the bronze columns): the removed rows not found among the added ones (when
/// `emit_removed`), then the added rows not found among the removed ones. Equal rows pair
/// off one to one.
pub(super) fn changed(
    removed: Vec<RecordBatch>,
    added: Vec<RecordBatch>,
    columns: usize,
    emit_removed: bool,
) -> Result<Vec<RecordBatch>> {
    let Some(first) = removed.first().or(added.first()) else {
        return Ok(Vec::new());
    };
    let fields = first.schema().fields()[..columns]
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let mut unmatched: HashMap<OwnedRow, usize> = HashMap::new();
    for batch in &removed {
        let rows = converter.convert_columns(&batch.columns()[..columns])?;
        for row in rows.iter() {
            *unmatched.entry(row.owned()).or_default() += 1;
        }
    }
    // Added rows that pair with a removed row are carried over.
    let mut carried: HashMap<OwnedRow, usize> = HashMap::new();
    let mut out = Vec::new();
    let mut new_rows = Vec::new();
    for batch in &added {
        let rows = converter.convert_columns(&batch.columns()[..columns])?;
        let keep: BooleanArray = rows
            .iter()
            .map(|row| {
                let owned = row.owned();
                match unmatched.get_mut(&owned) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        *carried.entry(owned).or_default() += 1;
                        Some(false)
                    }
                    _ => Some(true),
                }
            })
            .collect();
        new_rows.push(filter_record_batch(batch, &keep)?);
    }
    if emit_removed {
        for batch in &removed {
            let rows = converter.convert_columns(&batch.columns()[..columns])?;
            let keep: BooleanArray = rows
                .iter()
                .map(|row| match carried.get_mut(&row.owned()) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        Some(false)
                    }
                    _ => Some(true),
                })
                .collect();
            out.push(filter_record_batch(batch, &keep)?);
        }
    }
    out.extend(new_rows);
    out.retain(|b| b.num_rows() > 0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::StringArray;
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(ids: &[&str], kind: &str) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, true),
            Field::new("_change_type", DataType::Utf8, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(ids.to_vec())),
                Arc::new(StringArray::from(vec![kind; ids.len()])),
            ],
        )
        .unwrap()
    }

    fn ids(batches: &[RecordBatch]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for b in batches {
            let id = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let kind = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            for i in 0..b.num_rows() {
                out.push((id.value(i).to_string(), kind.value(i).to_string()));
            }
        }
        out
    }

    #[test]
    fn rows_on_both_sides_pair_off_one_to_one() {
        let removed = vec![batch(&["a", "b", "b", "c"], "delete")];
        let added = vec![batch(&["b", "a2"], "insert"), batch(&["c", "c"], "insert")];
        let got = changed(removed.clone(), added.clone(), 1, true).unwrap();
        assert_eq!(
            ids(&got),
            [
                ("a", "delete"),
                ("b", "delete"),
                ("a2", "insert"),
                ("c", "insert")
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        let got = changed(removed, added, 1, false).unwrap();
        assert_eq!(
            ids(&got),
            [("a2", "insert"), ("c", "insert")].map(|(a, b)| (a.to_string(), b.to_string()))
        );
    }
}
