//! An Iceberg table as `smelt sql` reads it: its rows now or as of a past snapshot, its
//! columns, its snapshots (`DESCRIBE HISTORY`) and its properties.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use iceberg::table::Table;
use smelt_spec::TableName;

use crate::error::{Error, Result};
use crate::lake::IcebergLake;
use crate::source::IcebergSource;

/// Which snapshot of a table to read.
#[derive(Debug, Clone, Copy)]
pub enum AsOf {
    /// The snapshot with this id (`VERSION AS OF id`).
    Snapshot(i64),
    /// The table's current snapshot at this time, in milliseconds since the epoch
    /// (`TIMESTAMP AS OF`): the last entry of its snapshot log at or before it, as Spark
    /// reads it.
    Time(i64),
}

impl IcebergLake {
    /// The rows of table `name` at its current snapshot, or as of `at`.
    pub async fn rows(&self, name: &TableName, at: Option<AsOf>) -> Result<IcebergSource> {
        let table = self.existing(name).await?;
        let id = match at {
            None => return IcebergSource::new(name.clone(), table, false),
            Some(AsOf::Snapshot(id)) => id,
            Some(AsOf::Time(ms)) => snapshot_at(name, &table, ms)?,
        };
        IcebergSource::at_snapshot(name.clone(), table, id)
    }

    /// `col_name`, `data_type` (Iceberg's type names), `nullable`: the current columns.
    pub async fn columns(&self, name: &TableName) -> Result<RecordBatch> {
        let table = self.existing(name).await?;
        let schema = table.metadata().current_schema();
        let fields: Vec<_> = schema.as_struct().fields().iter().collect();
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("col_name", DataType::Utf8, false),
                Field::new("data_type", DataType::Utf8, false),
                Field::new("nullable", DataType::Boolean, false),
            ])),
            vec![
                strings(fields.iter().map(|f| f.name.clone())),
                strings(fields.iter().map(|f| f.field_type.to_string())),
                Arc::new(BooleanArray::from(
                    fields.iter().map(|f| !f.required).collect::<Vec<_>>(),
                )),
            ],
        )?)
    }

    /// One row per snapshot of the main branch, newest first (at most `limit`): `version`
    /// (its sequence number, smelt's version of an Iceberg table), `snapshot_id`,
    /// `parent_id`, `timestamp`, `operation` and `summary` (its properties as JSON).
    pub async fn history(&self, name: &TableName, limit: Option<usize>) -> Result<RecordBatch> {
        let table = self.existing(name).await?;
        let metadata = table.metadata_ref();
        let snapshots: Vec<_> = match metadata.current_snapshot() {
            None => Vec::new(),
            Some(current) => {
                iceberg::util::snapshot::ancestors_of(&metadata, current.snapshot_id())
                    .take(limit.unwrap_or(usize::MAX))
                    .collect()
            }
        };
        let summary = |s: &iceberg::spec::SnapshotRef| {
            let properties: std::collections::BTreeMap<_, _> =
                s.summary().additional_properties.iter().collect();
            serde_json::to_string(&properties).unwrap_or_default()
        };
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("version", DataType::Int64, false),
                Field::new("snapshot_id", DataType::Int64, false),
                Field::new("parent_id", DataType::Int64, true),
                Field::new(
                    "timestamp",
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    false,
                ),
                Field::new("operation", DataType::Utf8, false),
                Field::new("summary", DataType::Utf8, false),
            ])),
            vec![
                Arc::new(Int64Array::from_iter_values(
                    snapshots.iter().map(|s| s.sequence_number()),
                )),
                Arc::new(Int64Array::from_iter_values(
                    snapshots.iter().map(|s| s.snapshot_id()),
                )),
                Arc::new(Int64Array::from_iter(
                    snapshots.iter().map(|s| s.parent_snapshot_id()),
                )),
                Arc::new(
                    TimestampMillisecondArray::from_iter_values(
                        snapshots.iter().map(|s| s.timestamp_ms()),
                    )
                    .with_timezone("UTC"),
                ),
                strings(
                    snapshots
                        .iter()
                        .map(|s| s.summary().operation.as_str().to_string()),
                ),
                strings(snapshots.iter().map(summary)),
            ],
        )?)
    }

    /// `key`, `value`: the table's properties, by key.
    pub async fn properties(&self, name: &TableName) -> Result<RecordBatch> {
        let table = self.existing(name).await?;
        let mut pairs: Vec<_> = table.metadata().properties().iter().collect();
        pairs.sort();
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Utf8, false),
            ])),
            vec![
                strings(pairs.iter().map(|(k, _)| k.to_string())),
                strings(pairs.iter().map(|(_, v)| v.to_string())),
            ],
        )?)
    }

    async fn existing(&self, name: &TableName) -> Result<Table> {
        self.catalog().load(name).await?.ok_or_else(|| {
            Error::user(
                format!(
                    "table `{name}` does not exist in Iceberg catalog `{}`",
                    self.catalog().name()
                ),
                "check the namespace and table name",
            )
        })
    }
}

/// The id of the snapshot that was current at `ms`.
fn snapshot_at(name: &TableName, table: &Table, ms: i64) -> Result<i64> {
    let log = table.metadata().history();
    log.iter()
        .rev()
        .find(|entry| entry.timestamp_ms <= ms)
        .map(|entry| entry.snapshot_id)
        .ok_or_else(|| {
            let first = log.first().map_or("none".to_string(), |e| {
                arrow::temporal_conversions::timestamp_ms_to_datetime(e.timestamp_ms)
                    .map_or(e.timestamp_ms.to_string(), |t| format!("{t} UTC"))
            });
            Error::user(
                format!("`{name}` has no snapshot at that time: its first is from {first}"),
                "pick a later time, or a snapshot id (`VERSION AS OF id`) from DESCRIBE HISTORY",
            )
        })
}

fn strings(values: impl Iterator<Item = String>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}
