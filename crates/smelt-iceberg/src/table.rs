//! An Iceberg table a flow appends to (an append flow's target): created from the flow's
//! schema on the first run, rows written as Parquet data files by the `iceberg` crate, made
//! visible with the watermark in one `append` snapshot.
//!
//! The watermark is kept twice in that one metadata commit: in the snapshot's summary
//! (`smelt.watermark.<app id>`, with the run id and report: lineage, `smelt status`) and in
//! the table's properties, which outlive snapshot expiry.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use smelt_engine::ports::{
    KeyedTable, LastCommit, TableSink, Watermark, WatermarkStore, WriteStats,
};
use smelt_engine::{EngineError, Result as EngineResult};
use smelt_spec::TableName;

use crate::bridge;
use crate::catalog::IcebergCatalog;
use crate::error::{Context, Error, Result};
use crate::snapshot::{Change, commit_append};

/// Summary and property key prefix of a flow's watermark.
const WATERMARK: &str = "smelt.watermark.";
/// Summary key of the run id.
const RUN_ID: &str = "smelt.run-id";
/// Summary key of the flow's report.
const REPORT: &str = "smelt.report";
/// Summary key prefix of extra commit entries.
const EXTRA: &str = "smelt.extra.";

/// An Iceberg table an append flow writes.
pub struct IcebergTable {
    name: TableName,
    catalog: Arc<IcebergCatalog>,
    table: Option<Table>,
    schema: Option<Schemas>,
    staged: Vec<iceberg::spec::DataFile>,
    properties: HashMap<String, String>,
}

/// The table's schema for smelt (no field ids) and for the writer (Arrow 58, field ids).
#[derive(Clone)]
struct Schemas {
    plain: SchemaRef,
    with_ids: bridge::Schemas,
}

impl IcebergTable {
    /// Table `name` of `catalog` (`None`: it does not exist yet).
    pub fn new(
        name: TableName,
        catalog: Arc<IcebergCatalog>,
        table: Option<Table>,
    ) -> Result<Self> {
        let schema = table.as_ref().map(|t| schemas(&name, t)).transpose()?;
        Ok(IcebergTable {
            name,
            catalog,
            table,
            schema,
            staged: Vec::new(),
            properties: HashMap::new(),
        })
    }

    fn existing(&self) -> Result<&Table> {
        self.table.as_ref().ok_or_else(|| {
            Error::user(
                format!("`{}` does not exist yet", self.name),
                "the flow creates it on its first run",
            )
        })
    }

    /// The summaries of the main branch's snapshots, newest first.
    fn summaries(&self) -> Vec<HashMap<String, String>> {
        let Some(table) = &self.table else {
            return Vec::new();
        };
        let metadata = table.metadata_ref();
        let Some(current) = metadata.current_snapshot_id() else {
            return Vec::new();
        };
        iceberg::util::snapshot::ancestors_of(&metadata, current)
            .map(|s| s.summary().additional_properties.clone())
            .collect()
    }

    async fn write(&mut self, rows: RecordBatch) -> Result<()> {
        let table = self.existing()?.clone();
        let schema = self.schema.clone().expect("a table has a schema");
        let rows = bridge::batch_to_58(rows, &schema.with_ids.arrow58)?;
        let metadata = table.metadata();
        let locations = DefaultLocationGenerator::new(metadata)
            .context(|| format!("writing `{}`", self.name))?;
        let names = DefaultFileNameGenerator::new(
            format!("smelt-{}", uuid::Uuid::new_v4()),
            None,
            iceberg::spec::DataFileFormat::Parquet,
        );
        let parquet = ParquetWriterBuilder::new(
            parquet58::file::properties::WriterProperties::builder()
                .set_compression(parquet58::basic::Compression::ZSTD(Default::default()))
                .build(),
            metadata.current_schema().clone(),
        );
        let rolling = RollingFileWriterBuilder::new_with_default_file_size(
            parquet,
            table.file_io().clone(),
            locations,
            names,
        );
        let mut writer = DataFileWriterBuilder::new(rolling)
            .build(None)
            .await
            .context(|| format!("writing `{}`", self.name))?;
        writer
            .write(rows)
            .await
            .context(|| format!("writing `{}`", self.name))?;
        let files = writer
            .close()
            .await
            .context(|| format!("writing `{}`", self.name))?;
        self.staged.extend(files);
        Ok(())
    }
}

fn schemas(name: &TableName, table: &Table) -> Result<Schemas> {
    let arrow = iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
        .context(|| format!("reading the schema of `{name}`"))?;
    let with_ids = bridge::Schemas::from_58(Arc::new(arrow))?;
    let plain = Arc::new(Schema::new(
        with_ids
            .arrow
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_metadata(Default::default()))
            .collect::<Vec<_>>(),
    ));
    Ok(Schemas { plain, with_ids })
}

