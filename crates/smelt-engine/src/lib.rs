//! The smelt engine: compiles a pipeline into runnable flows, runs and plans them, and
//! reports what they did.
//!
//! It owns the *ports* ([`ports`]) that a table-format adapter implements: a
//! [`ports::ChangeSource`] for bronze, a [`ports::SilverTable`] for silver, and the
//! [`ports::Reporter`] the CLI implements for progress. The semantics themselves live in
//! `smelt-core`; this crate wires them into the run contract of DESIGN §3.
#![deny(missing_docs)]

pub mod append;
pub mod apply;
pub mod dag;
mod error;
pub mod ports;
pub mod predicate;
pub mod rejects;
pub mod replace;
pub mod report;
pub mod schema;
pub mod stage;
pub mod window;

pub use error::{EngineError, Result, failpoint};
