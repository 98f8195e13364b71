//! Column-parallel batch kernels: the columns of a wide batch taken, filtered, concatenated
//! or compared on all cores at once (rayon). An increment's batches are ~20 columns wide and
//! these steps ran on one core between phases that use all of them.

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::kernels::boolean::or;
use arrow::compute::kernels::cmp::distinct;
use arrow::compute::{FilterBuilder, FilterPredicate, prep_null_mask_filter};
use arrow::datatypes::{DataType, SchemaRef};
use rayon::prelude::*;

use crate::Result;

/// The rows `indices` of `batch`, as `arrow::compute::take_record_batch`.
pub fn take(batch: &RecordBatch, indices: &UInt32Array) -> Result<RecordBatch> {
    let columns = take_arrays(batch.columns(), indices)?;
    with_rows(batch.schema(), columns, indices.len())
}

/// The rows `indices` of each of `columns` (a NULL index gives a NULL value).
pub fn take_arrays(columns: &[ArrayRef], indices: &UInt32Array) -> Result<Vec<ArrayRef>> {
    Ok(columns
        .par_iter()
        .map(|c| arrow::compute::take(c, indices, None))
        .collect::<Result<Vec<_>, _>>()?)
}

/// Column by column (`columns[c]` holds column `c`'s pieces, all of one type), the rows
/// `indices` as (piece, row) pairs, as `arrow::compute::interleave`: one copy, with no
/// concatenation first. Each column's pieces are freed once its rows are out, and, past
/// [`RELEASE_PAST`] bytes, their memory handed back ([`release_freed`]: the pieces' small
/// blocks cannot serve the next column's array), so at most a few columns are held twice
/// at a time.
///
/// [`release_freed`]: crate::memory::release_freed
pub fn interleave(
    columns: Vec<Vec<ArrayRef>>,
    indices: &[(usize, usize)],
) -> Result<Vec<ArrayRef>> {
    columns
        .into_par_iter()
        .map(|pieces| {
            let held: usize = pieces.iter().map(|p| p.get_array_memory_size()).sum();
            let lined = interleave_column(&pieces, indices);
            drop(pieces);
            if held >= RELEASE_PAST {
                crate::memory::release_freed();
            }
            lined
        })
        .collect()
}

/// Pieces of a column at least this large are handed back once freed ([`interleave`]);
/// trimming after smaller ones costs more time than the memory it returns.
const RELEASE_PAST: usize = 8 << 20;

/// One column of [`interleave`].
fn interleave_column(pieces: &[ArrayRef], indices: &[(usize, usize)]) -> Result<ArrayRef> {
    let refs: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
    if refs
        .first()
        .is_some_and(|p| p.data_type() == &DataType::Boolean)
    {
        // Arrow interleaves booleans a run at a time (slow on scattered rows); they are
        // small enough to concatenate and take from.
        let all = arrow::compute::concat(&refs)?;
        let mut starts = Vec::with_capacity(refs.len());
        let mut at = 0;
        for p in &refs {
            starts.push(at);
            at += p.len();
        }
        let rows =
            UInt32Array::from_iter_values(indices.iter().map(|&(p, r)| (starts[p] + r) as u32));
        Ok(arrow::compute::take(&all, &rows, None)?)
    } else {
        Ok(arrow::compute::interleave(&refs, indices)?)
    }
}

/// The rows of `batch` where `mask` is true (NULL counts as false), as
/// `arrow::compute::filter_record_batch`.
pub fn filter(batch: &RecordBatch, mask: &BooleanArray) -> Result<RecordBatch> {
    let predicate = predicate_of(mask);
    let columns = batch
        .columns()
        .par_iter()
        .map(|c| predicate.filter(c))
        .collect::<Result<Vec<_>, _>>()?;
    with_rows(batch.schema(), columns, predicate.count())
}

/// [`filter`], consuming `batch`: a column nothing else holds is freed as soon as it is
/// filtered, so that at most one column per core is held twice, not the whole batch.
pub fn filter_owned(batch: RecordBatch, mask: &BooleanArray) -> Result<RecordBatch> {
    let predicate = predicate_of(mask);
    let schema = batch.schema();
    let mut columns = batch.columns().to_vec();
    drop(batch);
    columns
        .par_iter_mut()
        .with_max_len(1)
        .try_for_each(|c| -> Result<()> {
            *c = predicate.filter(c)?;
            Ok(())
        })?;
    with_rows(schema, columns, predicate.count())
}

/// The filter of `mask` (NULL counts as false), built once for every column, as
/// `filter_record_batch` does.
fn predicate_of(mask: &BooleanArray) -> FilterPredicate {
    if mask.null_count() > 0 {
        FilterBuilder::new(&prep_null_mask_filter(mask))
            .optimize()
            .build()
    } else {
        FilterBuilder::new(mask).optimize().build()
    }
}

