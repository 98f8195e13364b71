//! The tables of the pipeline's catalogs (`catalog.namespace.table`: Iceberg) in `smelt
//! sql`: read in queries (joins with the lake's Delta tables included, and as the source of
//! an `INSERT … SELECT` or `CREATE TABLE … AS SELECT` into the lake), time-travelled, and
//! described; never written. smelt-delta does not know their format: the caller opens them
//! behind [`CatalogTables`].

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::RecordBatch;
use async_trait::async_trait;
use deltalake::datafusion::catalog::{CatalogProvider, MemoryCatalogProvider};
use deltalake::datafusion::common::TableReference;
use deltalake::datafusion::prelude::SessionContext;
use deltalake::datafusion::sql::sqlparser::ast::{
    FromTable, ObjectName, Statement, TableFactor, TableObject,
};
use smelt_engine::EngineError;
use smelt_engine::ports::ChangeSource;
use smelt_spec::TableName;

use crate::error::{Context, Error, Result};

/// Which state of a table to read.
#[derive(Debug, Clone)]
pub enum AsOf {
    /// `VERSION AS OF n`: a Delta version, an Iceberg snapshot id.
    Version(i64),
    /// `TIMESTAMP AS OF` / `FOR SYSTEM_TIME AS OF`.
    Time(chrono::DateTime<chrono::Utc>),
}

/// What `DESCRIBE` / `SHOW TBLPROPERTIES` asks of a catalog table.
#[derive(Debug, Clone, Copy)]
pub enum Describe {
    /// `DESCRIBE t`: `col_name`, `data_type`, `nullable`.
    Columns,
    /// `DESCRIBE HISTORY t [LIMIT n]`: one row per snapshot, newest first.
    History(Option<usize>),
    /// `SHOW TBLPROPERTIES t`: `key`, `value`.
    Properties,
}

/// The tables of the pipeline's catalogs, as `smelt sql` reads them.
#[async_trait]
pub trait CatalogTables: Send + Sync {
    /// The rows of table `name` (which names its catalog) now, or as of `at`.
    async fn rows(
        &self,
        name: &TableName,
        at: Option<&AsOf>,
    ) -> smelt_engine::Result<Box<dyn ChangeSource>>;
    /// The table's metadata, as rows.
    async fn describe(&self, name: &TableName, what: Describe)
    -> smelt_engine::Result<RecordBatch>;
}

/// No catalogs: every `catalog.namespace.table` is refused, naming where catalogs are
/// defined.
pub struct NoCatalogs;

impl NoCatalogs {
    fn refuse(name: &TableName) -> EngineError {
        EngineError::user(
            format!(
                "`{name}` names catalog `{}`, and no catalog is defined",
                name.catalog.as_deref().unwrap_or_default()
            ),
            "define it under `catalogs:` in the pipeline file (smelt sql reads ./smelt.yaml, or the file given with --pipeline)",
        )
    }
}

#[async_trait]
impl CatalogTables for NoCatalogs {
    async fn rows(
        &self,
        name: &TableName,
        _at: Option<&AsOf>,
    ) -> smelt_engine::Result<Box<dyn ChangeSource>> {
        Err(Self::refuse(name))
    }

    async fn describe(
        &self,
        name: &TableName,
        _what: Describe,
    ) -> smelt_engine::Result<RecordBatch> {
        Err(Self::refuse(name))
    }
}

/// Registers in `ctx` every catalog table `statement` reads (time-travelled ones are
/// already resolved), under its own three-part name.
pub(super) async fn resolve(
    catalogs: &dyn CatalogTables,
    ctx: &SessionContext,
    statement: &Statement,
) -> Result<()> {
    let mut names = BTreeSet::new();
    let _ = deltalake::datafusion::sql::sqlparser::ast::visit_relations(
        statement,
        |name: &ObjectName| {
            if name.0.len() == 3
                && let Some(table) = TableName::parse(&parts(name).join("."))
            {
                names.insert(table);
            }
            ControlFlow::<()>::Continue(())
        },
    );
    for name in names {
        let source = catalogs.rows(&name, None).await?;
        register(ctx, &name, super::snapshot::of_source(source)?)?;
    }
    Ok(())
}

/// Registers `provider` in `ctx` as the catalog table `name`.
pub(super) fn register(
    ctx: &SessionContext,
    name: &TableName,
    provider: Arc<dyn deltalake::datafusion::catalog::TableProvider>,
) -> Result<()> {
    let catalog_name = name.catalog.as_deref().unwrap_or_default();
    let catalog = match ctx.catalog(catalog_name) {
        Some(c) => c,
        None => {
            let c: Arc<dyn CatalogProvider> = Arc::new(MemoryCatalogProvider::new());
            ctx.register_catalog(catalog_name, Arc::clone(&c));
            c
        }
    };
    if catalog.schema(&name.schema).is_none() {
        catalog
            .register_schema(
                &name.schema,
                Arc::new(deltalake::datafusion::catalog::MemorySchemaProvider::new()),
            )
            .context(|| format!("registering `{name}`"))?;
    }
    ctx.register_table(
        TableReference::full(catalog_name, name.schema.as_str(), name.table.as_str()),
        provider,
    )
    .context(|| format!("registering `{name}`"))?;
    Ok(())
}

/// Refuses a statement that writes a catalog table: `smelt sql` only reads them.
pub(super) fn refuse_writes(statement: &Statement) -> Result<()> {
    let Some(name) = written(statement).into_iter().find(|n| n.0.len() > 2) else {
        return Ok(());
    };
    let catalog = parts(name).first().cloned().unwrap_or_default();
    Err(Error::user(
        format!(
            "`{name}` is a table of catalog `{catalog}`: smelt sql reads the tables of catalogs but does not write them"
        ),
        "write it with a flow (append, apply or replace_where into it), or with Spark or pyiceberg",
    ))
}

/// The tables `statement` writes (creates, alters, inserts into, updates, deletes from,
/// merges into, truncates, drops).
fn written(statement: &Statement) -> Vec<&ObjectName> {
    fn table(f: &TableFactor) -> Option<&ObjectName> {
        match f {
            TableFactor::Table { name, .. } => Some(name),
            _ => None,
        }
    }
    match statement {
        Statement::CreateTable(create) => vec![&create.name],
        Statement::AlterTable(alter) => vec![&alter.name],
        Statement::Truncate(truncate) => truncate.table_names.iter().map(|t| &t.name).collect(),
        Statement::Insert(insert) => match &insert.table {
            TableObject::TableName(name) => vec![name],
            _ => Vec::new(),
        },
        Statement::Update(update) => table(&update.table.relation).into_iter().collect(),
        Statement::Delete(delete) => {
            let from = match &delete.from {
                FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
            };
            delete
                .tables
                .iter()
                .chain(from.iter().filter_map(|t| table(&t.relation)))
                .collect()
        }
        Statement::Merge(merge) => table(&merge.table).into_iter().collect(),
        Statement::Drop { names, .. } => names.iter().collect(),
        _ => Vec::new(),
    }
}

/// The parts of a name, unquoted.
fn parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .filter_map(|p| p.as_ident())
        .map(|i| i.value.clone())
        .collect()
}
