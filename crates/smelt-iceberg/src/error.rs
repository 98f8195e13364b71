//! The Iceberg adapter's error type.

use smelt_engine::EngineError;

/// Errors of the Iceberg adapter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `iceberg` crate failed.
    #[error("{context}")]
    Iceberg {
        /// What smelt was doing.
        context: String,
        /// The error (boxed: it is large).
        #[source]
        source: Box<iceberg::Error>,
    },
    /// The SQL catalog's database failed.
    #[error("{context}")]
    Sql {
        /// What smelt was doing.
        context: String,
        /// The error.
        #[source]
        source: sqlx::Error,
    },
    /// Moving batches between the two Arrow versions failed.
    #[error(transparent)]
    Bridge(#[from] crate::bridge::BridgeError),
    /// Arrow failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// The engine's error: a user error (what is wrong and the next step, as every
    /// adapter reports it), a bug, or the engine failing (a flow's predicate, evaluated on
    /// stored rows).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl Error {
    /// A user error with a hint ([`EngineError::user`]).
    pub fn user(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::Engine(EngineError::user(message, hint))
    }

    /// A bug in smelt ([`EngineError::Internal`]).
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Engine(EngineError::Internal(message.into()))
    }
}

/// Adds what smelt was doing to the `iceberg` crate's and sqlx's errors.
pub(crate) trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for Result<T, iceberg::Error> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Iceberg {
            context: what(),
            source: Box::new(source),
        })
    }
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Sql {
            context: what(),
            source,
        })
    }
}

impl From<Error> for EngineError {
    fn from(e: Error) -> Self {
        match e {
            Error::Iceberg { context, source } => EngineError::storage(context, *source),
            Error::Sql { context, source } => EngineError::storage(context, source),
            Error::Bridge(e) => EngineError::Internal(e.to_string()),
            Error::Arrow(e) => EngineError::storage("arrow", e),
            Error::Engine(e) => e,
        }
    }
}

/// Result alias of the Iceberg adapter.
pub type Result<T, E = Error> = std::result::Result<T, E>;
