//! Delta Lake over Spark SQL: smelt reads a table's log itself (through Spark's text and
//! JSON readers) and tells Spark exactly what to read and how to commit.
//!
//! * `describe`: a table's last commit, history and schema.
//! * `layout`: a source's deletion vectors, partitions and column mapping.
//! * `log`: the SQL text of reading the log and the change files of a span of versions.
//! * `parquet`, `reader`: the SQL text of reading their rows, straight from the files or by
//!   Delta's reader.
//! * `read`: a Delta source's change rows, driven through a session.

pub(crate) mod ddl;
pub(crate) mod describe;
pub(crate) mod layout;
pub(crate) mod log;
pub(crate) mod parquet;
pub(crate) mod read;
pub(crate) mod reader;
pub(crate) mod txn;
