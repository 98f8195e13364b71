//! The Spark engine of smelt (DESIGN §10): smelt stays the planner, and a Spark cluster
//! reached over Spark Connect executes each flow run as a fixed sequence of Spark SQL
//! statements; no table data flows through smelt.
//!
//! * [`client::Spark`]: one Spark Connect session; runs a statement and returns its rows
//!   as Arrow batches.
//! * [`engine::SparkEngine`]: the engine's [`smelt_engine::run::Executor`] on a cluster:
//!   runs, plans, checks and compiles flows; [`support`] says what it runs and refuses the
//!   rest by name.
//! * `scd1/`: an apply flow (SCD1) as statements: where it stands, what it reads
//!   (`read`), what it does (`stage`), what it writes (`write`); `scd2/`: the history of an
//!   `scd: 2` apply flow rebuilt over the keys a run changes; `append`: an append flow;
//!   `rows`: the rows a flow reads from a Delta table, for both; `ingest`: a landing
//!   folder's new files loaded into bronze; `export`: a table's changed rows as Parquet;
//!   `iceberg`: the pipeline's Iceberg catalogs in the session, a table's snapshots and
//!   watermark, the rows an Iceberg source's snapshots add and remove.
//! * [`places::Places`]: where the tables are, as the cluster sees them; [`sql`]: literals
//!   and names inlined into Spark SQL.
#![deny(missing_docs)]

mod append;
pub mod client;
mod commits;
pub mod engine;
mod error;
mod event_log;
mod export;
mod iceberg;
mod ingest;
pub mod places;
mod replace;
mod rows;
mod scd1;
pub mod session;
pub mod sql;
pub mod support;
mod tables;

pub use engine::SparkEngine;
pub use error::{Error, Result};
pub use session::Statement;
