//! Delta Lake over Spark SQL: smelt reads a table's log itself (through Spark's text and
//! JSON readers) and tells Spark exactly what to read and how to commit.
//!
//! * `describe`: a table's last commit, history, schema and the checks of what it holds.
//! * `log`: the SQL text of reading the log and the change files of a span of versions.
//! * `read`: a Delta source's change rows, driven through a session.

pub(crate) mod ddl;
pub(crate) mod describe;
pub(crate) mod log;
pub(crate) mod read;
pub(crate) mod txn;
