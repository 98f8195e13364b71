//! An Iceberg table's schema as smelt uses it — plain Arrow for the engine, Arrow 58 with
//! field ids for the writer — and new columns added to it (`schema_evolution:
//! add_new_columns`): optional fields with fresh ids, committed with the run's snapshot.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use iceberg::spec::{NestedFieldRef, Schema as IcebergSchema, SchemaRef as IcebergSchemaRef};
use iceberg::table::Table;
use smelt_spec::TableName;

use crate::bridge;
use crate::error::{Context, Error, Result};

/// The table's schema for smelt (no field ids) and for the writer (Arrow 58, field ids).
#[derive(Clone)]
pub(crate) struct Schemas {
    pub plain: SchemaRef,
    pub with_ids: bridge::Schemas,
}

/// The Arrow schemas of `schema`.
pub(crate) fn schemas_of(name: &TableName, schema: &IcebergSchema) -> Result<Schemas> {
    let arrow = iceberg::arrow::schema_to_arrow_schema(schema)
        .context(|| format!("reading the schema of `{name}`"))?;
    let with_ids = bridge::Schemas::from_58(Arc::new(arrow))?;
    let plain = Arc::new(bridge::plain(&with_ids.arrow));
    Ok(Schemas { plain, with_ids })
}

/// `schema` (of `table`) with `fields` appended as optional columns: types mapped as a new
/// table's are, field ids after the highest the table ever used, the next schema id.
pub(crate) fn with_columns(
    name: &TableName,
    table: &Table,
    schema: &IcebergSchema,
    fields: &[Field],
) -> Result<IcebergSchemaRef> {
    let arrow58 = bridge::schema_to_58(&Schema::new(fields.to_vec()))?;
    let added = iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&arrow58)
        .context(|| format!("mapping the new columns of `{name}` to Iceberg types"))?;
    let metadata = table.metadata();
    let mut id = metadata.last_column_id().max(schema.highest_field_id());
    let mut all: Vec<NestedFieldRef> = schema.as_struct().fields().to_vec();
    for field in added.as_struct().fields() {
        if !field.field_type.is_primitive() {
            return Err(Error::user(
                format!(
                    "`{name}`: new column `{}` is of a nested type; smelt adds primitive columns to Iceberg tables only",
                    field.name
                ),
                "declare the column with a primitive type, or rebuild the table",
            ));
        }
        id += 1;
        let mut field = field.as_ref().clone();
        field.id = id;
        field.required = false;
        all.push(Arc::new(field));
    }
    let schema_id = metadata
        .schemas_iter()
        .map(|s| s.schema_id())
        .max()
        .unwrap_or(0)
        .max(schema.schema_id())
        + 1;
    let schema = IcebergSchema::builder()
        .with_schema_id(schema_id)
        .with_fields(all)
        .build()
        .context(|| format!("adding columns to the schema of `{name}`"))?;
    Ok(Arc::new(schema))
}
