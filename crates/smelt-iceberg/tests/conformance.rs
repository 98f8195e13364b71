//! The port conformance suite (`smelt_test::scd1`, `smelt_test::scd2`) on Iceberg: bronze,
//! silver and tombstones as Iceberg tables of a SQL catalog (SQLite) in a temporary
//! folder, read back by the `iceberg` crate's own scan (delete files applied), not smelt's
//! lookups.

use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use async_trait::async_trait;
use futures::TryStreamExt;
use smelt_iceberg::{IcebergCatalog, IcebergLake, bridge};
use smelt_spec::{Catalog, CatalogKind, TableName};
use smelt_test::Backend;

struct Iceberg(IcebergLake);

#[async_trait]
impl Backend for Iceberg {
    async fn create(dir: &Path) -> Self {
        let spec = Catalog {
            name: "ice".into(),
            kind: CatalogKind::Sql {
                uri: format!("sqlite://{}", dir.join("catalog.db").display()),
            },
            warehouse: Some(dir.join("warehouse").display().to_string()),
            properties: Vec::new(),
        };
        let catalog = IcebergCatalog::open(&spec, &Default::default())
            .await
            .expect("the catalog");
        Iceberg(IcebergLake::new(catalog))
    }

    fn lake(&self) -> &dyn smelt_engine::ports::Lake {
        &self.0
    }

    fn head(&self) -> String {
        "lake: ./lake\ncatalogs:\n  ice: {type: sql, uri: 'sqlite:catalog.db', warehouse: ./warehouse}\n"
            .into()
    }

    fn name(&self, table: &str) -> String {
        format!("ice.{table}")
    }

    async fn scan(&self, table: &TableName) -> Option<RecordBatch> {
        let table = self.0.catalog().load(table).await.expect("the catalog")?;
        let arrow = iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
            .expect("an Arrow schema");
        let schema = Arc::new(bridge::schema_from_58(&arrow).expect("bridged"));
        let batches: Vec<_> = table
            .scan()
            .select_all()
            .build()
            .expect("a scan")
            .to_arrow()
            .await
            .expect("the scan's stream")
            .try_collect()
            .await
            .expect("the rows");
        let batches = batches
            .into_iter()
            .map(|b| bridge::batch_from_58(b, &schema).expect("bridged"))
            .collect::<Vec<_>>();
        Some(arrow::compute::concat_batches(&schema, &batches).expect("one schema"))
    }
}

smelt_test::conformance_suite!(Iceberg);
