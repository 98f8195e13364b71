//! One Spark Connect session: statements in, Arrow batches out.
//!
//! Built on the transport of the official Rust client (`apache-spark-connect-core`): its
//! connection strings (`sc://host:port/;token=…;use_ssl=true;user_id=…`, other parameters
//! sent as gRPC headers, as Databricks wants), channel and structured errors. Each statement
//! is one `ExecutePlan` of a SQL relation, which Spark runs eagerly when it is a command
//! (DDL, `SET`, `MERGE`, `INSERT`); its rows come back as Arrow IPC streams, decoded here
//! with the workspace's Arrow. Executions are not reattachable, so a long `MERGE` is never
//! cut at the server's stream limit and taken as finished.

use std::io::Cursor;
use std::time::Duration;

use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit, TimestampMicrosecondType};
use arrow::ipc::reader::StreamReader;
use spark_connect_core::{ChannelBuilder, RetryPolicy, SparkConnectClient, SparkError};
use spark_connect_proto::execute_plan_response::ResponseType;
use spark_connect_proto::{
    ExecutePlanRequest, Plan, Relation, Sql, UserContext, plan::OpType, relation::RelType,
};

use crate::error::{Error, Result};

/// How long one statement may take before smelt gives up on it (and interrupts it).
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(6 * 60 * 60);

/// The rows a statement returned.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    /// The result's schema (`None` when Spark sent no batch at all).
    pub schema: Option<SchemaRef>,
    /// The batches, in order.
    pub batches: Vec<RecordBatch>,
}

