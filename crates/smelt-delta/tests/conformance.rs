//! The port conformance suite (`smelt_test::scd1`, `smelt_test::scd2`) on Delta: bronze,
//! silver and tombstones as Delta tables in a temporary folder, read back by delta-rs' own
//! scan (not smelt's lookups).

use std::path::Path;

use arrow::array::RecordBatch;
use async_trait::async_trait;
use smelt_delta::Lake;
use smelt_spec::TableName;
use smelt_test::Backend;

struct Delta(Lake);

#[async_trait]
impl Backend for Delta {
    async fn create(dir: &Path) -> Self {
        Delta(Lake::new(dir.join("lake")).expect("a lake"))
    }

    fn lake(&self) -> &dyn smelt_engine::ports::Lake {
        &self.0
    }

    async fn scan(&self, table: &TableName) -> Option<RecordBatch> {
        if !self.0.exists(table).await.expect("listing the lake") {
            return None;
        }
        let ctx = self.0.session().await.expect("a session");
        let frame = ctx
            .sql(&format!("SELECT * FROM {table}"))
            .await
            .expect("a query");
        let schema = frame.schema().inner().clone();
        let batches = frame.collect().await.expect("the rows");
        Some(arrow::compute::concat_batches(&schema, &batches).expect("one schema"))
    }
}

smelt_test::conformance_suite!(Delta);
