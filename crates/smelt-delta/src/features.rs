//! The parts of the Delta protocol smelt reads and writes (docs/delta.md): reader and writer
//! table features, column mapping. A table that needs something smelt does not do is
//! refused by name — never read or written half right.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use delta_kernel::table_features::ColumnMappingMode;
use delta_kernel::table_features::TableFeature;
use deltalake::kernel::{ColumnMetadataKey, MetadataValue, Protocol, StructType};
use deltalake::table::state::DeltaTableState;

use crate::error::{Error, Result};

/// Reader features whose data smelt reads right: deletion vectors are applied, physical
/// column names mapped, files of a narrower type cast to the table's, and the rest only
/// concern the log (which delta-rs' kernel reads).
const READ: &[&str] = &[
    "deletionVectors",
    "columnMapping",
    "timestampNtz",
    "v2Checkpoint",
    "vacuumProtocolCheck",
    "typeWidening",
    "typeWidening-preview",
];

/// Writer features a smelt commit keeps (checked again below for the ones that only hold
/// while unused), as far as delta-rs commits them.
const WRITE: &[&str] = &[
    "appendOnly",
    "invariants",
    "checkConstraints",
    "changeDataFeed",
    "generatedColumns",
    "columnMapping",
    "deletionVectors",
    "timestampNtz",
    "v2Checkpoint",
    "checkpointProtection",
];

/// The highest reader protocol version smelt reads (3: table features).
const MAX_READER_VERSION: i32 = 3;

