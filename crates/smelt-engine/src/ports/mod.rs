//! The ports a table format and a file store implement (DESIGN §7). Small on purpose:
//! required methods are the minimum the run contract needs; extra abilities are defaulted.
//!
//! * [`Lake`]: where tables live — change sources, tables by role, the event log;
//!   [`Catalogs`] routes each table to the lake of its format (Delta, a named catalog).
//! * [`ChangeSource`]: a table's changes, in commit, file and row order.
//! * [`TableView`] (read-only: what `Lake::inspect` gives), [`TableSink`], [`KeyedTable`],
//!   [`WatermarkStore`]: a table a flow writes, with its watermark; [`LakeTable`] is all
//!   of them (what `Lake::table` gives).
//! * [`FileStores`]: landing folders ([`Landing`]: list, read as batches) and export
//!   targets ([`ExportTarget`]), implemented by `smelt-ingest`.
//! * [`Reporter`]: progress and warnings, drawn by the CLI.
//! * [`keys`]: the keys smelt writes beside a commit, for every adapter.
//! * [`OptimizePolicy`], [`VacuumPlan`]: table maintenance asked of a [`TableSink`].

mod aligned;
mod catalogs;
mod event_log;
mod files;
pub mod keys;
mod lake;
mod maintain;
mod reporter;
mod rows;
mod source;
mod table;

pub use aligned::Aligned;
pub use catalogs::Catalogs;
pub use event_log::EventLog;
pub use files::{
    ExportFile, ExportState, ExportTarget, FileRows, FileStores, Landing, LandingFile, Malformed,
    RawRows,
};
pub use lake::{Lake, SourceOptions, TableRole};
pub use maintain::{OptimizePolicy, OptimizeStats, VacuumPlan, VacuumStats};
pub use reporter::{Reporter, Silent};
pub use rows::expired_rows;
pub use source::{ChangeSet, ChangeSource};
pub use table::{
    KeyedTable, LakeTable, LastCommit, TableSink, TableView, Watermark, WatermarkSource,
    WatermarkStore, WriteStats,
};
