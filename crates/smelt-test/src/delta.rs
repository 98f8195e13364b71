//! smelt's Delta lake as a [`Backend`]: the tables in a temporary folder, read back by a
//! DataFusion scan of the Delta table (delta-rs' provider), not smelt's lookups. The
//! conformance suite's Delta backend (`smelt-delta`'s tests) and the lake the Spark engine's
//! model tests write bronze to and read silver from.

use std::path::Path;

use arrow::array::RecordBatch;
use async_trait::async_trait;
use smelt_spec::TableName;

use crate::Backend;

/// A Delta lake in `<dir>/lake`.
pub struct Delta(pub smelt_delta::Lake);

#[async_trait]
impl Backend for Delta {
    async fn create(dir: &Path) -> Self {
        Delta(smelt_delta::Lake::new(dir.join("lake")).expect("a lake"))
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