#[async_trait]
impl WatermarkStore for IcebergTable {
    async fn watermark(&self, app_id: &str) -> EngineResult<Option<i64>> {
        let key = format!("{WATERMARK}{app_id}");
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let value = table
            .metadata()
            .properties()
            .get(&key)
            .cloned()
            .or_else(|| {
                self.summaries()
                    .into_iter()
                    .find_map(|s| s.get(&key).cloned())
            });
        value
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    EngineError::user(
                        format!("`{}`: watermark `{key}` is `{v}`, not a version", self.name),
                        format!("remove the table property `{key}` and rebuild with `smelt run --full-refresh`"),
                    )
                })
            })
            .transpose()
    }

    async fn commit_values(&self, key: &str) -> EngineResult<Vec<String>> {
        let key = format!("{EXTRA}{key}");
        let mut values: Vec<String> = self
            .summaries()
            .into_iter()
            .filter_map(|s| s.get(&key).cloned())
            .collect();
        values.reverse();
        Ok(values)
    }

    async fn last_commit(&self) -> EngineResult<Option<LastCommit>> {
        let Some(snapshot) = self
            .table
            .as_ref()
            .and_then(|t| t.metadata().current_snapshot().cloned())
        else {
            return Ok(None);
        };
        let summary = &snapshot.summary().additional_properties;
        Ok(Some(LastCommit {
            at_ms: snapshot.timestamp_ms(),
            run_id: summary.get(RUN_ID).cloned(),
            report: summary.get(REPORT).cloned(),
        }))
    }
}

#[async_trait]
impl TableSink for IcebergTable {
    fn table(&self) -> &TableName {
        &self.name
    }

    fn schema(&self) -> Option<SchemaRef> {
        self.schema.as_ref().map(|s| s.plain.clone())
    }

    fn version(&self) -> Option<i64> {
        self.table.as_ref().map(|t| {
            t.metadata()
                .current_snapshot()
                .map_or(0, |s| s.sequence_number())
        })
    }

    async fn create(&mut self, schema: SchemaRef) -> EngineResult<()> {
        let arrow58 = bridge::schema_to_58(&schema).map_err(Error::from)?;
        let iceberg_schema = iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&arrow58)
            .context(|| format!("mapping the schema of `{}` to Iceberg types", self.name))?;
        let table = self.catalog.create(&self.name, iceberg_schema).await?;
        self.schema = Some(schemas(&self.name, &table)?);
        self.table = Some(table);
        Ok(())
    }

    async fn stage(
        &mut self,
        rows: RecordBatch,
        replaces: &BooleanArray,
        _keys: &[String],
    ) -> EngineResult<()> {
        if replaces.true_count() > 0 {
            return Err(EngineError::user(
                format!(
                    "`{}`: smelt does not replace rows of Iceberg tables yet",
                    self.name
                ),
                "write the flow's table to the Delta lake (`schema.table`)",
            ));
        }
        if rows.num_rows() == 0 {
            return Ok(());
        }
        Ok(self.write(rows).await?)
    }

    async fn commit(
        &mut self,
        _keys: &[String],
        watermark: &Watermark,
    ) -> EngineResult<WriteStats> {
        let table = self.existing()?.clone();
        let mut summary = HashMap::from([
            (
                format!("{WATERMARK}{}", watermark.app_id),
                watermark.version.to_string(),
            ),
            (RUN_ID.to_string(), watermark.run_id.clone()),
        ]);
        if let Some(report) = &watermark.report {
            summary.insert(REPORT.to_string(), report.clone());
        }
        for (key, value) in &watermark.extra {
            summary.insert(format!("{EXTRA}{key}"), value.clone());
        }
        let mut properties = std::mem::take(&mut self.properties);
        properties.insert(
            format!("{WATERMARK}{}", watermark.app_id),
            watermark.version.to_string(),
        );
        let added = std::mem::take(&mut self.staged);
        let stats = WriteStats {
            files_added: added.len(),
            bytes_written: added.iter().map(|f| f.file_size_in_bytes()).sum(),
            ..WriteStats::default()
        };
        let table = commit_append(
            &self.catalog,
            &self.name,
            &table,
            Change {
                added,
                summary,
                properties,
            },
        )
        .await?;
        let version = table
            .metadata()
            .current_snapshot()
            .map_or(0, |s| s.sequence_number());
        self.table = Some(table);
        Ok(WriteStats { version, ..stats })
    }

    fn property(&self, key: &str) -> Option<String> {
        self.properties.get(key).cloned().or_else(|| {
            self.table
                .as_ref()
                .and_then(|t| t.metadata().properties().get(key).cloned())
        })
    }

    async fn set_property(&mut self, key: &str, value: &str) -> EngineResult<()> {
        self.properties.insert(key.to_string(), value.to_string());
        Ok(())
    }
}

#[async_trait]
impl KeyedTable for IcebergTable {
    async fn lookup(&self, _keys: RecordBatch, _columns: &[String]) -> EngineResult<RecordBatch> {
        Err(not_keyed(&self.name))
    }

    async fn stage_deletes(&mut self, _keys: RecordBatch) -> EngineResult<()> {
        Err(not_keyed(&self.name))
    }
}

fn not_keyed(name: &TableName) -> EngineError {
    EngineError::user(
        format!("`{name}`: apply flows into Iceberg tables are not supported yet"),
        "write the apply flow's silver to the Delta lake (`schema.table`); append flows may write Iceberg tables",
    )
}
