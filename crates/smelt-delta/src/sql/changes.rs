//! Change feeds as table functions in queries:
//!
//! * Databricks' `table_changes('schema.table', start [, end])`: `start`/`end` are versions
//!   or times, both inclusive (no `end`: the latest version). Rows carry the table's columns
//!   and `_change_type` (`insert`, `update_preimage`, `update_postimage`, `delete`),
//!   `_commit_version`, `_commit_timestamp`.
//! * BigQuery's `CHANGES(TABLE schema.table, start_ts, end_ts)`: `start_ts` inclusive,
//!   `end_ts` exclusive, `NULL` for open. Rows carry the table's columns and `_CHANGE_TYPE`
//!   (`INSERT`, `UPDATE` — the new row, `DELETE`) and `_CHANGE_TIMESTAMP`; `APPENDS(…)` the
//!   same, inserted rows only.
//!
//! Both read the changes as apply flows do (DESIGN §9): commit, file, row order, deletion
//! vectors applied; rows a commit removed without change data (a table whose feed was off)
//! read as deletes, and its added rows as inserts. The rows stream from the files; nothing is
//! collected first.

use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use deltalake::datafusion::catalog::streaming::StreamingTable;
use deltalake::datafusion::common::{ScalarValue, TableReference};
use deltalake::datafusion::error::DataFusionError;
use deltalake::datafusion::execution::{SendableRecordBatchStream, TaskContext};
use deltalake::datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use deltalake::datafusion::physical_plan::streaming::PartitionStream;
use deltalake::datafusion::prelude::SessionContext;
use deltalake::datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, Ident, ObjectName, Statement, TableFactor, VisitMut,
    VisitorMut,
};
use futures::StreamExt;
use smelt_core::change::{
    CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION, DELETE, INSERT, UPDATE_POSTIMAGE,
};
use smelt_engine::ports::ChangeSource;
use smelt_spec::TableName;

use crate::Lake;
use crate::error::{Context, Error, Result};
use crate::source::DeltaSource;

/// The session schema change feeds are registered in.
const SCHEMA: &str = "__smelt_changes";

/// Which table function.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Function {
    /// Databricks' `table_changes`.
    TableChanges,
    /// BigQuery's `CHANGES`.
    Changes,
    /// BigQuery's `APPENDS`: the inserted rows alone.
    Appends,
}

impl Function {
    fn of(name: &ObjectName) -> Option<Self> {
        let [part] = name.0.as_slice() else {
            return None;
        };
        let name = part.as_ident()?.value.to_ascii_lowercase();
        match name.as_str() {
            "table_changes" => Some(Self::TableChanges),
            "changes" => Some(Self::Changes),
            "appends" => Some(Self::Appends),
            _ => None,
        }
    }

    fn usage(self) -> &'static str {
        match self {
            Self::TableChanges => {
                "table_changes('schema.table', start_version_or_time [, end_version_or_time])"
            }
            Self::Changes => "CHANGES(TABLE schema.table, start_timestamp, end_timestamp)",
            Self::Appends => "APPENDS(TABLE schema.table, start_timestamp, end_timestamp)",
        }
    }

    /// BigQuery's functions (their columns, an exclusive end).
    fn bigquery(self) -> bool {
        self != Self::TableChanges
    }
}

/// One call found in a query.
struct Call {
    function: Function,
    args: Vec<Expr>,
    registered: String,
}

/// Replaces each change-feed call of `statement` by a table registered in `ctx` that
/// streams those changes.
pub(super) async fn resolve(
    lake: &Lake,
    ctx: &SessionContext,
    statement: &mut Statement,
) -> Result<()> {
    let mut visitor = Calls::default();
    if let ControlFlow::Break(e) = statement.visit(&mut visitor) {
        return Err(e);
    }
    if visitor.found.is_empty() {
        return Ok(());
    }
    super::session_schema(ctx, SCHEMA)?;
    for call in visitor.found {
        let provider = feed(lake, ctx, &call).await?;
        ctx.register_table(
            TableReference::partial(SCHEMA, call.registered.as_str()),
            provider,
        )
        .context(|| "registering a change feed".to_string())?;
    }
    Ok(())
}

