//! `ingest` flows (DESIGN §4): a landing folder's new files, read through the
//! [`Landing`](crate::ports::Landing) port, lined up with bronze and loaded exactly once.
//!
//! * [`ledger`]: which files a table has loaded, and which a run loads.
//! * [`conform`]: a file's rows lined up with bronze (new columns, rescued data, audit
//!   columns).
//! * [`load`]: one run, files → one bronze commit.
//! * [`rejects`]: the lines that do not parse, kept in `<bronze>__rejects`.

mod runner;
pub(crate) use runner::Ingest;

pub mod conform;
pub mod ledger;
pub mod load;
pub mod rejects;
mod rescue;

pub use load::{IngestTables, LOG_CLEANUP, run_ingest};

/// The fix for a file that does not fit its flow.
pub use smelt_rules::messages::FIX_FILE;
