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

/// The silver column type a table's Arrow type stores, the inverse of [`arrow_type`] (any
/// string, binary or zoned-timestamp kind); `None` for a type silver does not have.
pub fn column_type(dt: &DataType) -> Option<ColumnType> {
    Some(match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ColumnType::String,
        DataType::Boolean => ColumnType::Bool,
        DataType::Int64 => ColumnType::Int64,
        DataType::Int32 => ColumnType::Int32,
        DataType::Int16 => ColumnType::Int16,
        DataType::Int8 => ColumnType::Int8,
        DataType::Float64 => ColumnType::Float64,
        DataType::Float32 => ColumnType::Float32,
        DataType::Decimal128(p, s) => ColumnType::Decimal(*p, *s),
        DataType::Date32 => ColumnType::Date,
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => ColumnType::Timestamp,
        DataType::Timestamp(TimeUnit::Microsecond, None) => ColumnType::TimestampNtz,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => ColumnType::Binary,
        _ => return None,
    })
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

/// True when every value of type `from` is exactly a value of type `to`: integers to wider
/// integers, FLOAT to FLOAT64, DECIMAL to a DECIMAL with as many integer digits and as
/// many fraction digits or more, INT to a DECIMAL wide enough, DATE to TIMESTAMP_NTZ.
pub fn is_widening(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let int_digits = |t: &DataType| match t {
        Int8 => Some(3),
        Int16 => Some(5),
        Int32 => Some(10),
        Int64 => Some(19),
        _ => None,
    };
    match (from, to) {
        (Int8, Int16 | Int32 | Int64) | (Int16, Int32 | Int64) | (Int32, Int64) => true,
        (Float32, Float64) => true,
        (Decimal128(p1, s1), Decimal128(p2, s2)) => {
            s2 >= s1
                && (*p2 as i16 - *s2 as i16) >= (*p1 as i16 - *s1 as i16)
                && (p1, s1) != (p2, s2)
        }
        (Int8 | Int16 | Int32 | Int64, Decimal128(p, s)) => {
            int_digits(from).is_some_and(|d| (*p as i16 - *s as i16) >= d)
        }
        (Date32, Timestamp(TimeUnit::Microsecond, None)) => true,
        _ => false,
    }
}

/// The Arrow schema of a side table both engines write ([`smelt_rules::tables`]).
pub fn side_table(columns: &[smelt_rules::tables::Column]) -> arrow::datatypes::SchemaRef {
    use smelt_rules::tables::Kind;
    let fields: Vec<arrow::datatypes::Field> = columns
        .iter()
        .map(|c| {
            let ty = match c.kind {
                Kind::Text => DataType::Utf8,
                Kind::Int => DataType::Int64,
                Kind::Timestamp => smelt_core::change::timestamp_utc(),
            };
            arrow::datatypes::Field::new(c.name, ty, c.nullable)
        })
        .collect();
    std::sync::Arc::new(arrow::datatypes::Schema::new(fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widenings() {
        use DataType::*;
        for (a, b) in [
            (Int32, Int64),
            (Int8, Int32),
            (Float32, Float64),
            (Decimal128(10, 2), Decimal128(12, 2)),
            (Decimal128(10, 2), Decimal128(12, 4)),
            (Int32, Decimal128(12, 2)),
        ] {
            assert!(is_widening(&a, &b), "{a} -> {b}");
        }
        for (a, b) in [
            (Int64, Int32),
            (Decimal128(10, 2), Decimal128(10, 3)),
            (Decimal128(12, 2), Decimal128(10, 2)),
            (Int64, Decimal128(18, 0)),
            (Utf8, Int64),
            (Int64, Float64),
        ] {
            assert!(!is_widening(&a, &b), "{a} -> {b}");
        }
    }

    #[test]
    fn column_types_round_trip_through_arrow() {
        use ColumnType::*;
        for ty in [
            String,
            Bool,
            Int64,
            Int32,
            Int16,
            Int8,
            Float64,
            Float32,
            Decimal(38, 9),
            Date,
            Timestamp,
            TimestampNtz,
            Binary,
        ] {
            assert_eq!(column_type(&arrow_type(ty)), Some(ty), "{ty:?}");
        }
        // Spark's zone and string kinds are the same silver types; a struct is none.
        let spark_ts = DataType::Timestamp(TimeUnit::Microsecond, Some("Etc/UTC".into()));
        assert_eq!(column_type(&spark_ts), Some(Timestamp));
        assert_eq!(column_type(&DataType::LargeUtf8), Some(String));
        assert_eq!(column_type(&DataType::Struct(Default::default())), None);
    }
}
