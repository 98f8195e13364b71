use smelt_core::CoreError;

/// Errors of the engine and of the adapters behind its ports.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A table the flow needs does not exist.
    #[error("table `{table}` does not exist (looked in {location})")]
    TableNotFound {
        /// `schema.table`.
        table: String,
        /// Where it was looked for.
        location: String,
        /// The next step.
        hint: String,
    },
    /// The data or the lake does not fit the pipeline: the user can fix it.
    #[error("{message}")]
    User {
        /// What is wrong, naming table, version, column and row where known.
        message: String,
        /// The next step.
        hint: Option<String>,
    },
    /// A cast failed under `on_cast_error: fail`.
    #[error("{source}")]
    Cast {
        /// The failure.
        #[source]
        source: Box<CoreError>,
    },
    /// `error`, met while flow `flow` ran or was checked: the one place an error names
    /// its flow.
    #[error("flow `{flow}`: {error}")]
    InFlow {
        /// The flow.
        flow: String,
        /// What went wrong.
        error: Box<EngineError>,
    },
    /// An injected failure (tests and crash drills: `SMELT_FAILPOINT`).
    #[error("injected failure at `{0}` (SMELT_FAILPOINT)")]
    Failpoint(String),
    /// The storage layer failed.
    #[error("{context}")]
    Storage {
        /// What smelt was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A table's stored data is damaged or missing: a log file that does not parse, a data
    /// file the store lacks or that is not what the log says. Names the table and the file.
    #[error("{message}")]
    Damaged {
        /// What is wrong, naming the table and the file.
        message: String,
        /// The storage layer's own error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
        /// The next step.
        hint: String,
    },
    /// A bug in smelt.
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    /// A user error with a hint.
    pub fn user(message: impl Into<String>, hint: impl Into<String>) -> Self {
        EngineError::User {
            message: message.into(),
            hint: Some(hint.into()),
        }
    }

    /// A user error from a rule both engines apply ([`smelt_rules::Message`]).
    pub fn rule(message: smelt_rules::Message) -> Self {
        EngineError::user(message.text, message.hint)
    }

    /// Wraps a storage error with what smelt was doing.
    pub fn storage(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        EngineError::Storage {
            context: context.into(),
            source: Box::new(source),
        }
    }

    /// `error`, met by flow `flow` (an error already naming a flow is kept as it is).
    pub fn in_flow(flow: &str, error: EngineError) -> Self {
        match error {
            EngineError::InFlow { .. } => error,
            error => EngineError::InFlow {
                flow: flow.to_string(),
                error: Box::new(error),
            },
        }
    }

    /// The flow the error was met in, and the error itself; `None` and `self` for an
    /// error met outside a flow.
    pub fn flow(&self) -> (Option<&str>, &EngineError) {
        match self {
            EngineError::InFlow { flow, error } => (Some(flow), error),
            error => (None, error),
        }
    }

    /// The hint for the user, if the error has one.
    pub fn hint(&self) -> Option<&str> {
        match self {
            EngineError::InFlow { error, .. } => error.hint(),
            EngineError::TableNotFound { hint, .. } | EngineError::Damaged { hint, .. } => {
                Some(hint)
            }
            EngineError::User { hint, .. } => hint.as_deref(),
            EngineError::Cast { .. } => Some(smelt_rules::messages::FIX_CAST),
            EngineError::Internal(_) => {
                Some("this is a bug in smelt; please report it with the command you ran")
            }
            EngineError::Storage { source, .. } => {
                crate::stores::StoreFault::of(source.as_ref()).map(crate::stores::StoreFault::hint)
            }
            _ => None,
        }
    }
}

impl From<CoreError> for EngineError {
    fn from(e: CoreError) -> Self {
        EngineError::Internal(e.to_string())
    }
}

impl From<arrow::error::ArrowError> for EngineError {
    fn from(e: arrow::error::ArrowError) -> Self {
        EngineError::Internal(format!("arrow: {e}"))
    }
}

impl From<datafusion::error::DataFusionError> for EngineError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        EngineError::Internal(format!("datafusion: {e}"))
    }
}

/// Result alias of the engine.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Fails with [`EngineError::Failpoint`] when `SMELT_FAILPOINT` names `point`; kills the
/// process on the spot (`std::process::abort`, no cleanup, no buffered output flushed) when
/// it names `point:abort`.
///
/// Crash drills set it to stop a run at a write step and check that a rerun recovers.
/// `SMELT_FAILPOINT` is a comma-separated list, e.g. `before_silver_commit:abort`.
///
/// `point:wait=<file>` holds the process there instead: it creates `<file>.reached`, then
/// waits until `<file>` exists (at most two minutes, then aborts). Race tests hold one
/// process at a commit while another commits, so the race happens by construction.
pub fn failpoint(point: &str) -> Result<()> {
    // The crash tests find every point by this prefix.
    debug_assert!(point.starts_with("before_"), "failpoint `{point}`");
    let Ok(v) = std::env::var("SMELT_FAILPOINT") else {
        return Ok(());
    };
    for p in v.split(',').map(str::trim) {
        match p.split_once(':') {
            None if p == point => return Err(EngineError::Failpoint(point.to_string())),
            Some((name, "abort")) if name == point => std::process::abort(),
            Some((name, action)) if name == point && action.starts_with("wait=") => {
                hold_until(&action["wait=".len()..]);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Marks `<gate>.reached`, then blocks this thread until `gate` exists (see [`failpoint`]).
fn hold_until(gate: &str) {
    let reached = format!("{gate}.reached");
    if std::fs::write(&reached, b"").is_err() {
        std::process::abort();
    }
    let started = std::time::Instant::now();
    while !std::path::Path::new(gate).exists() {
        if started.elapsed() > std::time::Duration::from_secs(120) {
            std::process::abort();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