/// `batches` (all of `schema`) one after the other, as `arrow::compute::concat_batches`.
pub fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<RecordBatch> {
    // One batch is already what is asked for: no copy.
    if let [one] = batches {
        return Ok(one.clone().with_schema(schema.clone())?);
    }
    let rows = batches.iter().map(RecordBatch::num_rows).sum();
    let columns = (0..schema.fields().len())
        .into_par_iter()
        .map(|i| {
            let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(i).as_ref()).collect();
            if arrays.is_empty() {
                Ok(arrow::array::new_empty_array(schema.field(i).data_type()))
            } else {
                arrow::compute::concat(&arrays)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    with_rows(schema.clone(), columns, rows)
}

/// Per row, whether any pair of `left[i]` and `right[i]` differs there (NULL-safe: NULL
/// and a value differ, two NULLs do not). `rows` is the length of each array.
pub fn any_distinct(left: &[ArrayRef], right: &[ArrayRef], rows: usize) -> Result<BooleanArray> {
    if left.len() != right.len() {
        return Err(crate::CoreError::Internal(format!(
            "comparing {} columns with {}",
            left.len(),
            right.len()
        )));
    }
    let parts = left
        .par_iter()
        .zip(right)
        .map(|(a, b)| distinct(a, b))
        .collect::<Result<Vec<_>, _>>()?;
    let mut differs = BooleanArray::from(vec![false; rows]);
    for part in &parts {
        differs = or(&differs, part)?;
    }
    Ok(differs)
}

fn with_rows(schema: SchemaRef, columns: Vec<ArrayRef>, rows: usize) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new_with_options(
        schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use proptest::prelude::*;

    use super::*;

    fn batch(values: &[(Option<i64>, Option<String>)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let (n, s): (Vec<_>, Vec<_>) = values.iter().cloned().unzip();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(n)),
                Arc::new(StringArray::from(s)),
            ],
        )
        .unwrap()
    }

    fn rows() -> impl Strategy<Value = Vec<(Option<i64>, Option<String>)>> {
        proptest::collection::vec(
            (
                proptest::option::of(0i64..5),
                proptest::option::of("[a-c]{0,2}"),
            ),
            0..50,
        )
    }

    proptest! {
        /// Arrow's own (one-core) kernels are the oracle.
        #[test]
        fn kernels_agree_with_arrows(
            a in rows(),
            b in rows(),
            picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..60),
            mask in proptest::collection::vec(proptest::option::of(any::<bool>()), 0..50),
        ) {
            let (a, b) = (batch(&a), batch(&b));
            let indices = UInt32Array::from(
                picks.iter().filter(|_| a.num_rows() > 0).map(|i| i.index(a.num_rows()) as u32).collect::<Vec<_>>(),
            );
            prop_assert_eq!(take(&a, &indices).unwrap(), arrow::compute::take_record_batch(&a, &indices).unwrap());

            let mask = BooleanArray::from(
                (0..a.num_rows()).map(|i| mask.get(i).copied().flatten()).collect::<Vec<_>>(),
            );
            prop_assert_eq!(filter(&a, &mask).unwrap(), arrow::compute::filter_record_batch(&a, &mask).unwrap());
            prop_assert_eq!(filter_owned(a.clone(), &mask).unwrap(), arrow::compute::filter_record_batch(&a, &mask).unwrap());

            let schema = a.schema();
            let parts = [a.clone(), b.clone(), a.slice(0, a.num_rows() / 2)];
            prop_assert_eq!(concat(&schema, &parts).unwrap(), arrow::compute::concat_batches(&schema, &parts).unwrap());
            prop_assert_eq!(concat(&schema, &[]).unwrap().num_rows(), 0);
            prop_assert_eq!(concat(&schema, &parts[..1]).unwrap(), a.clone());

            // Rows picked across pieces (in any order), with a boolean column beside:
            // as concatenating the pieces and taking.
            let flags = |n: usize| -> ArrayRef {
                let at = |i: usize| (i < mask.len() && mask.is_valid(i)).then(|| mask.value(i));
                Arc::new(BooleanArray::from((0..n).map(at).collect::<Vec<_>>()))
            };
            let mut columns: Vec<Vec<ArrayRef>> = (0..2)
                .map(|c| parts.iter().map(|b| Arc::clone(b.column(c))).collect())
                .collect();
            columns.push(parts.iter().map(|b| flags(b.num_rows())).collect());
            let (mut pairs, mut flat) = (Vec::new(), Vec::new());
            let mut start = 0;
            for (p, piece) in parts.iter().enumerate() {
                for r in 0..piece.num_rows() {
                    if picks.get(start + r).is_some_and(|i| i.index(4) > 0) {
                        pairs.push((p, r));
                        flat.push((start + r) as u32);
                    }
                }
                start += piece.num_rows();
            }
            pairs.reverse();
            flat.reverse();
            let flat = UInt32Array::from(flat);
            let got = interleave(columns.clone(), &pairs).unwrap();
            for (c, pieces) in columns.iter().enumerate() {
                let refs: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
                let whole = arrow::compute::concat(&refs).unwrap();
                prop_assert_eq!(&got[c], &arrow::compute::take(&whole, &flat, None).unwrap());
            }

            // Row i differs when one of its columns does, compared one row at a time.
            let m = a.num_rows().min(b.num_rows());
            let (x, y) = (a.slice(0, m), b.slice(0, m));
            let got = any_distinct(x.columns(), y.columns(), m).unwrap();
            let expected: Vec<bool> = (0..m)
                .map(|i| (0..2).any(|c| {
                    let (p, q) = (x.column(c).slice(i, 1), y.column(c).slice(i, 1));
                    p.to_data() != q.to_data()
                }))
                .collect();
            prop_assert_eq!(got.iter().map(Option::unwrap).collect::<Vec<_>>(), expected);
        }
    }
}
