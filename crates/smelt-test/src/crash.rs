//! A table whose commit fails the way a process killed just before it would leave things:
//! everything staged is lost, nothing of this run is visible.

use arrow::array::{BooleanArray, RecordBatch};
use arrow::datatypes::{Field, SchemaRef};
use async_trait::async_trait;
use smelt_engine::ports::{
    Aligned, KeyedTable, LakeTable, LastCommit, OptimizePolicy, OptimizeStats, TableSink,
    TableView, VacuumPlan, VacuumStats, Watermark, WatermarkStore, WriteStats,
};
use smelt_engine::predicate::Predicate;
use smelt_engine::{EngineError, Result};
use smelt_spec::TableName;

/// `table`, whose [`commit`](TableSink::commit) fails with [`EngineError::Failpoint`];
/// every other call goes to `table`.
pub struct CrashOnCommit(pub Box<dyn LakeTable>);

#[async_trait]
impl WatermarkStore for CrashOnCommit {
    async fn watermark(&self, app_id: &str) -> Result<Option<i64>> {
        self.0.watermark(app_id).await
    }

    async fn commit_values(&self, key: &str) -> Result<Vec<String>> {
        self.0.commit_values(key).await
    }

    async fn last_commit(&self) -> Result<Option<LastCommit>> {
        self.0.last_commit().await
    }
}

#[async_trait]
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

    async fn deleted_rows(&self) -> Result<Option<(u64, u64)>> {
        self.0.deleted_rows().await
    }
}

#[async_trait]
impl TableSink for CrashOnCommit {
    async fn create(&mut self, schema: SchemaRef) -> Result<()> {
        self.0.create(schema).await
    }

    async fn stage(
        &mut self,
        rows: RecordBatch,
        replaces: &BooleanArray,
        keys: &[String],
    ) -> Result<()> {
        self.0.stage(rows, replaces, keys).await
    }

    async fn commit(&mut self, _keys: &[String], _watermark: &Watermark) -> Result<WriteStats> {
        Err(EngineError::Failpoint(format!(
            "the commit of `{}`",
            self.0.table()
        )))
    }

    fn property(&self, key: &str) -> Option<String> {
        self.0.property(key)
    }

    async fn set_property(&mut self, key: &str, value: &str) -> Result<()> {
        self.0.set_property(key, value).await
    }

    async fn add_columns(&mut self, fields: Vec<Field>) -> Result<()> {
        self.0.add_columns(fields).await
    }

    async fn widen(&mut self, schema: SchemaRef, keys: &[String]) -> Result<WriteStats> {
        self.0.widen(schema, keys).await
    }

    async fn stage_overwrite(&mut self) -> Result<()> {
        self.0.stage_overwrite().await
    }

    async fn stage_delete_where(&mut self, predicate: Predicate) -> Result<()> {
        self.0.stage_delete_where(predicate).await
    }

    async fn write_merge_on_read(&mut self) -> Result<()> {
        self.0.write_merge_on_read().await
    }

    async fn optimize(&mut self, policy: &OptimizePolicy) -> Result<OptimizeStats> {
        self.0.optimize(policy).await
    }

    async fn vacuum(&mut self, plan: &VacuumPlan) -> Result<VacuumStats> {
        self.0.vacuum(plan).await
    }

    async fn expire(&mut self, column: &str, before_us: i64) -> Result<usize> {
        self.0.expire(column, before_us).await
    }
}

#[async_trait]
impl KeyedTable for CrashOnCommit {
    async fn lookup(&self, keys: RecordBatch, columns: &[String]) -> Result<RecordBatch> {
        self.0.lookup(keys, columns).await
    }

    async fn lookup_aligned(&self, keys: RecordBatch, columns: &[String]) -> Result<Aligned> {
        self.0.lookup_aligned(keys, columns).await
    }

    async fn stage_deletes(&mut self, keys: RecordBatch) -> Result<()> {
        self.0.stage_deletes(keys).await
    }
}
