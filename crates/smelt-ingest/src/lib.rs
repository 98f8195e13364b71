//! Files in and out (DESIGN §4), the adapter of the engine's
//! [`FileStores`](smelt_engine::ports::FileStores) port: landing folders (a local folder or
//! an object-store prefix, [`files`]) whose files are read as CSV, JSON lines or Parquet a
//! bounded batch at a time ([`read`]), and export targets written as Parquet ([`target`]).
//! The flows themselves (which files to load, lining rows up with bronze, exactly once,
//! the export's state machine) are the engine's.
//!
//! The readers take any `std::io::Read` and hand batches to a [`RowSink`], so a file is
//! never held in memory whole. Bronze is the raw layer: fields stay text unless the flow
//! asks for `infer_types`.
#![deny(missing_docs)]

pub mod csv;
pub mod files;
pub mod json;
pub mod parquet;
pub mod read;
mod stores;
mod target;

pub use smelt_engine::ports::{Malformed, RawRows};
pub use stores::Files;

/// Where a reader puts what it reads.
pub trait RowSink {
    /// A batch of rows, in file order.
    fn rows(&mut self, rows: RawRows) -> Result<()>;
    /// A row that does not parse.
    fn malformed(&mut self, row: Malformed) -> Result<()>;
}

/// Errors of file reading.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The file does not parse.
    #[error("{file}: {message}")]
    Malformed {
        /// The file.
        file: String,
        /// What is wrong, with the line where known.
        message: String,
    },
    /// The options or the folder do not make sense.
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
    /// Arrow failed building a batch.
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
}

/// Result alias of this crate.
pub type Result<T, E = IngestError> = std::result::Result<T, E>;

/// A sink that keeps what it is given, as text, for the readers' tests.
#[cfg(test)]
pub(crate) mod testing {
    use arrow::array::{Array, AsArray};

    use super::{Malformed, RawRows, Result, RowSink};

    /// One batch as text.
    #[derive(Debug, Default)]
    pub struct Batch {
        pub names: Vec<String>,
        pub rows: Vec<Vec<Option<String>>>,
        pub numbers: Vec<i64>,
        pub extra: Vec<Option<String>>,
    }

    #[derive(Debug, Default)]
    pub struct Collect {
        pub batches: Vec<Batch>,
        pub malformed: Vec<Malformed>,
    }

    impl Collect {
        /// Column names of the last batch.
        pub fn names(&self) -> &[String] {
            self.batches
                .last()
                .map(|b| b.names.as_slice())
                .unwrap_or(&[])
        }
        /// Every row, in order.
        pub fn rows(&self) -> Vec<Vec<Option<String>>> {
            self.batches.iter().flat_map(|b| b.rows.clone()).collect()
        }
        /// Every row number, in order.
        pub fn numbers(&self) -> Vec<i64> {
            self.batches
                .iter()
                .flat_map(|b| b.numbers.clone())
                .collect()
        }
        /// Every row's extra fields, in order.
        pub fn extra(&self) -> Vec<Option<String>> {
            self.batches.iter().flat_map(|b| b.extra.clone()).collect()
        }
    }

    impl RowSink for Collect {
        fn rows(&mut self, r: RawRows) -> Result<()> {
            let n = r.batch.num_rows();
            self.batches.push(Batch {
                names: r
                    .batch
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect(),
                rows: (0..n)
                    .map(|i| {
                        r.batch
                            .columns()
                            .iter()
                            .map(|c| {
                                let c = c.as_string::<i32>();
                                c.is_valid(i).then(|| c.value(i).to_string())
                            })
                            .collect()
                    })
                    .collect(),
                numbers: r.rows,
                extra: (0..n)
                    .map(|i| r.extra.as_ref().and_then(|e| e[i].clone()))
                    .collect(),
            });
            Ok(())
        }

        fn malformed(&mut self, row: Malformed) -> Result<()> {
            self.malformed.push(row);
            Ok(())
        }
    }
}
