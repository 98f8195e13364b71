//! An Iceberg table a flow writes (an apply flow's silver, tombstones and rejects, an append
//! flow's target): created from the flow's schema on the first run, rows written as Parquet
//! data files by the `iceberg` crate, made visible with the watermark in one snapshot —
//! `append` when no stored row changes, otherwise `overwrite`, copy-on-write: the files
//! holding replaced or deleted keys are rewritten without them.
//!
//! The watermark is kept twice in that one metadata commit: in the snapshot's summary
//! (`smelt.watermark.<app id>`, with the source table, its snapshot id when it is an
//! Iceberg table, the run id and report: lineage, `smelt status`) and in the table's
//! properties, which outlive snapshot expiry.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
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
use smelt_engine::ports::{KeyedTable, TableSink, TableView, Watermark, WriteStats, expired_rows};
use smelt_engine::predicate::Predicate;
use smelt_engine::{EngineError, Result as EngineResult};
use smelt_spec::TableName;

use crate::bridge;
use crate::catalog::IcebergCatalog;
use crate::cow;
use crate::deletes;
use crate::error::{Context, Error, Result};
use crate::schema::{Schemas, schemas_of};
use crate::snapshot::{Change, commit};

mod watermark;

use smelt_engine::ports::keys::WATERMARK;

/// An Iceberg table an append flow writes.
pub struct IcebergTable {
    name: TableName,
    catalog: Arc<IcebergCatalog>,
    table: Option<Table>,
    schema: Option<Schemas>,
    staged: Vec<iceberg::spec::DataFile>,
    properties: HashMap<String, String>,
    /// Keys (key columns only) whose stored rows the next commit removes.
    remove_keys: Vec<RecordBatch>,
    /// The key column names of `remove_keys`.
    key_names: Vec<String>,
    /// The next commit replaces every stored row (`--full-refresh`).
    overwrite: bool,
    /// The next commit removes the stored rows matching this (replace_where).
    delete_where: Option<Predicate>,
    /// Rows replaced or deleted by key are marked in position-delete files, not rewritten.
    merge_on_read: bool,
    /// The schema with columns added in this run, made current by the next commit.
    new_schema: Option<iceberg::spec::SchemaRef>,
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
            remove_keys: Vec::new(),
            key_names: Vec::new(),
            overwrite: false,
            delete_where: None,
            merge_on_read: false,
            new_schema: None,
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

