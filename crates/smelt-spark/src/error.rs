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
