//! The cast of whole batches to a table's types (append and replace_where flows): the
//! values that did not cast counted per column, the first of them kept for the error.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use arrow::util::display::array_value_to_string;
use smelt_core::cast::cast_columns_in;
use smelt_core::dialect::CastDialect;

use crate::{EngineError, Result};

/// The first value that did not cast.
#[derive(Debug, Clone)]
pub struct CastMiss {
    /// Column.
    pub column: String,
    /// Target type.
    pub target: String,
    /// The value.
    pub value: String,
    /// Row within the batch.
    pub row: usize,
}

/// A batch cast to a table's types.
pub struct Cast {
    /// The rows, with the table's columns in its order.
    pub batch: RecordBatch,
    /// Values that did not cast (now NULL), per column.
    pub failures: BTreeMap<String, usize>,
    /// The first of them.
    pub first: Option<CastMiss>,
}

/// Casts the columns of `batch` named like the columns of `target` to their types by the
/// rules of `dialect` (smelt's casts: SAFE_CAST and better, DESIGN §5); other columns of
/// `batch` are left out, and a column of `target` that `batch` lacks is an error.
pub fn cast_to_in(
    batch: &RecordBatch,
    target: &SchemaRef,
    tz: Option<&str>,
    dialect: CastDialect,
) -> Result<Cast> {
    let mut inputs = Vec::with_capacity(target.fields().len());
    for f in target.fields() {
        let c = batch.column_by_name(f.name()).ok_or_else(|| {
            EngineError::rule(smelt_rules::messages::target_column_not_in_input(f.name()))
        })?;
        inputs.push((Arc::clone(c), f.data_type().clone()));
    }
    let outputs = cast_columns_in(&inputs, tz, dialect)?;
    let mut failures = BTreeMap::new();
    let mut first: Option<CastMiss> = None;
    for (f, (out, (input, _))) in target.fields().iter().zip(outputs.iter().zip(&inputs)) {
        if out.failed_rows.is_empty() {
            continue;
        }
        failures.insert(f.name().clone(), out.failed_rows.len());
        let row = out.failed_rows[0];
        if first.as_ref().is_none_or(|m| row < m.row) {
            first = Some(CastMiss {
                column: f.name().clone(),
                target: crate::schema::type_name(f.data_type()),
                value: array_value_to_string(input, row)?,
                row,
            });
        }
    }
    let batch = RecordBatch::try_new_with_options(
        Arc::clone(target),
        outputs.into_iter().map(|o| o.array).collect(),
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?;
    Ok(Cast {
        batch,
        failures,
        first,
    })
}
