//! The lookup behind the guard: the stored rows of silver (or its tombstones) for the keys of
//! a partition, lined up with those keys.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};

use crate::ports::LakeTable;
use crate::{EngineError, Result};

/// The stored rows of `table` for `keys`, lined up with them: `matched[i]` and the
/// `wanted` columns (NULL where unmatched), in the types of `table_schema`. No table:
/// nothing matches.
pub(super) async fn lookup_aligned(
    table: Option<&dyn LakeTable>,
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
        let aligned = table.lookup_aligned(keys_batch, wanted).await?;
        if aligned.len() != m || aligned.columns.len() != wanted.len() {
            return Err(EngineError::Internal(format!(
                "a lookup of {m} keys and {} columns lined up {} rows and {} columns",
                wanted.len(),
                aligned.len(),
                aligned.columns.len()
            )));
        }
        let mut columns = HashMap::with_capacity(wanted.len());
        for (c, array) in wanted.iter().zip(aligned.columns) {
            let target = table_schema
                .field_with_name(c)
                .map_err(|_| EngineError::Internal(format!("no silver column `{c}`")))?;
            let array = if array.data_type() == target.data_type() {
                array
            } else {
                arrow::compute::cast(&array, target.data_type())?
            };
            columns.insert(c.clone(), array);
        }
        Ok((aligned.matched, columns))
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
