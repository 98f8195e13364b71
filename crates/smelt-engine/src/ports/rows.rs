//! What every table format computes alike on its stored rows, so that the adapters decide
//! the same rows the same way.

use arrow::array::{Array, BooleanArray, Int64Array, RecordBatch};
use arrow::compute::kernels::cmp::lt;
use arrow::compute::{cast, prep_null_mask_filter};
use arrow::datatypes::{DataType, TimeUnit};
use smelt_spec::TableName;

use crate::{EngineError, Result};

/// Which rows of `stored` (rows of table `table`) [`TableSink::expire`] removes: those
/// whose timestamp column `column` is before `before_us` (µs since the epoch, UTC). A NULL
/// timestamp never expires.
///
/// [`TableSink::expire`]: super::TableSink::expire
pub fn expired_rows(
    stored: &RecordBatch,
    table: &TableName,
    column: &str,
    before_us: i64,
) -> Result<BooleanArray> {
    let values = stored.column_by_name(column).ok_or_else(|| {
        EngineError::user(
            format!("`{table}` has no column `{column}` to expire rows by"),
            "rebuild the table with `smelt run --full-refresh`",
        )
    })?;
    let micros = cast(
        values,
        &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
    )?;
    let micros = cast(&micros, &DataType::Int64)?;
    let hit = lt(&micros, &Int64Array::new_scalar(before_us))?;
    Ok(match hit.null_count() {
        0 => hit,
        _ => prep_null_mask_filter(&hit),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::TimestampMicrosecondArray;
    use arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn rows_before_the_bound_expire_and_null_never_does() {
        let at = TimestampMicrosecondArray::from(vec![Some(5), Some(10), None, Some(11)])
            .with_timezone("UTC");
        let schema = Schema::new(vec![Field::new("at", at.data_type().clone(), true)]);
        let stored = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(at)]).unwrap();
        let table = TableName::parse("s.t__tombstones").unwrap();
        let hit = expired_rows(&stored, &table, "at", 10).unwrap();
        assert_eq!(hit, BooleanArray::from(vec![true, false, false, false]));
        let err = expired_rows(&stored, &table, "gone", 10).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`s.t__tombstones` has no column `gone` to expire rows by"
        );
    }
}
