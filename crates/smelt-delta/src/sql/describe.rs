//! A table's metadata as rows: Spark's `SHOW TBLPROPERTIES t [('key')]`, `DESCRIBE t`,
//! `DESCRIBE DETAIL t` and `DESCRIBE HISTORY t`. The parser reads each as a query of
//! `__smelt_describe('what', 'schema.table')` (`smelt_spec::ddl::parse_script`), which this
//! module resolves to a table of rows registered in the session, so they can be filtered
//! and ordered like any query.

use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use deltalake::DeltaTable;
use deltalake::datafusion::common::TableReference;
use deltalake::datafusion::datasource::MemTable;
use deltalake::datafusion::prelude::SessionContext;
use deltalake::datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, Ident, ObjectName, Statement, TableFactor, Value, VisitMut,
    VisitorMut,
};
use smelt_spec::TableName;
use smelt_spec::ddl::DESCRIBE_FUNCTION;

use super::catalogs::{CatalogTables, Describe};
use crate::Lake;
use crate::error::{Context, Error, Result};

/// The session schema the rows are registered in.
const SCHEMA: &str = "__smelt_describe";

/// Replaces each `__smelt_describe(…)` of `statement` by a table of its rows.
pub(super) async fn resolve(
    lake: &Lake,
    catalogs: &dyn CatalogTables,
    ctx: &SessionContext,
    statement: &mut Statement,
) -> Result<()> {
    let mut visitor = Calls::default();
    let _ = statement.visit(&mut visitor);
    if visitor.found.is_empty() {
        return Ok(());
    }
    super::session_schema(ctx, SCHEMA)?;
    for (what, table, limit, registered) in visitor.found {
        let name = TableName::parse(&table).ok_or_else(|| {
            Error::user(
                format!("`{table}` is not a `schema.table` name"),
                "name lake tables `schema.table`, e.g. `bronze.product2`",
            )
        })?;
        let batch = if name.catalog.is_some() {
            catalog_table(catalogs, &name, &what, limit).await?
        } else {
            lake_table(lake, &name, &what, limit).await?
        };
        let provider = MemTable::try_new(batch.schema(), vec![vec![batch]])
            .context(|| format!("describing `{name}`"))?;
        ctx.register_table(
            TableReference::partial(SCHEMA, registered.as_str()),
            Arc::new(provider),
        )
        .context(|| format!("describing `{name}`"))?;
    }
    Ok(())
}

/// The rows describing Delta table `name`.
async fn lake_table(
    lake: &Lake,
    name: &TableName,
    what: &str,
    limit: Option<usize>,
) -> Result<RecordBatch> {
    let delta = lake.open_existing(name, "check the table name").await?;
    Ok(match what {
        "tblproperties" => properties(&delta, name)?,
        "columns" => columns(&delta, name)?,
        "detail" => detail(lake, &delta, name)?,
        "history" => history(&delta, name, limit).await?,
        other => return Err(Error::internal(format!("no table metadata `{other}`"))),
    })
}

/// The rows describing catalog table `name`.
async fn catalog_table(
    catalogs: &dyn CatalogTables,
    name: &TableName,
    what: &str,
    limit: Option<usize>,
) -> Result<RecordBatch> {
    let what = match what {
        "columns" => Describe::Columns,
        "history" => Describe::History(limit),
        "tblproperties" => Describe::Properties,
        "detail" => {
            return Err(Error::user(
                format!("DESCRIBE DETAIL reads Delta tables; `{name}` is a table of a catalog"),
                format!(
                    "`DESCRIBE {name}`, `DESCRIBE HISTORY {name}` and `SHOW TBLPROPERTIES {name}` describe it"
                ),
            ));
        }
        other => return Err(Error::internal(format!("no table metadata `{other}`"))),
    };
    Ok(catalogs.describe(name, what).await?)
}

