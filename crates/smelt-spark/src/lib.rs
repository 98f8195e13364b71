//! The Spark engine of smelt (DESIGN §10): smelt stays the planner, and a Spark cluster
//! reached over Spark Connect executes each flow run as a fixed sequence of Spark SQL
//! statements; no table data flows through smelt.
//!
//! Laid out like the embedded engine (`smelt_engine::flow`), and applying the same rules
//! (`smelt_rules`):
//!
//! * [`client::Spark`]: one Spark Connect session; runs a statement and returns its rows
//!   as Arrow batches. [`session::Session`]: one flow run's statements, in order.
//! * [`engine::SparkEngine`]: the engine's [`smelt_engine::run::Executor`] on a cluster:
//!   runs, plans, checks and compiles flows, and refuses what it does not run by name
//!   (`smelt_rules::capability`).
//! * `flow/<kind>/`: each flow kind as statements — `apply` (its `scd1/` and `scd2/` side
//!   by side), `append`, `replace_where`, `ingest`, `export`.
//! * `delta/`: Delta Lake over Spark SQL — the log read by smelt (`log`, `read`), a table's
//!   commits (`describe`), idempotent writes and watermarks (`txn`), tables created (`ddl`).
//! * `iceberg`: the pipeline's Iceberg catalogs in the session, a table's snapshots and
//!   watermark, the rows an Iceberg source's snapshots add and remove.
//! * [`predicate`]: pipeline predicates written as Spark SQL; [`places::Places`]: where
//!   the tables are, as the cluster sees them; [`sql`]: literals and names inlined into
//!   Spark SQL.
#![deny(missing_docs)]

pub mod client;
mod delta;
pub mod engine;
mod error;
mod event_log;
mod flow;
mod iceberg;
pub mod places;
pub mod predicate;
pub mod session;
pub mod sql;
mod views;

pub use engine::SparkEngine;
pub use error::{Error, Result};
pub use session::Statement;
