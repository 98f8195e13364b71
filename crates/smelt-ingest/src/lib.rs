//! Raw files as Arrow streams, for `ingest` flows (DESIGN §4): the bronze layer keeps every
//! field as text, so readers here produce all-`Utf8` batches and never guess types.
//!
//! Storage-free: readers take any `std::io::Read` and hand batches to a sink, a bounded
//! batch at a time, so a file is never held in memory whole.
#![deny(missing_docs)]

pub mod csv;

/// Errors of file reading.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The file does not parse; `line` is 1-based where known.
    #[error("{file}: {message}")]
    Malformed {
        /// The file.
        file: String,
        /// What is wrong, with the line where known.
        message: String,
    },
    /// The options do not make sense.
    #[error("{0}")]
    Options(String),
    /// Reading failed.
    #[error("reading {file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result alias of this crate.
pub type Result<T, E = IngestError> = std::result::Result<T, E>;