fn strings(values: Vec<String>) -> ArrayRef {
    Arc::new(StringArray::from(values))
}

/// `key`, `value`: the table's properties, by key.
fn properties(table: &DeltaTable, name: &TableName) -> Result<RecordBatch> {
    let state = table.snapshot().context(|| format!("reading `{name}`"))?;
    let mut pairs: Vec<(String, String)> = state
        .metadata()
        .configuration()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    pairs.sort();
    let (keys, values): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Utf8, false),
        ])),
        vec![strings(keys), strings(values)],
    )?)
}

/// `col_name`, `data_type` (Delta's type names), `nullable`: the table's columns in order.
fn columns(table: &DeltaTable, name: &TableName) -> Result<RecordBatch> {
    let state = table.snapshot().context(|| format!("reading `{name}`"))?;
    let schema = state.snapshot().schema();
    let fields: Vec<_> = schema.fields().collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("col_name", DataType::Utf8, false),
            Field::new("data_type", DataType::Utf8, false),
            Field::new("nullable", DataType::Boolean, false),
        ])),
        vec![
            strings(fields.iter().map(|f| f.name().clone()).collect()),
            strings(fields.iter().map(|f| f.data_type().to_string()).collect()),
            Arc::new(BooleanArray::from(
                fields.iter().map(|f| f.is_nullable()).collect::<Vec<_>>(),
            )),
        ],
    )?)
}

/// One row: Databricks' `DESCRIBE DETAIL` columns smelt knows.
fn detail(lake: &Lake, table: &DeltaTable, name: &TableName) -> Result<RecordBatch> {
    let state = table.snapshot().context(|| format!("reading `{name}`"))?;
    let protocol = state.protocol();
    let files: Vec<_> = state.log_data().iter().collect();
    let size: i64 = files.iter().map(|f| f.size()).sum();
    let mut properties: Vec<(String, String)> = state
        .metadata()
        .configuration()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    properties.sort();
    let features = |f: Option<Vec<String>>| f.map(|f| f.join(", ")).unwrap_or_default();
    let text = |v: String| strings(vec![v]);
    let int = |v: i64| Arc::new(Int64Array::from(vec![v])) as ArrayRef;
    let fields = [
        ("format", DataType::Utf8),
        ("name", DataType::Utf8),
        ("location", DataType::Utf8),
        ("version", DataType::Int64),
        ("numFiles", DataType::Int64),
        ("sizeInBytes", DataType::Int64),
        ("partitionColumns", DataType::Utf8),
        ("properties", DataType::Utf8),
        ("minReaderVersion", DataType::Int64),
        ("minWriterVersion", DataType::Int64),
        ("readerFeatures", DataType::Utf8),
        ("writerFeatures", DataType::Utf8),
    ];
    let columns = vec![
        text("delta".into()),
        text(name.to_string()),
        text(lake.location(name)),
        int(table.version().unwrap_or_default() as i64),
        int(files.len() as i64),
        int(size),
        text(state.metadata().partition_columns().join(", ")),
        text(
            serde_json::to_string(
                &properties
                    .into_iter()
                    .collect::<std::collections::BTreeMap<_, _>>(),
            )
            .unwrap_or_default(),
        ),
        int(protocol.min_reader_version() as i64),
        int(protocol.min_writer_version() as i64),
        text(features(
            protocol
                .reader_features()
                .map(|f| f.iter().map(|f| f.to_string()).collect()),
        )),
        text(features(
            protocol
                .writer_features()
                .map(|f| f.iter().map(|f| f.to_string()).collect()),
        )),
    ];
    let schema = Schema::new(
        fields
            .into_iter()
            .map(|(n, t)| Field::new(n, t, false))
            .collect::<Vec<_>>(),
    );
    Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
}

