//! The lookup behind the guard: the stored rows of silver (or its tombstones) for the keys of
//! a partition, lined up with those keys.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::take;
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
        let found = table.lookup(keys_batch, wanted).await?;
        align(new_keys, &found, keys, wanted, table_schema)
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
/// stored value for new row `i` (NULL where unmatched).
fn align(
    new_keys: &[ArrayRef],
    found: &RecordBatch,
    keys: &[String],
    wanted: &[String],
    schema: &SchemaRef,
) -> Result<(BooleanArray, HashMap<String, ArrayRef>)> {
    let mut found_cols = Vec::new();
    for (k, new) in keys.iter().zip(new_keys) {
        let c = found
            .column_by_name(k)
            .ok_or_else(|| EngineError::Internal(format!("lookup lost key `{k}`")))?;
        found_cols.push(arrow::compute::cast(c, new.data_type())?);
    }
    let positions = positions_of(new_keys, &found_cols)?;
    let matched = arrow::compute::is_not_null(&positions)?;
    let mut stored = HashMap::new();
    for c in wanted {
        let target = schema
            .field_with_name(c)
            .map_err(|_| EngineError::Internal(format!("no silver column `{c}`")))?;
        let col = found
            .column_by_name(c)
            .ok_or_else(|| EngineError::Internal(format!("lookup lost column `{c}`")))?;
        let col = arrow::compute::cast(col, target.data_type())?;
        stored.insert(c.clone(), take(col.as_ref(), &positions, None)?);
    }
    Ok((matched, stored))
}
