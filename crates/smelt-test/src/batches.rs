//! Building batches and reading their columns back, whatever types a format returns.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};

/// A batch of text columns (bronze is all text), each a name and its values.
pub fn text_batch(columns: Vec<(&str, Vec<Option<String>>)>) -> RecordBatch {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, _)| Field::new(*name, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays = columns
        .into_iter()
        .map(|(_, values)| Arc::new(StringArray::from(values)) as ArrayRef)
        .collect();
    RecordBatch::try_new(schema, arrays).expect("columns of one length")
}

/// Column `name` of `batch`.
pub fn column<'a>(batch: &'a RecordBatch, name: &str) -> &'a ArrayRef {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column `{name}` in {:?}", batch.schema()))
}

/// The values of `a` as text (cast from any type).
pub fn texts(a: &ArrayRef) -> Vec<Option<String>> {
    let a = arrow::compute::cast(a, &DataType::Utf8).expect("castable to text");
    a.as_string::<i32>()
        .iter()
        .map(|v| v.map(str::to_string))
        .collect()
}

/// The values of `a` as 64-bit integers (cast from any integer or timestamp type).
pub fn ints(a: &ArrayRef) -> Vec<Option<i64>> {
    let a = arrow::compute::cast(a, &DataType::Int64).expect("castable to Int64");
    a.as_primitive::<Int64Type>().iter().collect()
}
