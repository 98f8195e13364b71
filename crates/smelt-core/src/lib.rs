//! Storage-free semantics of smelt, on Arrow.
//!
//! Everything here takes Arrow arrays and batches and returns Arrow arrays, batches or
//! plans; nothing knows about Delta Lake, files or async runtimes. The engine feeds it
//! changes read by a table-format adapter and hands its plans back to that adapter.
//!
//! * [`change`]: the change model (bronze row + `_change_type`, `_commit_version`,
//!   `_commit_timestamp`).
//! * [`cast`]: string → typed casts with SAFE_CAST semantics and per-column failure counts.
//! * [`dedupe`]: the latest change per key, with deterministic tie-breaks.
//! * [`columns`]: take, filter, concatenate and compare a batch's columns on all cores.
//! * [`guard`]: the newer-than guard (a change applies only when newer than silver and the
//!   key's tombstone).
//! * [`scd1`]: the SCD1 apply plan (insert / update / unchanged / stale / delete).
//! * [`scd2`]: the SCD2 history of each key, rebuilt.
//!
//! ```
//! use std::sync::Arc;
//! use arrow::array::{ArrayRef, Int64Array, StringArray};
//! use smelt_core::dedupe::latest_per_key;
//!
//! let keys: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "a"]));
//! let seq: ArrayRef = Arc::new(Int64Array::from(vec![1, 1, 2]));
//! let winners = latest_per_key(&[keys], &[seq]).unwrap();
//! assert_eq!(winners.values(), &[1, 2]);
//! ```
#![deny(missing_docs)]

pub mod cast;
pub mod change;
pub mod columns;
pub mod dedupe;
pub mod dialect;
mod error;
pub mod guard;
pub mod memory;
pub mod scd1;
pub mod scd2;

pub use error::{CoreError, Result};
