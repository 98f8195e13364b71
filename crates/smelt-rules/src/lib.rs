//! The rules both engines of smelt apply, written once.
//!
//! The embedded engine (`smelt-engine` on DataFusion) and the Spark engine (`smelt-spark`,
//! Spark SQL) each render these rules in their own terms; neither copies them:
//!
//! * [`predicate`]: the columns each pipeline predicate sees, and the functions that
//!   compute the same on both engines (the predicate itself is parsed once by
//!   [`smelt_spec::Predicate`]).
//! * [`order`]: which of a key's changes is the latest — the sequence, then the read
//!   order that breaks its ties.
//! * [`scd1`]: what a key's latest change does to SCD1 silver, as a decision table.
//! * [`watermark`]: where a flow stands against its source, and the message when the
//!   stored watermark is ahead of it.
//! * [`capability`]: what the Spark engine runs, and the refusal of the rest by name.
//! * [`messages`]: what both engines print when the same thing happens.
//! * [`tables`]: the columns of the side tables both engines write (event log, rejects,
//!   tombstones).
//!
//! A rule's message is a [`Message`]: what happened, and the next step.
#![deny(missing_docs)]

pub mod capability;
pub mod messages;
pub mod order;
pub mod predicate;
pub mod scd1;
pub mod tables;
pub mod watermark;

/// A message both engines print: what happened, and the next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// What happened.
    pub text: String,
    /// The next step.
    pub hint: String,
}
