//! Column mapping carried by a query's columns: a scan of a column-mapped Delta table (name
//! or id mode) gives each field the metadata `delta.columnMapping.id` and
//! `delta.columnMapping.physicalName`, which DataFusion keeps through projections. A table
//! created from such a query must not inherit it (delta-rs refuses to create a table with
//! mapping metadata, and the new table has no mapping): [`plain`] drops it, at every depth.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use arrow::error::ArrowError;

/// The metadata keys of Delta's column mapping.
const PREFIX: &str = "delta.columnMapping.";

/// `field` without column-mapping metadata, its children likewise.
fn plain_field(field: &FieldRef) -> FieldRef {
    let metadata: HashMap<String, String> = field
        .metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with(PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let data_type = plain_type(field.data_type());
    Arc::new(Field::new(field.name(), data_type, field.is_nullable()).with_metadata(metadata))
}

fn plain_type(dt: &DataType) -> DataType {
    match dt {
        DataType::Struct(fields) => DataType::Struct(plain_fields(fields)),
        DataType::List(f) => DataType::List(plain_field(f)),
        DataType::LargeList(f) => DataType::LargeList(plain_field(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(plain_field(f), *n),
        DataType::Map(f, sorted) => DataType::Map(plain_field(f), *sorted),
        other => other.clone(),
    }
}

fn plain_fields(fields: &Fields) -> Fields {
    fields.iter().map(plain_field).collect()
}

/// Whether any field of `fields`, at any depth, carries column-mapping metadata.
fn mapped(fields: &Fields) -> bool {
    fields.iter().any(|f| {
        f.metadata().keys().any(|k| k.starts_with(PREFIX))
            || match f.data_type() {
                DataType::Struct(children) => mapped(children),
                DataType::List(c)
                | DataType::LargeList(c)
                | DataType::FixedSizeList(c, _)
                | DataType::Map(c, _) => mapped(&Fields::from(vec![c.clone()])),
                _ => false,
            }
    })
}

/// `schema` and `batches` without column-mapping metadata (unchanged when they have none).
pub fn plain(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<(SchemaRef, Vec<RecordBatch>), ArrowError> {
    if !mapped(schema.fields()) {
        return Ok((schema.clone(), batches));
    }
    let plain_schema = Arc::new(Schema::new_with_metadata(
        plain_fields(schema.fields()),
        schema.metadata().clone(),
    ));
    let batches = batches
        .into_iter()
        .map(|b| {
            let columns = b
                .columns()
                .iter()
                .zip(plain_schema.fields())
                .map(|(c, f)| match c.data_type() == f.data_type() {
                    true => Ok(c.clone()),
                    // Nested types name their children's metadata: the same values, cast.
                    false => cast(c, f.data_type()),
                })
                .collect::<Result<Vec<_>, _>>()?;
            RecordBatch::try_new(plain_schema.clone(), columns)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((plain_schema, batches))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, StructArray};

    fn with_mapping(name: &str, dt: DataType, id: &str) -> Field {
        Field::new(name, dt, true).with_metadata(HashMap::from([
            ("delta.columnMapping.id".to_string(), id.to_string()),
            (
                "delta.columnMapping.physicalName".to_string(),
                format!("col-{id}"),
            ),
            ("comment".to_string(), "kept".to_string()),
        ]))
    }

    #[test]
    fn mapping_metadata_goes_at_every_depth_and_the_rest_stays() {
        let inner = with_mapping("b", DataType::Int64, "2");
        let outer = with_mapping(
            "a",
            DataType::Struct(Fields::from(vec![inner.clone()])),
            "1",
        );
        let schema = Arc::new(Schema::new(vec![outer.clone()]));
        let values = StructArray::from(vec![(
            Arc::new(inner),
            Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef,
        )]);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(values)]).unwrap();
        let (plain_schema, batches) = plain(&schema, vec![batch]).unwrap();
        assert!(!mapped(plain_schema.fields()));
        let a = plain_schema.field(0);
        assert_eq!(
            a.metadata().get("comment").map(String::as_str),
            Some("kept")
        );
        assert_eq!(a.metadata().len(), 1);
        assert_eq!(batches[0].schema(), plain_schema);
        assert_eq!(batches[0].num_rows(), 2);
        // Nothing to drop: the same schema back.
        let bare = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        assert!(Arc::ptr_eq(&plain(&bare, Vec::new()).unwrap().0, &bare));
    }
}
