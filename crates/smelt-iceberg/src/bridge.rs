//! Arrow 59 (smelt) ⇄ Arrow 58 (the `iceberg` crate) through the Arrow C Data Interface.
//!
//! Both sides export to and import from the same C structs (`ArrowArray`, `ArrowSchema`), so
//! a batch crosses without copying a buffer: the exporter's struct is handed to the importer,
//! which takes over the release callback. Schemas cross with their field metadata (the
//! `PARQUET:field_id` keys Iceberg matches columns by).

#![allow(unsafe_code)]

use std::sync::Arc;

use arrow::array::{Array, RecordBatch, StructArray};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow58_array::{Array as Array58, RecordBatch as RecordBatch58, StructArray as StructArray58};
use arrow58_schema::{ArrowError as ArrowError58, Schema as Schema58, SchemaRef as SchemaRef58};

use arrow::ffi as ffi59;
use arrow58_array::ffi as ffi58;

/// An error crossing the bridge (a type one side cannot express).
#[derive(Debug, thiserror::Error)]
#[error("moving Arrow data between Arrow 58 and 59: {0}")]
pub struct BridgeError(String);

fn e59(e: ArrowError) -> BridgeError {
    BridgeError(e.to_string())
}

fn e58(e: ArrowError58) -> BridgeError {
    BridgeError(e.to_string())
}

/// Hands an exported Arrow 58 array struct to Arrow 59.
fn array_58_to_59(mut array: ffi58::FFI_ArrowArray) -> ffi59::FFI_ArrowArray {
    // SAFETY: both types are `#[repr(C)]` renderings of the C Data Interface's `ArrowArray`.
    // `from_raw` moves the struct out and leaves an empty (released) one behind, so the
    // Arrow 58 value dropped afterwards releases nothing.
    unsafe { ffi59::FFI_ArrowArray::from_raw(&mut array as *mut ffi58::FFI_ArrowArray as *mut _) }
}

/// Hands an exported Arrow 59 array struct to Arrow 58.
fn array_59_to_58(mut array: ffi59::FFI_ArrowArray) -> ffi58::FFI_ArrowArray {
    // SAFETY: as in `array_58_to_59`.
    unsafe { ffi58::FFI_ArrowArray::from_raw(&mut array as *mut ffi59::FFI_ArrowArray as *mut _) }
}

fn schema_58_to_59(mut schema: ffi58::FFI_ArrowSchema) -> ffi59::FFI_ArrowSchema {
    // SAFETY: as in `array_58_to_59`, for the C Data Interface's `ArrowSchema`.
    unsafe {
        ffi59::FFI_ArrowSchema::from_raw(&mut schema as *mut ffi58::FFI_ArrowSchema as *mut _)
    }
}

fn schema_59_to_58(mut schema: ffi59::FFI_ArrowSchema) -> ffi58::FFI_ArrowSchema {
    // SAFETY: as in `array_58_to_59`, for the C Data Interface's `ArrowSchema`.
    unsafe {
        ffi58::FFI_ArrowSchema::from_raw(&mut schema as *mut ffi59::FFI_ArrowSchema as *mut _)
    }
}

/// An Arrow 58 schema as Arrow 59 (field metadata kept).
pub fn schema_from_58(schema: &Schema58) -> Result<Schema, BridgeError> {
    let exported = ffi58::FFI_ArrowSchema::try_from(schema).map_err(e58)?;
    Schema::try_from(&schema_58_to_59(exported)).map_err(e59)
}

/// An Arrow 59 schema as Arrow 58 (field metadata kept).
pub fn schema_to_58(schema: &Schema) -> Result<Schema58, BridgeError> {
    let exported = ffi59::FFI_ArrowSchema::try_from(schema).map_err(e59)?;
    Schema58::try_from(&schema_59_to_58(exported)).map_err(e58)
}

/// An Arrow 58 batch as Arrow 59, with `schema` (the bridged schema of the batch).
pub fn batch_from_58(batch: RecordBatch58, schema: &SchemaRef) -> Result<RecordBatch, BridgeError> {
    let rows = batch.num_rows();
    let data = StructArray58::from(batch).into_data();
    let (array, ffi_schema) = ffi58::to_ffi(&data).map_err(e58)?;
    let (array, ffi_schema) = (array_58_to_59(array), schema_58_to_59(ffi_schema));
    // SAFETY: `array` and `ffi_schema` were exported together just above, by arrow-rs.
    let data = unsafe { ffi59::from_ffi(array, &ffi_schema) }.map_err(e59)?;
    let columns = StructArray::from(data).into_parts().1;
    let columns = conform_columns(columns, schema)?;
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(e59)
}