/// The table streaming the changes `call` asks for.
async fn feed(lake: &Lake, ctx: &SessionContext, call: &Call) -> Result<Arc<StreamingTable>> {
    let usage = call.function.usage();
    let refuse = |what: String| Error::user(what, format!("write {usage}"));
    let (table, bounds) = call
        .args
        .split_first()
        .filter(|(_, rest)| match call.function {
            Function::TableChanges => (1..=2).contains(&rest.len()),
            Function::Changes | Function::Appends => (0..=2).contains(&rest.len()),
        })
        .ok_or_else(|| refuse(format!("`{}` takes other arguments", call.function.usage())))?;
    let name = table_arg(call.function, table).ok_or_else(|| {
        refuse(format!(
            "the first argument of {usage} names the table; `{table}` does not"
        ))
    })?;
    let latest = DeltaSource::open(lake, &name).await?;
    let mut values = Vec::new();
    for e in bounds {
        values.push(
            value(ctx, e)
                .await
                .map_err(|what| refuse(format!("{usage}: `{e}` {what}")))?,
        );
    }
    if call.function.bigquery() && values.iter().any(|v| matches!(v, Bound::Version(_))) {
        return Err(refuse(format!("{usage} takes times, not versions")));
    }
    let start = values.first().cloned().unwrap_or(Bound::Open);
    let end = values.get(1).cloned().unwrap_or(Bound::Open);
    let first = match start.clone() {
        Bound::Open => 0,
        Bound::Version(v) => v,
        // The first version committed at or after the instant.
        Bound::Time(us) => latest.version_at(us - 1).await?.map_or(0, |v| v + 1),
    };
    let last = match (call.function, end.clone()) {
        (_, Bound::Open) => Some(latest.version()),
        (_, Bound::Version(v)) => Some(v),
        (Function::TableChanges, Bound::Time(us)) => latest.version_at(us).await?,
        // BigQuery's end is exclusive.
        (Function::Changes | Function::Appends, Bound::Time(us)) => {
            latest.version_at(us - 1).await?
        }
    };
    let versions_asked = matches!(start, Bound::Version(_)) || matches!(end, Bound::Version(_));
    let outside = |v: i64| v < 0 || v > latest.version();
    if versions_asked && (outside(first) || last.is_some_and(outside)) {
        return Err(Error::user(
            format!(
                "{usage}: `{name}` has versions 0 to {}; {first} to {} asked",
                latest.version(),
                last.map_or("none".into(), |l| l.to_string())
            ),
            "give versions that exist, or times",
        ));
    }
    let bigquery = call.function.bigquery();
    let source = match last {
        Some(last) if last >= first => Some(Arc::new(
            DeltaSource::open_at(lake, &name, last)
                .await?
                .with_removed_files(true),
        )),
        // Nothing in the range.
        _ => None,
    };
    // The columns of the last version read (a later ADD COLUMN is not in these rows).
    let columns = source
        .as_ref()
        .map_or_else(|| latest.schema(), |s| s.schema());
    let schema = output_schema(&columns, bigquery);
    let stream = Feed {
        source,
        after: first - 1,
        schema: Arc::clone(&schema),
        bigquery,
        appends: call.function == Function::Appends,
    };
    Ok(Arc::new(
        StreamingTable::try_new(schema, vec![Arc::new(stream)])
            .context(|| format!("reading the changes of `{name}`"))?,
    ))
}

/// A bound of the range asked for.
#[derive(Debug, Clone)]
enum Bound {
    Open,
    Version(i64),
    /// Microseconds since the epoch.
    Time(i64),
}

/// Evaluates a bound (a constant expression) with DataFusion.
async fn value(ctx: &SessionContext, e: &Expr) -> std::result::Result<Bound, String> {
    let df = ctx
        .sql(&format!("SELECT {e}"))
        .await
        .map_err(|err| format!("is not a constant: {err}"))?;
    let batches = df.collect().await.map_err(|err| format!("fails: {err}"))?;
    let column = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .map(|b| Arc::clone(b.column(0)))
        .ok_or("has no value")?;
    let scalar = ScalarValue::try_from_array(&column, 0).map_err(|e| e.to_string())?;
    if scalar.is_null() {
        return Ok(Bound::Open);
    }
    match column.data_type() {
        t if t.is_integer() => scalar
            .cast_to(&DataType::Int64)
            .ok()
            .and_then(|s| match s {
                ScalarValue::Int64(Some(v)) => Some(Bound::Version(v)),
                _ => None,
            })
            .ok_or_else(|| "is not a version".into()),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let text = scalar.to_string();
            super::time_travel::parse_time(&text)
                .map(|t| Bound::Time(t.timestamp_micros()))
                .ok_or_else(|| "is not a time such as '2026-07-01 09:00:00' (UTC)".into())
        }
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {
            let utc =
                DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
            match scalar.cast_to(&utc) {
                Ok(ScalarValue::TimestampMicrosecond(Some(us), _)) => Ok(Bound::Time(us)),
                _ => Err("is not a time".into()),
            }
        }
        other => Err(format!("is a {other}, not a version or a time")),
    }
}

/// The table a call reads: `'schema.table'` (table_changes) or `schema.table` (CHANGES).
fn table_arg(function: Function, e: &Expr) -> Option<TableName> {
    let text = match (function, e) {
        (Function::TableChanges, Expr::Value(v)) => v.value.clone().into_string()?,
        (_, Expr::Identifier(i)) if function.bigquery() => i.value.clone(),
        (_, Expr::CompoundIdentifier(parts)) if function.bigquery() => parts
            .iter()
            .map(|p| p.value.as_str())
            .collect::<Vec<_>>()
            .join("."),
        _ => return None,
    };
    TableName::parse(text.trim_matches('`'))
}

