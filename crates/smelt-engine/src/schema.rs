//! Silver column types → Arrow types.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use smelt_core::change::timestamp_utc;
use smelt_spec::{ColumnType, TableDef};

/// The Arrow type smelt stores a silver column type as (Delta-compatible).
pub fn arrow_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::String => DataType::Utf8,
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::Int32 => DataType::Int32,
        ColumnType::Int16 => DataType::Int16,
        ColumnType::Int8 => DataType::Int8,
        ColumnType::Float64 => DataType::Float64,
        ColumnType::Float32 => DataType::Float32,
        ColumnType::Decimal(p, s) => DataType::Decimal128(p, s),
        ColumnType::Date => DataType::Date32,
        ColumnType::Timestamp => timestamp_utc(),
        ColumnType::TimestampNtz => DataType::Timestamp(TimeUnit::Microsecond, None),
        ColumnType::Binary => DataType::Binary,
    }
}

/// The Arrow schema of a table definition.
pub fn arrow_schema(def: &TableDef) -> SchemaRef {
    Arc::new(Schema::new(
        def.columns
            .iter()
            .map(|c| Field::new(&c.name, arrow_type(c.ty), c.nullable))
            .collect::<Vec<_>>(),
    ))
}

/// A user-facing spelling of an Arrow type (for messages).
pub fn type_name(dt: &DataType) -> String {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".into(),
        DataType::Boolean => "BOOL".into(),
        DataType::Int64 => "INT64".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Float64 => "FLOAT64".into(),
        DataType::Float32 => "FLOAT".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p},{s})"),
        DataType::Date32 => "DATE".into(),
        DataType::Timestamp(_, Some(_)) => "TIMESTAMP".into(),
        DataType::Timestamp(_, None) => "TIMESTAMP_NTZ".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BYTES".into(),
        other => other.to_string(),
    }
}
