//! What the model tests (`scd1_model.rs`, `scd2_model.rs`) share: bronze commits, and a
//! silver table whose commit fails as a crash would leave it.

use arrow::array::{BooleanArray, RecordBatch};
use arrow::datatypes::{Field, SchemaRef};
use smelt_delta::Lake;
use smelt_delta::table::DeltaLakeTable;
use smelt_engine::ports::{
    KeyedTable, TableSink, TableView, Watermark, WatermarkStore, WriteStats,
};
use smelt_spec::TableName;

/// Commits `batch` (of `schema`) to bronze table `b.t` as bronze commit `commit`, creating
/// the table first.
pub async fn commit_bronze(lake: &Lake, schema: SchemaRef, batch: RecordBatch, commit: i64) {
    let rows = batch.num_rows();
    let name = TableName::parse("b.t").unwrap();
    let mut bronze = DeltaLakeTable::open(lake, &name)
        .await
        .unwrap()
        .without_compaction();
    if bronze.schema().is_none() {
        bronze.create(schema).await.unwrap();
    }
    bronze
        .stage(batch, &BooleanArray::from(vec![false; rows]), &[])
        .await
        .unwrap();
    let watermark = Watermark {
        app_id: "test/bronze".into(),
        version: commit,
        run_id: format!("bronze-{commit}"),
        report: None,
        extra: Vec::new(),
        source: None,
    };
    bronze.commit(&[], &watermark).await.unwrap();
}

/// A silver table whose commit fails (the process dies after the tombstones commit).
pub struct CrashOnCommit(pub DeltaLakeTable);

#[async_trait::async_trait]
impl WatermarkStore for CrashOnCommit {
    async fn watermark(&self, app_id: &str) -> smelt_engine::Result<Option<i64>> {
        self.0.watermark(app_id).await
    }

    async fn commit_values(&self, key: &str) -> smelt_engine::Result<Vec<String>> {
        self.0.commit_values(key).await
    }
}

impl TableView for CrashOnCommit {
    fn table(&self) -> &TableName {
        self.0.table()
    }

    fn schema(&self) -> Option<SchemaRef> {
        self.0.schema()
    }

    fn version(&self) -> Option<i64> {
        self.0.version()
    }
}

#[async_trait::async_trait]
impl TableSink for CrashOnCommit {
    async fn create(&mut self, schema: SchemaRef) -> smelt_engine::Result<()> {
        self.0.create(schema).await
    }

    async fn stage(
        &mut self,
        rows: RecordBatch,
        replaces: &BooleanArray,
        keys: &[String],
    ) -> smelt_engine::Result<()> {
        self.0.stage(rows, replaces, keys).await
    }

    fn property(&self, key: &str) -> Option<String> {
        self.0.property(key)
    }

    async fn set_property(&mut self, key: &str, value: &str) -> smelt_engine::Result<()> {
        self.0.set_property(key, value).await
    }

    async fn add_columns(&mut self, fields: Vec<Field>) -> smelt_engine::Result<()> {
        self.0.add_columns(fields).await
    }

    async fn widen(
        &mut self,
        schema: SchemaRef,
        keys: &[String],
    ) -> smelt_engine::Result<WriteStats> {
        self.0.widen(schema, keys).await
    }

    async fn stage_overwrite(&mut self) -> smelt_engine::Result<()> {
        self.0.stage_overwrite().await
    }

    async fn commit(&mut self, _: &[String], _: &Watermark) -> smelt_engine::Result<WriteStats> {
        Err(smelt_engine::EngineError::Failpoint("silver commit".into()))
    }

    async fn expire(&mut self, column: &str, before_us: i64) -> smelt_engine::Result<usize> {
        self.0.expire(column, before_us).await
    }
}

#[async_trait::async_trait]
impl KeyedTable for CrashOnCommit {
    async fn lookup(
        &self,
        keys: RecordBatch,
        columns: &[String],
    ) -> smelt_engine::Result<RecordBatch> {
        self.0.lookup(keys, columns).await
    }

    async fn lookup_aligned(
        &self,
        keys: RecordBatch,
        columns: &[String],
    ) -> smelt_engine::Result<smelt_engine::ports::Aligned> {
        self.0.lookup_aligned(keys, columns).await
    }

    async fn stage_deletes(&mut self, keys: RecordBatch) -> smelt_engine::Result<()> {
        self.0.stage_deletes(keys).await
    }
}
