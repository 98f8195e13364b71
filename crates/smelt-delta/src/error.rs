use deltalake::DeltaTableError;
use deltalake::datafusion::error::DataFusionError;
use smelt_engine::EngineError;

/// Errors of the Delta adapter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// delta-rs failed.
    #[error("{context}")]
    Delta {
        /// What smelt was doing.
        context: String,
        /// The delta-rs error.
        #[source]
        source: DeltaTableError,
    },
    /// DataFusion failed.
    #[error("{context}")]
    DataFusion {
        /// What smelt was doing.
        context: String,
        /// The DataFusion error.
        #[source]
        source: Box<DataFusionError>,
    },
    /// A core kernel failed.
    #[error(transparent)]
    Core(#[from] smelt_core::CoreError),
    /// Arrow failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// Reading a Parquet file failed.
    #[error("reading `{path}`")]
    Parquet {
        /// The file.
        path: String,
        /// The Parquet error.
        #[source]
        source: deltalake::parquet::errors::ParquetError,
    },
    /// An object-store error.
    #[error("{context}")]
    Store {
        /// What smelt was doing.
        context: String,
        /// The error.
        #[source]
        source: object_store::Error,
    },
    /// The engine's error: a user error (what is wrong and the next step, as every
    /// adapter reports it), a bug, or a table of another format that failed (a catalog
    /// table `smelt sql` reads).
    #[error(transparent)]
    Engine(Box<EngineError>),
    /// A file-system error.
    #[error("{context}")]
    Io {
        /// What smelt was doing.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A user error with a hint ([`EngineError::user`]).
    pub fn user(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::Engine(Box::new(EngineError::user(message, hint)))
    }

    /// A bug in smelt ([`EngineError::Internal`]).
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Engine(Box::new(EngineError::Internal(message.into())))
    }

    /// The hint, if any.
    pub fn hint(&self) -> Option<&str> {
        match self {
            Error::Engine(e) => e.hint(),
            // A store that refused smelt or did not answer.
            other => std::error::Error::source(other)
                .and_then(smelt_engine::stores::StoreFault::of)
                .map(smelt_engine::stores::StoreFault::hint),
        }
    }
}

/// Adds context to delta-rs and DataFusion results.
pub(crate) trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, DeltaTableError> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Delta {
            context: what(),
            source,
        })
    }
}

impl<T> Context<T> for std::result::Result<T, DataFusionError> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::DataFusion {
            context: what(),
            source: Box::new(source),
        })
    }
}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        Error::Engine(Box::new(e))
    }
}

impl From<Error> for EngineError {
    fn from(e: Error) -> Self {
        match e {
            Error::Core(e) => e.into(),
            Error::Engine(e) => *e,
            Error::Parquet { path, source } => crate::damage::data_file_error(&path, source),
            other => {
                let context = match &other {
                    Error::Delta { context, .. }
                    | Error::DataFusion { context, .. }
                    | Error::Io { context, .. }
                    | Error::Store { context, .. } => context.clone(),
                    _ => "storage".to_string(),
                };
                let source: Box<dyn std::error::Error + Send + Sync> = match other {
                    Error::Delta { source, .. } => Box::new(source),
                    Error::DataFusion { source, .. } => source,
                    Error::Io { source, .. } => Box::new(source),
                    Error::Store { source, .. } => Box::new(source),
                    e => Box::new(e),
                };
                EngineError::Storage { context, source }
            }
        }
    }
}

/// Result alias of the Delta adapter.
pub type Result<T, E = Error> = std::result::Result<T, E>;