/// The columns of a feed: the table's, then the change columns of its dialect.
fn output_schema(table: &SchemaRef, bigquery: bool) -> SchemaRef {
    let mut fields: Vec<Field> = table.fields().iter().map(|f| f.as_ref().clone()).collect();
    if bigquery {
        fields.push(Field::new("_CHANGE_TYPE", DataType::Utf8, false));
        fields.push(Field::new(
            "_CHANGE_TIMESTAMP",
            smelt_core::change::timestamp_utc(),
            false,
        ));
    } else {
        fields.extend(smelt_core::change::metadata_fields());
    }
    Arc::new(Schema::new(fields))
}

/// BigQuery's rows of a change batch: no pre-images (`appends`: inserts alone),
/// `_CHANGE_TYPE` in capitals, no version.
fn to_bigquery(batch: &RecordBatch, schema: &SchemaRef, appends: bool) -> Result<RecordBatch> {
    let kinds = batch
        .column_by_name(CHANGE_TYPE)
        .ok_or_else(|| Error::internal("a change batch without `_change_type`"))?
        .as_string::<i32>();
    let keep = if appends {
        arrow::compute::kernels::cmp::eq(kinds, &StringArray::new_scalar(INSERT))?
    } else {
        arrow::compute::kernels::cmp::neq(
            kinds,
            &StringArray::new_scalar(smelt_core::change::UPDATE_PREIMAGE),
        )?
    };
    let batch = arrow::compute::filter_record_batch(batch, &keep)?;
    let kinds = batch
        .column_by_name(CHANGE_TYPE)
        .expect("kept")
        .as_string::<i32>();
    let upper: StringArray = kinds
        .iter()
        .map(|k| {
            k.map(|k| match k {
                INSERT => "INSERT",
                UPDATE_POSTIMAGE => "UPDATE",
                DELETE => "DELETE",
                other => other,
            })
        })
        .collect();
    let mut columns: Vec<_> = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(f, _)| {
            !matches!(
                f.name().as_str(),
                CHANGE_TYPE | COMMIT_VERSION | COMMIT_TIMESTAMP
            )
        })
        .map(|(_, c)| Arc::clone(c))
        .collect();
    columns.push(Arc::new(upper));
    columns.push(Arc::clone(
        batch
            .column_by_name(COMMIT_TIMESTAMP)
            .expect("a change batch"),
    ));
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// The changes of one call, streamed when the query runs.
struct Feed {
    /// `None`: the range holds no version.
    source: Option<Arc<DeltaSource>>,
    after: i64,
    schema: SchemaRef,
    bigquery: bool,
    appends: bool,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").field("after", &self.after).finish()
    }
}

impl PartitionStream for Feed {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), 2);
        let tx = builder.tx();
        let (source, after, schema, bigquery, appends) = (
            self.source.clone(),
            self.after,
            Arc::clone(&self.schema),
            self.bigquery,
            self.appends,
        );
        builder.spawn(async move {
            let Some(source) = source else {
                return Ok(());
            };
            let mut batches = source.read(Some(after));
            while let Some(batch) = batches.next().await {
                let batch = batch.map_err(|e| DataFusionError::External(Box::new(e)))?;
                let batch = if bigquery {
                    to_bigquery(&batch, &schema, appends)
                        .map_err(|e| DataFusionError::External(Box::new(e)))?
                } else {
                    batch
                };
                if tx.send(Ok(batch)).await.is_err() {
                    break;
                }
            }
            Ok(())
        });
        builder.build()
    }
}

/// Finds the change-feed calls and points each at its registered name.
#[derive(Default)]
struct Calls {
    found: Vec<Call>,
}

impl VisitorMut for Calls {
    type Break = Error;

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<Error> {
        let TableFactor::Table { name, args, .. } = factor else {
            return ControlFlow::Continue(());
        };
        let (Some(function), Some(call_args)) = (Function::of(name), args.as_ref()) else {
            return ControlFlow::Continue(());
        };
        let mut exprs = Vec::new();
        for arg in &call_args.args {
            match arg {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => exprs.push(e.clone()),
                other => {
                    return ControlFlow::Break(Error::user(
                        format!("{}: argument `{other}` is not supported", function.usage()),
                        format!("write {}", function.usage()),
                    ));
                }
            }
        }
        let registered = format!("c{}", self.found.len());
        *name = ObjectName::from(vec![Ident::new(SCHEMA), Ident::new(registered.clone())]);
        *args = None;
        self.found.push(Call {
            function,
            args: exprs,
            registered,
        });
        ControlFlow::Continue(())
    }
}