impl Rows {
    /// The number of rows.
    pub fn len(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Column `name` cast to `to`, all batches in order (`None` when there is no such column).
    fn column(&self, name: &str, to: &DataType) -> Option<Vec<ArrayRef>> {
        let schema = self.schema.as_ref()?;
        let index = schema.index_of(name).ok()?;
        self.batches
            .iter()
            .map(|b| cast(b.column(index), to).ok())
            .collect()
    }

    /// Column `name` as integers.
    pub fn ints(&self, name: &str) -> Vec<Option<i64>> {
        self.column(name, &DataType::Int64)
            .unwrap_or_default()
            .iter()
            .flat_map(|a| a.as_primitive::<Int64Type>().iter().collect::<Vec<_>>())
            .collect()
    }

    /// Column `name` as text.
    pub fn strings(&self, name: &str) -> Vec<Option<String>> {
        self.column(name, &DataType::Utf8)
            .unwrap_or_default()
            .iter()
            .flat_map(|a| {
                a.as_string::<i32>()
                    .iter()
                    .map(|v| v.map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Column `name` (a timestamp) as microseconds since the epoch.
    pub fn micros(&self, name: &str) -> Vec<Option<i64>> {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        self.column(name, &ts)
            .unwrap_or_default()
            .iter()
            .flat_map(|a| {
                a.as_primitive::<TimestampMicrosecondType>()
                    .iter()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Column `name` (a list) as the length of each list.
    pub fn list_lens(&self, name: &str) -> Vec<Option<usize>> {
        let Some(schema) = self.schema.as_ref() else {
            return Vec::new();
        };
        let Ok(index) = schema.index_of(name) else {
            return Vec::new();
        };
        self.batches
            .iter()
            .flat_map(|b| match b.column(index).as_list_opt::<i32>() {
                Some(list) => list.iter().map(|v| v.map(|a| a.len())).collect(),
                None => vec![None; b.num_rows()],
            })
            .collect()
    }

    /// The column names.
    pub fn names(&self) -> Vec<String> {
        self.schema
            .as_ref()
            .map(|s| s.fields().iter().map(|f| f.name().clone()).collect())
            .unwrap_or_default()
    }
}

/// A session on a Spark Connect server.
pub struct Spark {
    client: SparkConnectClient,
    /// The connection string with its token hidden, for messages.
    shown: String,
    user_id: String,
}

impl std::fmt::Debug for Spark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spark").field("url", &self.shown).finish()
    }
}

impl Spark {
    /// Opens a session on the server of `url` (`sc://host:port/;…`). The connection is made
    /// by the first statement.
    pub async fn connect(url: &str) -> Result<Self> {
        let shown = redact(url);
        let connect_error = |e: SparkError| Error::Connect {
            url: shown.clone(),
            message: message_of(&e),
        };
        let builder = ChannelBuilder::parse(url).map_err(connect_error)?;
        let user_id = builder.user_id().unwrap_or_default().to_string();
        let mut client = SparkConnectClient::connect(&builder)
            .await
            .map_err(connect_error)?;
        // A few quick retries of a busy server, not the client's default quarter hour.
        client.set_retry_policy(RetryPolicy {
            max_retries: Some(3),
            max_backoff_ms: Some(4_000),
            ..RetryPolicy::default()
        });
        Ok(Self {
            client,
            shown,
            user_id,
        })
    }

    /// Runs `statement`; `what` says what it is for, in errors. Commands run eagerly.
    pub async fn sql(&self, what: &str, statement: &str) -> Result<Rows> {
        let operation_id = uuid::Uuid::new_v4().to_string();
        match tokio::time::timeout(
            STATEMENT_TIMEOUT,
            self.execute(what, statement, &operation_id),
        )
        .await
        {
            Ok(rows) => rows,
            Err(_) => {
                // Best effort: the statement is abandoned either way.
                let _ = self.client.interrupt_operation(&operation_id).await;
                Err(Error::Timeout {
                    what: what.to_string(),
                    seconds: STATEMENT_TIMEOUT.as_secs(),
                })
            }
        }
    }

    async fn execute(&self, what: &str, statement: &str, operation_id: &str) -> Result<Rows> {
        let failed = |e: SparkError| self.failure(what, &e);
        let request = ExecutePlanRequest {
            session_id: self.client.session_id().to_string(),
            user_context: Some(UserContext {
                user_id: self.user_id.clone(),
                ..Default::default()
            }),
            operation_id: Some(operation_id.to_string()),
            plan: Some(Plan {
                op_type: Some(OpType::Root(Relation {
                    rel_type: Some(RelType::Sql(Sql {
                        query: statement.to_string(),
                        ..Default::default()
                    })),
                    ..Default::default()
                })),
            }),
            client_type: Some(format!("smelt/{}", env!("CARGO_PKG_VERSION"))),
            ..Default::default()
        };
        let mut stream = self.client.execute_plan(request).await.map_err(failed)?;
        let mut rows = Rows::default();
        loop {
            let message = stream
                .message()
                .await
                .map_err(|status| failed(SparkError::from_grpc_status(status)))?;
            let Some(response) = message else {
                break;
            };
            let Some(ResponseType::ArrowBatch(batch)) = response.response_type else {
                continue;
            };
            let arrow_error = |source| Error::Arrow {
                what: what.to_string(),
                source,
            };
            let reader =
                StreamReader::try_new(Cursor::new(batch.data), None).map_err(arrow_error)?;
            rows.schema.get_or_insert_with(|| reader.schema());
            for b in reader {
                rows.batches.push(b.map_err(arrow_error)?);
            }
        }
        Ok(rows)
    }

    /// A statement's failure: the cluster unreachable, or Spark's own message.
    fn failure(&self, what: &str, e: &SparkError) -> Error {
        let unreachable =
            e.grpc_code.is_some_and(|c| c == tonic_code::UNAVAILABLE) && e.error_class.is_empty();
        if unreachable {
            return Error::Connect {
                url: self.shown.clone(),
                message: message_of(e),
            };
        }
        Error::Statement {
            what: what.to_string(),
            message: message_of(e),
        }
    }

    /// Ends the session on the server (its temporary views and settings go with it).
    pub async fn close(self) {
        let _ = self.client.release_session().await;
    }
}

/// gRPC status codes used here.
mod tonic_code {
    /// `UNAVAILABLE`: nothing answers at the address.
    pub const UNAVAILABLE: i32 = 14;
}

/// Spark's message as the server wrote it, with its error class in front. (The client's
/// `Display` renders PySpark's templates, whose parameters a server error does not fill.)
fn message_of(e: &SparkError) -> String {
    let text = e.message.trim();
    if e.error_class.is_empty() || text.starts_with(&format!("[{}]", e.error_class)) {
        text.to_string()
    } else {
        format!("[{}] {text}", e.error_class)
    }
}

/// `url` with the value of its `token` parameter hidden.
pub fn redact(url: &str) -> String {
    url.split(';')
        .map(|part| match part.split_once('=') {
            Some((k, _)) if k.trim().eq_ignore_ascii_case("token") => format!("{k}=***"),
            _ => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hidden() {
        assert_eq!(
            redact("sc://h:443/;token=abc;use_ssl=true;x-databricks-cluster-id=1"),
            "sc://h:443/;token=***;use_ssl=true;x-databricks-cluster-id=1"
        );
        assert_eq!(redact("sc://127.0.0.1:15002"), "sc://127.0.0.1:15002");
    }
}
