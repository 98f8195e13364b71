//! The errors of the Spark engine.

/// Errors of the Spark engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cluster could not be reached, or the connection string is wrong.
    #[error("cannot reach the Spark cluster at `{url}`: {message}")]
    Connect {
        /// The connection string, its token hidden.
        url: String,
        /// What failed.
        message: String,
    },
    /// Spark refused or failed a statement.
    #[error("Spark failed {what}: {message}")]
    Statement {
        /// What smelt was doing (the statement's purpose).
        what: String,
        /// Spark's own message, with its error class.
        message: String,
    },
    /// A statement did not finish in time.
    #[error("Spark did not finish {what} within {seconds} s")]
    Timeout {
        /// What smelt was doing.
        what: String,
        /// The limit.
        seconds: u64,
    },
    /// A result could not be decoded.
    #[error("reading Spark's answer to {what}: {source}")]
    Arrow {
        /// What smelt was doing.
        what: String,
        /// The Arrow error.
        #[source]
        source: arrow::error::ArrowError,
    },
}

/// Results of the Spark engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether Spark said the table at a path is not there (or is not a Delta table).
    pub fn is_missing_table(&self) -> bool {
        match self {
            Error::Statement { message, .. } => [
                "DELTA_MISSING_DELTA_TABLE",
                "DELTA_TABLE_NOT_FOUND",
                "PATH_NOT_FOUND",
                "is not a Delta table",
            ]
            .iter()
            .any(|m| message.contains(m)),
            _ => false,
        }
    }

    /// Whether Delta refused a commit because another writer committed first.
    pub fn is_concurrent_write(&self) -> bool {
        match self {
            Error::Statement { message, .. } => {
                message.contains("DELTA_CONCURRENT") || message.contains("Concurrent")
            }
            _ => false,
        }
    }
}

impl From<Error> for smelt_engine::EngineError {
    fn from(e: Error) -> Self {
        match e {
            Error::Connect { .. } => smelt_engine::EngineError::user(
                e.to_string(),
                "check the cluster is up and the URL (`connect:`, `--engine`, `SMELT_SPARK_REMOTE`)",
            ),
            Error::Statement { .. } if e.is_concurrent_write() => smelt_engine::EngineError::user(
                format!("another writer committed to the table first: {e}"),
                "run again: the next run reads what the other one committed",
            ),
            other => smelt_engine::EngineError::User {
                message: other.to_string(),
                hint: None,
            },
        }
    }
}