/// Databricks' `DESCRIBE HISTORY` columns smelt knows, newest commit first: each version's
/// `commitInfo`, read from its log entry (versions whose entry the log retention removed are
/// left out); `limit`: only the newest entries.
async fn history(
    table: &DeltaTable,
    name: &TableName,
    limit: Option<usize>,
) -> Result<RecordBatch> {
    use futures::StreamExt;
    let latest = table.version().unwrap_or_default();
    let store = table.log_store();
    let entries: Vec<(i64, Option<serde_json::Value>)> = futures::stream::iter(
        (0..=latest)
            .rev()
            .take(limit.unwrap_or(usize::MAX))
            .map(|v| {
                let store = store.clone();
                async move {
                    let bytes = store
                        .read_commit_entry(v)
                        .await
                        .context(|| format!("reading version {v} of `{name}`"))?;
                    Ok::<_, Error>(bytes.map(|b| {
                        let info = String::from_utf8_lossy(&b)
                            .lines()
                            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                            .find_map(|a| a.get("commitInfo").cloned());
                        (v as i64, info)
                    }))
                }
            }),
    )
    .buffered(16)
    .filter_map(|r| async move { r.transpose() })
    .collect::<Vec<_>>()
    .await
    .into_iter()
    .collect::<Result<_>>()?;
    let text = |info: &Option<serde_json::Value>, key: &str| -> String {
        match info.as_ref().and_then(|i| i.get(key)) {
            None | Some(serde_json::Value::Null) => String::new(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        }
    };
    // Delta's commit times, as `TIMESTAMP AS OF` and the change feed read them.
    let clock = crate::commit_time::CommitClock::of(table, &name.to_string()).await?;
    let schema = Schema::new(vec![
        Field::new("version", DataType::Int64, false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        Field::new("operation", DataType::Utf8, false),
        Field::new("operationParameters", DataType::Utf8, false),
        Field::new("engineInfo", DataType::Utf8, false),
    ]);
    Ok(RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from(
                entries.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
            )),
            Arc::new(
                TimestampMillisecondArray::from(
                    entries
                        .iter()
                        .map(|(v, i)| {
                            let ict = i
                                .as_ref()
                                .and_then(|i| i.get("inCommitTimestamp")?.as_i64());
                            clock.time(&name.to_string(), *v, ict)
                        })
                        .collect::<Result<Vec<_>>>()?,
                )
                .with_timezone("UTC"),
            ),
            strings(entries.iter().map(|(_, i)| text(i, "operation")).collect()),
            strings(
                entries
                    .iter()
                    .map(|(_, i)| text(i, "operationParameters"))
                    .collect(),
            ),
            strings(entries.iter().map(|(_, i)| text(i, "engineInfo")).collect()),
        ],
    )?)
}

/// Finds the `__smelt_describe('what', 'table')` calls and points each at its name.
#[derive(Default)]
struct Calls {
    /// What, which table, the newest entries asked for (history), the registered name.
    found: Vec<(String, String, Option<usize>, String)>,
}

impl VisitorMut for Calls {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table { name, args, .. } = factor else {
            return ControlFlow::Continue(());
        };
        let is_describe = name.0.len() == 1
            && name.0[0]
                .as_ident()
                .is_some_and(|i| i.value == DESCRIBE_FUNCTION);
        let Some(call) = args.as_ref().filter(|_| is_describe) else {
            return ControlFlow::Continue(());
        };
        let text: Vec<String> = call
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v))) => {
                    v.value.clone().into_string()
                }
                _ => None,
            })
            .collect();
        let limit = call.args.iter().find_map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v))) => match &v.value {
                Value::Number(n, _) => n.parse().ok(),
                _ => None,
            },
            _ => None,
        });
        if let [what, table] = text.as_slice() {
            let registered = format!("d{}", self.found.len());
            self.found
                .push((what.clone(), table.clone(), limit, registered.clone()));
            *name = ObjectName::from(vec![Ident::new(SCHEMA), Ident::new(registered)]);
            *args = None;
        }
        ControlFlow::Continue(())
    }
}
