//! Delta Lake adapter for smelt (delta-rs).
//!
//! * [`Lake`]: a folder of Delta tables, `schema/table` each; opens tables and builds a
//!   DataFusion session over all of them.
//! * [`source::DeltaSource`]: bronze changes — added files of append commits, change data
//!   files of rewriting commits, rows deleted by deletion vectors, or the snapshot from the
//!   last checkpoint — in commit, file and row order, for tables written by any engine.
//! * [`table::DeltaLakeTable`]: a table smelt writes (silver, tombstones, rejects, bronze,
//!   targets): lookups and smelt's copy-on-write merge: staged rows,
//!   rewritten files, change data and the watermark (`txn` action) in one commit.
//! * [`event_log`]: one row per flow run in `_smelt.event_log`.
//! * [`Lake`] implements the engine's `Lake` and `EventLog` ports.
//! * [`sql`]: `smelt sql` — DataFusion queries plus the DDL/DML the seeds use.
#![deny(missing_docs)]

mod commit_time;
mod damage;
mod dv;
mod error;
pub mod event_log;
mod features;
mod lake;
mod ledger;
mod mapping;
mod parquet;
mod ports;
mod session;
pub mod source;
pub mod sql;
pub mod table;

pub use error::{Error, Result};
pub use lake::Lake;
