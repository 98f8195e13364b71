//! The Spark engine of smelt (DESIGN §10): smelt stays the planner, and a Spark cluster
//! reached over Spark Connect executes each flow run as a fixed sequence of Spark SQL
//! statements; no table data flows through smelt.
//!
//! * [`client::Spark`]: one Spark Connect session; runs a statement and returns its rows
//!   as Arrow batches.
//! * [`sql`]: literals and names inlined into Spark SQL.
#![deny(missing_docs)]

pub mod client;
mod error;
pub mod sql;

pub use error::{Error, Result};