/// Fails unless smelt can read every row of `table` right.
pub(crate) fn check_readable(table: &str, state: &DeltaTableState) -> Result<()> {
    let protocol = state.protocol();
    if protocol.min_reader_version() > MAX_READER_VERSION {
        return Err(Error::user(
            format!(
                "`{table}` needs Delta reader version {}; smelt reads up to version {MAX_READER_VERSION}",
                protocol.min_reader_version()
            ),
            "read it through the engine that wrote it, or ask for the feature in smelt's issue tracker",
        ));
    }
    for feature in protocol.reader_features().unwrap_or_default() {
        let name = feature.to_string();
        if !READ.contains(&name.as_str()) {
            return Err(Error::user(
                format!(
                    "`{table}` uses the Delta reader feature `{name}`, which smelt does not read (version {})",
                    state.version()
                ),
                format!(
                    "smelt reads tables with the reader features {}; see docs/delta.md",
                    READ.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Fails unless a smelt commit to `table` keeps every writer feature the table uses.
pub(crate) fn check_writable(table: &str, state: &DeltaTableState) -> Result<()> {
    check_readable(table, state)?;
    let refuse = |feature: &str, why: &str| {
        Err(Error::user(
            format!("`{table}` uses the Delta writer feature `{feature}`: {why}"),
            "write this table with the engine that created it, or let smelt create its own table (a new `into:`); see docs/delta.md",
        ))
    };
    for feature in state.protocol().writer_features().unwrap_or_default() {
        let name = feature.to_string();
        if !WRITE.contains(&name.as_str()) {
            return refuse(&name, "smelt (through delta-rs) cannot keep it on write");
        }
    }
    if column_mapping_mode(state) != ColumnMappingMode::None {
        return refuse(
            "columnMapping",
            "smelt writes data files with logical column names",
        );
    }
    let schema = state.snapshot().schema();
    for field in schema.fields() {
        let has = |key: &str| field.metadata().contains_key(key);
        if has("delta.generationExpression") {
            return refuse(
                "generatedColumns",
                &format!("smelt does not compute generated column `{}`", field.name()),
            );
        }
        if has("delta.invariants") {
            return refuse(
                "invariants",
                &format!("smelt does not check the invariant of `{}`", field.name()),
            );
        }
        if field
            .metadata()
            .keys()
            .any(|k| k.starts_with("delta.identity."))
        {
            return refuse(
                "identityColumns",
                &format!("smelt does not fill identity column `{}`", field.name()),
            );
        }
    }
    if let Some(key) = state
        .metadata()
        .configuration()
        .keys()
        .find(|k| k.starts_with("delta.constraints."))
    {
        return refuse(
            "checkConstraints",
            &format!("smelt does not check the constraint `{key}`"),
        );
    }
    Ok(())
}

/// The features a legacy writer version (below 7) implies, to list when the table moves to
/// table features.
fn legacy_writer_features(version: i32) -> &'static [&'static str] {
    const ALL: [&str; 7] = [
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
    ];
    match version {
        ..=1 => &[],
        2 => &ALL[..2],
        3 => &ALL[..3],
        4 => &ALL[..5],
        5 => &ALL[..6],
        _ => &ALL,
    }
}

/// `protocol` with the `deletionVectors` reader and writer feature (reader version 3,
/// writer version 7, a legacy version's implied features listed); `None` when it has it.
pub(crate) fn with_deletion_vectors(protocol: &Protocol) -> Result<Option<Protocol>> {
    const DV: &str = "deletionVectors";
    let mut reader = names(protocol.reader_features());
    let mut writer = names(protocol.writer_features());
    if reader.iter().any(|f| f == DV) && writer.iter().any(|f| f == DV) {
        return Ok(None);
    }
    if protocol.min_writer_version() < 7 {
        writer.extend(
            legacy_writer_features(protocol.min_writer_version())
                .iter()
                .map(|f| f.to_string()),
        );
    }
    if protocol.min_reader_version() == 2 {
        reader.push("columnMapping".to_string());
    }
    for list in [&mut reader, &mut writer] {
        list.push(DV.to_string());
        list.sort();
        list.dedup();
    }
    let json = serde_json::json!({
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": reader,
        "writerFeatures": writer,
    });
    serde_json::from_value(json)
        .map(Some)
        .map_err(|e| Error::internal(format!("turning deletion vectors on: {e}")))
}

/// The protocol `protocol` needs for a change feed, `None` when it allows one already:
/// writer version 4 (legacy: it has every feature of 2 and 3), or the `changeDataFeed`
/// writer feature under table features.
pub(crate) fn with_change_feed(protocol: &Protocol) -> Result<Option<Protocol>> {
    const CDF: &str = "changeDataFeed";
    let writer_version = protocol.min_writer_version();
    let json = if writer_version < 4 {
        serde_json::json!({
            "minReaderVersion": protocol.min_reader_version(),
            "minWriterVersion": 4,
        })
    } else if writer_version < 7 {
        return Ok(None);
    } else {
        let mut writer = names(protocol.writer_features());
        if writer.iter().any(|f| f == CDF) {
            return Ok(None);
        }
        writer.push(CDF.to_string());
        writer.sort();
        let mut json = serde_json::json!({
            "minReaderVersion": protocol.min_reader_version(),
            "minWriterVersion": 7,
            "writerFeatures": writer,
        });
        if protocol.min_reader_version() >= 3 {
            json["readerFeatures"] = names(protocol.reader_features()).into();
        }
        json
    };
    serde_json::from_value(json)
        .map(Some)
        .map_err(|e| Error::internal(format!("turning the change feed on: {e}")))
}

/// The names of a protocol's reader or writer features (none when it lists none).
fn names(features: Option<&[TableFeature]>) -> Vec<String> {
    features
        .unwrap_or_default()
        .iter()
        .map(|f| f.to_string())
        .collect()
}

/// The table's column mapping mode.
fn column_mapping_mode(state: &DeltaTableState) -> ColumnMappingMode {
    state.snapshot().table_configuration().column_mapping_mode()
}

/// How the columns of a table's data files are named: logical names, or physical names
/// (and field ids) under column mapping. Maps file columns and partition values to the
/// table's logical names.
#[derive(Debug, Clone, Default)]
pub(crate) struct ColumnNames {
    /// Physical name → logical name (top-level columns); empty without column mapping.
    by_name: HashMap<String, String>,
    /// Parquet field id → logical name (`id` mode).
    by_id: HashMap<i64, String>,
}

impl ColumnNames {
    /// The names of `state`'s data files.
    pub fn of(state: &DeltaTableState) -> Self {
        let mode = column_mapping_mode(state);
        Self::new(&state.snapshot().schema(), mode)
    }

    fn new(schema: &StructType, mode: ColumnMappingMode) -> Self {
        let mut names = Self::default();
        if mode == ColumnMappingMode::None {
            return names;
        }
        for field in schema.fields() {
            let physical =
                match field.get_config_value(&ColumnMetadataKey::ColumnMappingPhysicalName) {
                    Some(MetadataValue::String(p)) => p.clone(),
                    _ => field.name().clone(),
                };
            names.by_name.insert(physical, field.name().clone());
            if mode == ColumnMappingMode::Id
                && let Some(id) = field.column_mapping_id()
            {
                names.by_id.insert(id, field.name().clone());
            }
        }
        names
    }

    /// True when the files use the logical names.
    pub fn is_identity(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Partition values keyed by logical names.
    pub fn partition_values(
        &self,
        values: HashMap<String, Option<String>>,
    ) -> HashMap<String, Option<String>> {
        if self.is_identity() {
            return values;
        }
        values
            .into_iter()
            .map(|(k, v)| (self.by_name.get(&k).cloned().unwrap_or(k), v))
            .collect()
    }

    /// `batch` (as read from a data file) with its columns renamed to logical names. Under
    /// column mapping a file column the table does not map is dropped (a dropped column's
    /// data, never a newer column of the same name), except the change type of change data
    /// files.
    pub fn to_logical(&self, batch: RecordBatch) -> Result<RecordBatch> {
        if self.is_identity() {
            return Ok(batch);
        }
        let mut fields = Vec::new();
        let mut columns = Vec::new();
        for (f, column) in batch.schema().fields().iter().zip(batch.columns()) {
            let by_id = f
                .metadata()
                .get(deltalake::parquet::arrow::PARQUET_FIELD_ID_META_KEY)
                .and_then(|id| id.parse::<i64>().ok())
                .and_then(|id| self.by_id.get(&id));
            let field = match by_id.or_else(|| self.by_name.get(f.name())) {
                Some(logical) => f.as_ref().clone().with_name(logical),
                None if f.name() == smelt_core::change::CHANGE_TYPE => f.as_ref().clone(),
                None => continue,
            };
            fields.push(field);
            columns.push(Arc::clone(column));
        }
        Ok(RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::Field;
    use deltalake::kernel::{DataType, StructField};

    fn mapped(name: &str, physical: &str, id: i64) -> StructField {
        StructField::new(name, DataType::STRING, true).with_metadata([
            (
                ColumnMetadataKey::ColumnMappingPhysicalName.as_ref(),
                MetadataValue::String(physical.into()),
            ),
            (
                ColumnMetadataKey::ColumnMappingId.as_ref(),
                MetadataValue::Number(id),
            ),
        ])
    }

    fn protocol(json: serde_json::Value) -> Protocol {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn deletion_vectors_move_a_legacy_table_to_table_features() {
        // What delta-rs creates with the change feed on: reader 1, writer 4.
        let legacy = protocol(serde_json::json!({"minReaderVersion": 1, "minWriterVersion": 4}));
        let up = with_deletion_vectors(&legacy).unwrap().unwrap();
        let json = serde_json::to_value(&up).unwrap();
        assert_eq!(json["minReaderVersion"], 3);
        assert_eq!(json["minWriterVersion"], 7);
        assert_eq!(
            json["readerFeatures"],
            serde_json::json!(["deletionVectors"])
        );
        assert_eq!(
            json["writerFeatures"],
            serde_json::json!([
                "appendOnly",
                "changeDataFeed",
                "checkConstraints",
                "deletionVectors",
                "generatedColumns",
                "invariants"
            ])
        );
        // Already there: nothing to change.
        assert!(with_deletion_vectors(&up).unwrap().is_none());
        // Table features already: the list grows by one.
        let modern = protocol(serde_json::json!({
            "minReaderVersion": 3, "minWriterVersion": 7,
            "readerFeatures": ["timestampNtz"], "writerFeatures": ["timestampNtz", "changeDataFeed"]
        }));
        let json = serde_json::to_value(with_deletion_vectors(&modern).unwrap().unwrap()).unwrap();
        assert_eq!(
            json["readerFeatures"],
            serde_json::json!(["deletionVectors", "timestampNtz"])
        );
        assert_eq!(
            json["writerFeatures"],
            serde_json::json!(["changeDataFeed", "deletionVectors", "timestampNtz"])
        );
    }

    #[test]
    fn a_change_feed_needs_writer_4_or_its_feature() {
        let legacy = protocol(serde_json::json!({"minReaderVersion": 1, "minWriterVersion": 2}));
        let up = with_change_feed(&legacy).unwrap().unwrap();
        assert_eq!((up.min_reader_version(), up.min_writer_version()), (1, 4));
        let four = protocol(serde_json::json!({"minReaderVersion": 1, "minWriterVersion": 4}));
        assert!(with_change_feed(&four).unwrap().is_none());
        let dv = protocol(serde_json::json!({
            "minReaderVersion": 3, "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"],
        }));
        let up = with_change_feed(&dv).unwrap().unwrap();
        let names = |f: Option<&[TableFeature]>| -> Vec<String> {
            f.unwrap().iter().map(|f| f.to_string()).collect()
        };
        assert_eq!(
            names(up.writer_features()),
            ["changeDataFeed", "deletionVectors"]
        );
        assert_eq!(names(up.reader_features()), ["deletionVectors"]);
        assert!(with_change_feed(&up).unwrap().is_none());
        // Both in one commit: deletion vectors over the feed's protocol keep the feed.
        let both = with_deletion_vectors(&with_change_feed(&legacy).unwrap().unwrap())
            .unwrap()
            .unwrap();
        assert!(names(both.writer_features()).contains(&"changeDataFeed".to_string()));
    }

    #[test]
    fn physical_names_and_ids_map_to_logical_names() {
        let schema =
            StructType::try_new([mapped("Super Name", "col-a", 1), mapped("b", "col-b", 2)])
                .unwrap();
        let batch = |fields: Vec<Field>| {
            RecordBatch::try_new(
                Arc::new(Schema::new(fields)),
                vec![
                    Arc::new(StringArray::from(vec!["x"])),
                    Arc::new(Int32Array::from(vec![1])),
                ],
            )
            .unwrap()
        };
        let by_name = ColumnNames::new(&schema, ColumnMappingMode::Name);
        let out = by_name
            .to_logical(batch(vec![
                Field::new("col-a", arrow::datatypes::DataType::Utf8, true),
                Field::new("_change_type", arrow::datatypes::DataType::Int32, true),
            ]))
            .unwrap();
        let names: Vec<_> = out
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["Super Name", "_change_type"]);

        // `id` mode: the field id wins over a stale physical name.
        let by_id = ColumnNames::new(&schema, ColumnMappingMode::Id);
        let with_id = |name: &str, id: &str| {
            Field::new(name, arrow::datatypes::DataType::Utf8, true).with_metadata(
                [(
                    deltalake::parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(),
                    id.to_string(),
                )]
                .into(),
            )
        };
        let out = by_id
            .to_logical(batch(vec![
                with_id("col-a", "2"),
                Field::new("status", arrow::datatypes::DataType::Int32, true),
            ]))
            .unwrap();
        assert_eq!(out.schema().field(0).name(), "b");
        assert_eq!(
            out.num_columns(),
            1,
            "an unmapped column (dropped from the table) goes"
        );

        let parts = by_name.partition_values([("col-b".to_string(), Some("v".to_string()))].into());
        assert_eq!(parts.get("b"), Some(&Some("v".to_string())));
        assert!(ColumnNames::new(&schema, ColumnMappingMode::None).is_identity());
    }
}
