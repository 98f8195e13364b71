//! The keys smelt writes beside a commit — a Delta commit's `commitInfo`, an Iceberg
//! snapshot's summary — defined once for every adapter and both engines.

/// The run that made the commit.
pub const RUN_ID: &str = "smelt.run_id";
/// The flow's run report, as JSON (what the event log gets back when a crash lost its row).
pub const REPORT: &str = "smelt.report";
/// The flow's watermark application id (`smelt/<flow>`), beside Delta's `txn` action.
pub const FLOW: &str = "smelt.flow";
/// The source version the commit's watermark records, beside Delta's `txn` action.
pub const SOURCE_VERSION: &str = "smelt.source_version";
/// A maintenance commit's operation (`optimize`, `widen`, …): not a flow's run.
pub const OPERATION: &str = "smelt.operation";
/// `derived` on a commit whose change data its readers derive (`change_data: derived`):
/// the rows its deletion vectors and removed files delete are deletes, the rows of its new
/// files inserts; no row was copied.
pub const CHANGE_DATA: &str = "smelt.change_data";
/// What Iceberg summaries written before 2026-12-05 call [`RUN_ID`]; still read.
pub const LEGACY_ICEBERG_RUN_ID: &str = "smelt.run-id";

/// Where a table has no `txn` action (Iceberg), the key prefix of a flow's watermark in a
/// snapshot summary and in the table's properties: `smelt.watermark.<app id>`.
pub const WATERMARK: &str = "smelt.watermark.";
/// Beside it, the key prefix of the table the flow read.
pub const SOURCE: &str = "smelt.source.";
/// … and of the snapshot id it read up to, when the source has snapshot ids.
pub const SOURCE_SNAPSHOT: &str = "smelt.source-snapshot-id.";
/// Where a commit has no free-form commit info (Iceberg), the key prefix of a flow's
/// extra commit entries (its ledgers) in the snapshot summary.
pub const EXTRA: &str = "smelt.extra.";
