use arrow::error::ArrowError;

/// Errors of the storage-free core.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// An Arrow kernel failed (internal: a bug in how smelt called it).
    #[error("arrow: {0}")]
    Arrow(#[from] ArrowError),
    /// A value could not be cast and the flow asked to fail on cast errors.
    #[error(
        "{}",
        smelt_rules::messages::cannot_cast(column, target, value, context)
    )]
    CastFailed {
        /// Column name.
        column: String,
        /// Target type, as the user spelled it where known.
        target: String,
        /// The raw value.
        value: String,
        /// Extra context provided by the caller (e.g. bronze version and key).
        context: String,
    },
    /// Inputs that must line up do not (internal).
    #[error("internal: {0}")]
    Internal(String),
}

/// Result alias of the core crate.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;
