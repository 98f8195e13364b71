//! The smelt engine: runs a pipeline's flows through the ports a table format implements,
//! and reports what they did. The semantics themselves live in `smelt-core`; this crate
//! wires them into the run contract of DESIGN §3.
//!
//! [`run::run`] owns a run: the flows in dependency order ([`dag`]), replay windows,
//! the event-log row a crash lost, the event log, stopping at the first failure. Each
//! flow kind has one folder ([`flow`]`::<kind>`: its runner — run, check, status — and
//! its steps), its runner built in one place.
//! [`validate::validate`] collects every problem of the selected flows;
//! [`status::status`] owns `smelt status`; [`maintain`] owns `smelt optimize` and
//! `smelt vacuum`. The CLI resolves settings, builds the adapters
//! and prints. See `docs/architecture.md`. Everything is read and written through [`ports`]: a [`ports::Lake`]
//! (Delta: `smelt-delta`) gives change sources and tables by role; [`ports::FileStores`]
//! (`smelt-ingest`) gives landing folders to read and export targets to write.
//!
//! The data path of an apply flow ([`flow::apply`]):
//!
//! ```text
//!  Lake::source ──► ChangeSource::read (stream) ──► cast + classify + expectations
//!  (bronze, pinned     (commit / file / row order)      │ rejects ──► rejects table
//!   at version v)                                       ▼
//!                                      spill by key hash (memory limit)
//!                                                       │ per partition
//!                                                       ▼
//!    KeyedTable::lookup (guard) ◄── latest per key, conflicts, truncates
//!          │                                            │
//!          ▼                                            ▼
//!   SCD1 plan / SCD2 rebuild ──► stage rows, removes, tombstones
//!                                                       │
//!                                                       ▼
//!   commit: rejects ─► tombstones ─► silver + watermark (bronze v, run report)
//!                                                       │
//!                                                       ▼
//!                                        EventLog::append (after every flow)
//! ```
#![deny(missing_docs)]

pub mod cast;
pub mod context;
pub mod dag;
mod error;
pub mod flow;
pub mod maintain;
mod phases;
pub mod ports;
pub mod predicate;
pub mod rejects;
pub mod report;
pub mod run;
pub mod schema;
pub mod stage;
pub mod status;
pub mod stores;
pub mod validate;
pub mod window;

pub use error::{EngineError, Result, failpoint};