    async fn write(&mut self, rows: RecordBatch) -> Result<()> {
        let table = self.existing()?.clone();
        crate::snapshot::check_writable(&self.name, table.metadata())?;
        let schema = self.schema.clone().expect("a table has a schema");
        let rows = bridge::conform(rows, &schema.with_ids.arrow)?;
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
            self.new_schema
                .clone()
                .unwrap_or_else(|| metadata.current_schema().clone()),
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

impl IcebergTable {
    /// The live files the next commit removes (those holding a key being replaced or
    /// deleted or a row matching the replace_where predicate, or all with
    /// `--full-refresh`), their rows that stay staged again, and how many stored rows go.
    async fn removals(&mut self, table: &Table) -> Result<Removals> {
        if self.schema.is_none() {
            return Ok(Removals::default());
        }
        if self.overwrite {
            self.overwrite = false;
            self.remove_keys.clear();
            self.delete_where = None;
            // One task per split of a file: count each file's rows once.
            let mut files: HashMap<String, u64> = HashMap::new();
            for task in cow::live_files(&self.name, table, None).await? {
                files.insert(task.data_file_path, task.record_count.unwrap_or(0));
            }
            let rows = files.values().sum::<u64>() as usize;
            return Ok(Removals {
                files: files.into_keys().collect(),
                rows,
                all: true,
                ..Removals::default()
            });
        }
        let index = cow::keys_of(&std::mem::take(&mut self.remove_keys))?;
        let predicate = self.delete_where.take();
        if index.is_none() && predicate.is_none() {
            return Ok(Removals::default());
        }
        let keys = self.key_names.clone();
        let removes = |batch: &RecordBatch| -> Result<BooleanArray> {
            let by_key = index
                .as_ref()
                .map(|i| cow::matches(i, batch, &keys))
                .transpose()?;
            let by_predicate = predicate.as_ref().map(|p| p.evaluate(batch)).transpose()?;
            Ok(match (by_key, by_predicate) {
                (Some(k), Some(p)) => arrow::compute::or(&k, &p)?,
                (Some(hit), None) | (None, Some(hit)) => hit,
                (None, None) => BooleanArray::from(vec![false; batch.num_rows()]),
            })
        };
        if self.merge_on_read && predicate.is_none() {
            // Only the key columns are read to find the rows' positions.
            let plain = &self.schema.as_ref().expect("a table has a schema").plain;
            let at: Vec<usize> = (0..plain.fields().len())
                .filter(|&i| keys.contains(plain.field(i).name()))
                .collect();
            let key_schema = Arc::new(plain.project(&at)?);
            let marks = deletes::mark(&self.name, table, &key_schema, &removes).await?;
            let rows = marks.iter().map(|(_, p)| p.len()).sum();
            let file = deletes::write(&self.name, table, marks).await?;
            return Ok(Removals {
                deletes: file.into_iter().collect(),
                rows,
                ..Removals::default()
            });
        }
        let (files, rows) = self.rewrite(table, &removes).await?;
        Ok(Removals {
            files,
            rows,
            ..Removals::default()
        })
    }

    /// Rewrites the live files holding a row that `removes` marks: their rows that stay
    /// are written again, one file at a time; returns the files and how many rows go.
    async fn rewrite(
        &mut self,
        table: &Table,
        removes: &(dyn Fn(&RecordBatch) -> Result<BooleanArray> + Sync),
    ) -> Result<(HashSet<String>, usize)> {
        let plain = self
            .schema
            .as_ref()
            .expect("a table has a schema")
            .plain
            .clone();
        let mut removed = HashSet::new();
        let mut rows = 0;
        for file in deletes::live_files(&self.name, table, None).await? {
            let path = file.task.data_file_path.clone();
            let (mut kept, mut gone) = (Vec::new(), 0);
            for batch in deletes::read_live(&self.name, table, file, &plain).await? {
                let hit = removes(&batch)?;
                gone += hit.true_count();
                let stay = filter_record_batch(&batch, &arrow::compute::not(&hit)?)?;
                if stay.num_rows() > 0 {
                    kept.push(stay);
                }
            }
            if gone == 0 {
                continue;
            }
            rows += gone;
            // The rows that stay go to one new file (the writer rolls over large ones).
            let kept = arrow::compute::concat_batches(&plain, &kept)?;
            if kept.num_rows() > 0 {
                self.write(kept).await?;
            }
            removed.insert(path);
        }
        Ok((removed, rows))
    }
}

/// What a commit removes.
#[derive(Default)]
struct Removals {
    /// Live data files (copy-on-write: their rows that stay are staged again).
    files: HashSet<String>,
    /// Position-delete files marking the rows removed (merge-on-read).
    deletes: Vec<iceberg::spec::DataFile>,
    /// Stored rows removed.
    rows: usize,
    /// Every data and delete file goes (`--full-refresh`).
    all: bool,
}

fn schemas(name: &TableName, table: &Table) -> Result<Schemas> {
    schemas_of(name, table.metadata().current_schema())
}

#[async_trait]
impl TableView for IcebergTable {
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

    async fn deleted_rows(&self) -> EngineResult<Option<(u64, u64)>> {
        // As the snapshot summary counts them (position deletes; equality deletes say no
        // row count).
        let Some(snapshot) = self
            .table
            .as_ref()
            .and_then(|t| t.metadata().current_snapshot())
        else {
            return Ok(None);
        };
        let summary = &snapshot.summary().additional_properties;
        let count = |k: &str| summary.get(k).and_then(|v| v.parse::<u64>().ok());
        Ok(count("total-records").map(|rows| {
            let deleted = count("total-position-deletes").unwrap_or(0);
            (deleted.min(rows), rows)
        }))
    }
}

#[async_trait]
impl TableSink for IcebergTable {
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
        keys: &[String],
    ) -> EngineResult<()> {
        if replaces.true_count() > 0 {
            let replaced = filter_record_batch(&rows, replaces).map_err(Error::from)?;
            let columns = cow::key_columns(&replaced, keys)?;
            let fields: Vec<_> = keys
                .iter()
                .map(|k| replaced.schema().field_with_name(k).cloned())
                .collect::<std::result::Result<_, _>>()
                .map_err(Error::from)?;
            self.remove_keys.push(
                RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
                    .map_err(Error::from)?,
            );
            self.key_names = keys.to_vec();
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
        let summary = watermark::summary(watermark);
        let mut properties = std::mem::take(&mut self.properties);
        properties.insert(
            format!("{WATERMARK}{}", watermark.app_id),
            watermark.version.to_string(),
        );
        let removals = self.removals(&table).await?;
        let added = std::mem::take(&mut self.staged);
        let stats = WriteStats {
            files_added: added.len() + removals.deletes.len(),
            files_removed: removals.files.len(),
            bytes_written: added
                .iter()
                .chain(&removals.deletes)
                .map(|f| f.file_size_in_bytes())
                .sum(),
            rows_removed: removals.rows,
            ..WriteStats::default()
        };
        let table = commit(
            &self.catalog,
            &self.name,
            &table,
            Change {
                added,
                removed: removals.files,
                added_deletes: removals.deletes,
                drop_deletes: removals.all,
                schema: self.new_schema.take(),
                summary,
                properties,
            },
        )
        .await?;
        let version = table
            .metadata()
            .current_snapshot()
            .map_or(0, |s| s.sequence_number());
        self.table = Some(table.clone());
        if !watermark.extra.is_empty() {
            smelt_engine::failpoint("before_iceberg_ledger")?;
        }
        for (key, _) in &watermark.extra {
            crate::ledger::read(self.catalog.storage(), &table, key).await?;
        }
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

    async fn stage_overwrite(&mut self) -> EngineResult<()> {
        self.overwrite = true;
        Ok(())
    }

    async fn add_columns(&mut self, fields: Vec<arrow::datatypes::Field>) -> EngineResult<()> {
        let table = self.existing()?.clone();
        let current = self
            .new_schema
            .clone()
            .unwrap_or_else(|| table.metadata().current_schema().clone());
        let schema = crate::schema::with_columns(&self.name, &table, &current, &fields)?;
        self.schema = Some(schemas_of(&self.name, &schema)?);
        self.new_schema = Some(schema);
        Ok(())
    }

    async fn write_merge_on_read(&mut self) -> EngineResult<()> {
        self.merge_on_read = true;
        Ok(())
    }

    async fn stage_delete_where(&mut self, predicate: Predicate) -> EngineResult<()> {
        self.delete_where = Some(predicate);
        Ok(())
    }

    async fn expire(&mut self, column: &str, before_us: i64) -> EngineResult<usize> {
        let Some(table) = self.table.clone() else {
            return Ok(0);
        };
        if !self.staged.is_empty() {
            return Err(EngineError::Internal(format!(
                "expiring rows of `{}` with rows staged",
                self.name
            )));
        }
        let name = self.name.clone();
        let before = |batch: &RecordBatch| -> Result<BooleanArray> {
            Ok(expired_rows(batch, &name, column, before_us)?)
        };
        let (removed, rows) = self.rewrite(&table, &before).await?;
        if removed.is_empty() {
            return Ok(0);
        }
        let added = std::mem::take(&mut self.staged);
        let table = commit(
            &self.catalog,
            &self.name,
            &table,
            Change {
                added,
                removed,
                ..Change::default()
            },
        )
        .await?;
        self.table = Some(table);
        Ok(rows)
    }
}

#[async_trait]
impl KeyedTable for IcebergTable {
    async fn lookup(&self, keys: RecordBatch, columns: &[String]) -> EngineResult<RecordBatch> {
        let (Some(table), Some(schema)) = (&self.table, &self.schema) else {
            return Err(EngineError::Internal(format!(
                "looking up rows of `{}`, which does not exist",
                self.name
            )));
        };
        Ok(crate::deletes::lookup(&self.name, table, &schema.plain, &keys, columns).await?)
    }

    async fn stage_deletes(&mut self, keys: RecordBatch) -> EngineResult<()> {
        self.key_names = keys
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        self.remove_keys.push(keys);
        Ok(())
    }
}