/// `columns` cast to the types of `schema` where they differ: the `iceberg` crate spells
/// UTC `+00:00`, smelt spells it `UTC` (the same instants).
fn conform_columns(
    columns: Vec<arrow::array::ArrayRef>,
    schema: &SchemaRef,
) -> Result<Vec<arrow::array::ArrayRef>, BridgeError> {
    columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c)
            } else {
                arrow::compute::cast(&c, f.data_type()).map_err(e59)
            }
        })
        .collect()
}

/// `batch` with the types of `schema` (same columns; time zone spellings may differ).
pub fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, BridgeError> {
    let rows = batch.num_rows();
    let columns = conform_columns(batch.columns().to_vec(), schema)?;
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(e59)
}

/// `schema` as smelt sees it: no field metadata, UTC timestamps spelled `UTC`.
pub fn plain(schema: &Schema) -> Schema {
    use arrow::datatypes::DataType;
    Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| {
                let f = f.as_ref().clone().with_metadata(Default::default());
                match f.data_type() {
                    DataType::Timestamp(unit, Some(tz))
                        if matches!(tz.as_ref(), "+00:00" | "Z" | "UTC" | "Etc/UTC") =>
                    {
                        let t = DataType::Timestamp(*unit, Some("UTC".into()));
                        f.with_data_type(t)
                    }
                    _ => f,
                }
            })
            .collect::<Vec<_>>(),
    )
}

/// An Arrow 59 batch as Arrow 58, with `schema` (the bridged schema of the batch).
pub fn batch_to_58(batch: RecordBatch, schema: &SchemaRef58) -> Result<RecordBatch58, BridgeError> {
    let rows = batch.num_rows();
    let data = StructArray::from(batch).into_data();
    let (array, ffi_schema) = ffi59::to_ffi(&data).map_err(e59)?;
    let (array, ffi_schema) = (array_59_to_58(array), schema_59_to_58(ffi_schema));
    // SAFETY: `array` and `ffi_schema` were exported together just above, by arrow-rs.
    let data = unsafe { ffi58::from_ffi(array, &ffi_schema) }.map_err(e58)?;
    let columns = StructArray58::from(data).into_parts().1;
    RecordBatch58::try_new_with_options(
        schema.clone(),
        columns,
        &arrow58_array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(e58)
}

/// Both schemas of one table: what smelt sees and what the `iceberg` crate writes.
#[derive(Debug, Clone)]
pub struct Schemas {
    /// Arrow 59.
    pub arrow: SchemaRef,
    /// Arrow 58.
    pub arrow58: SchemaRef58,
}

impl Schemas {
    /// From the `iceberg` crate's Arrow schema.
    pub fn from_58(schema: SchemaRef58) -> Result<Self, BridgeError> {
        Ok(Schemas {
            arrow: Arc::new(schema_from_58(&schema)?),
            arrow58: schema,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, TimeUnit};
    use std::collections::HashMap;

    fn batch() -> RecordBatch {
        let id = Field::new("id", DataType::Int64, false).with_metadata(HashMap::from([(
            "PARQUET:field_id".to_string(),
            "1".to_string(),
        )]));
        let schema = Arc::new(Schema::new(vec![
            id,
            Field::new("name", DataType::Utf8, true),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("ccc")])),
                Arc::new(
                    TimestampMicrosecondArray::from(vec![Some(5), Some(6), None])
                        .with_timezone("UTC"),
                ),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_batch_crosses_both_ways_unchanged_with_its_field_ids() {
        let batch = batch();
        let schema58 = Arc::new(schema_to_58(batch.schema_ref()).unwrap());
        assert_eq!(
            schema58
                .field(0)
                .metadata()
                .get("PARQUET:field_id")
                .map(String::as_str),
            Some("1")
        );
        let there = batch_to_58(batch.clone(), &schema58).unwrap();
        assert_eq!(there.num_rows(), 3);
        // Arrow 58's own view of the data agrees.
        let names = there
            .column(1)
            .as_any()
            .downcast_ref::<arrow58_array::StringArray>()
            .unwrap();
        assert_eq!(names.value(2), "ccc");
        assert!(names.is_null(1));
        let back = batch_from_58(there, batch.schema_ref()).unwrap();
        assert_eq!(back, batch);
    }

    #[test]
    fn a_sliced_batch_keeps_its_offset() {
        let batch = batch().slice(1, 2);
        let schema58 = Arc::new(schema_to_58(batch.schema_ref()).unwrap());
        let back = batch_from_58(
            batch_to_58(batch.clone(), &schema58).unwrap(),
            batch.schema_ref(),
        )
        .unwrap();
        assert_eq!(back, batch);
    }
}
