//! The `apply` flow: bronze changes → silver by key (SCD type 1 or 2), its audit and
//! history columns, and its raw YAML form. The validator is in `apply/validate.rs`.
//!
//! ```yaml
//! lake: ./lake
//! flows:
//!   product2:
//!     apply:
//!       from: medallion_demo.product2__bronze
//!       into: medallion_demo.product2__silver
//!       schema: product2_silver.sql
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ddl::{self, ColumnType, TableDef, TableName};
use crate::error::SpecError;
use crate::ordered::Ordered;
use crate::policy::{
    ChangeData, OnCastError, OnSequenceConflict, OnViolation, OptimizeMode, SchemaEvolution,
    SourceDeletes, UpdateColumns, WriteMode,
};

mod validate;

pub(crate) use validate::apply_flow;

/// The change-metadata column that the default sequence uses.
pub const COMMIT_TIMESTAMP: &str = "_commit_timestamp";

/// Names of the audit columns smelt maintains in silver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditColumns {
    /// Commit timestamp of the winning bronze change (`None` = not kept).
    pub ingest_timestamp: Option<String>,
    /// Time of the run that last inserted or changed the row (`None` = not kept).
    pub update_timestamp: Option<String>,
    /// Which writes stamp `update_timestamp`.
    pub update_timestamp_on: UpdateTimestampOn,
}

/// Whose rules cast bronze strings to silver's types (`cast_dialect`; docs/semantics.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CastDialect {
    /// BigQuery's `SAFE_CAST`.
    #[serde(rename = "bigquery")]
    BigQuery,
    /// Spark's `try_cast` (Databricks with ANSI on).
    Spark,
    /// smelt's own: trimmed, booleans in the common spellings, Arrow's parsers.
    Lenient,
}

/// Which writes of a row stamp its `update_timestamp` (`audit.update_timestamp_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateTimestampOn {
    /// An insert, or an update whose data differs (default): a newer change with the same
    /// data refreshes the sequence and ingest time and keeps the stamp.
    #[default]
    Change,
    /// Every insert and every newer update, same data or not: seed 000's MERGE, which sets
    /// `_update_timestamp = CURRENT_TIMESTAMP()` whenever the bronze row is newer.
    Apply,
}

impl Default for AuditColumns {
    fn default() -> Self {
        Self {
            ingest_timestamp: Some("_ingest_timestamp".into()),
            update_timestamp: Some("_update_timestamp".into()),
            update_timestamp_on: UpdateTimestampOn::Change,
        }
    }
}

/// An `apply` flow: bronze changes → one silver row per key (`scd: 1`) or its full history (`scd: 2`).
#[derive(Debug, Clone)]
pub struct ApplyFlow {
    /// Bronze table.
    pub from: TableName,
    /// Silver table.
    pub into: TableName,
    /// Silver schema from the DDL file (audit columns included), if `schema:` is given;
    /// otherwise silver must already exist.
    pub silver: Option<TableDef>,
    /// The DDL file, if any.
    pub schema_file: Option<PathBuf>,
    /// Key columns (from `keys:` or the DDL's primary key).
    pub keys: Vec<String>,
    /// Columns ordering changes of one key; `_commit_timestamp` means the bronze commit time.
    pub sequence_by: Vec<String>,
    /// Audit columns.
    pub audit: AuditColumns,
    /// Cast failure policy.
    pub on_cast_error: OnCastError,
    /// Whose rules the casts follow; by default BigQuery's when the schema file uses
    /// BigQuery's type names, else Spark's.
    pub cast_dialect: CastDialect,
    /// Zone for timestamps written without an offset (IANA name or `+HH:MM`); UTC by default.
    pub tz: Option<String>,
    /// SQL predicate over the bronze row that turns an upsert into a delete
    /// (`IsDeleted = 'true'`, `op = 'D'`).
    pub apply_as_deletes: Option<String>,
    /// What bronze change-feed deletes do.
    pub source_deletes: SourceDeletes,
    /// SQL predicate over the bronze row that makes a change a truncate: silver is emptied
    /// as of its sequence (SCD1 only).
    pub apply_as_truncates: Option<String>,
    /// A NULL in a change keeps the stored value instead of overwriting it.
    pub ignore_null_updates: bool,
    /// Which silver columns an update of an existing key sets.
    pub update_columns: UpdateColumns,
    /// SQL predicate over the latest (typed) state of a key: keys that fail it are not kept.
    pub filter: Option<String>,
    /// How long tombstones of deleted keys are kept (`None`: forever).
    pub tombstone_retention: Option<std::time::Duration>,
    /// Named SQL predicates over the typed change (`expect:`), in file order.
    pub expectations: Vec<(String, String)>,
    /// What a change failing an expectation does.
    pub on_violation: OnViolation,
    /// What equal-sequence conflicts do.
    pub on_sequence_conflict: OnSequenceConflict,
    /// What new columns do.
    pub schema_evolution: SchemaEvolution,
    /// A DDL type wider than the table's (INT → BIGINT, DECIMAL precision up) rewrites
    /// silver with the wider type instead of failing.
    pub widen_types: bool,
    /// SCD type: 1 (one row per key) or 2 (history: one row per version, with
    /// [`START_AT`] and [`END_AT`]).
    pub scd: u8,
    /// SCD2: the columns whose change starts a new version (`track_history`); a change in
    /// the others updates the current version in place.
    pub history: UpdateColumns,
    /// How silver and tombstone rows are replaced and deleted (`write_mode`).
    pub write_mode: WriteMode,
    /// Merge-on-read: whether change data files are written or derived by readers
    /// (`change_data`).
    pub change_data: ChangeData,
    /// Whether the flow optimizes silver and tombstones after its commit (`optimize`).
    pub optimize: OptimizeMode,
}

/// SCD2: the column holding the sequence at which a version starts.
pub const START_AT: &str = "__START_AT";
/// SCD2: the column holding the sequence at which a version ends (NULL: current).
pub const END_AT: &str = "__END_AT";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApply {
    from: String,
    into: String,
    schema: Option<PathBuf>,
    keys: Option<Vec<String>>,
    sequence_by: Option<Vec<String>>,
    scd: Option<u8>,
    audit: Option<RawAudit>,
    on_cast_error: Option<OnCastError>,
    #[serde(default)]
    cast_dialect: Option<CastDialect>,
    tz: Option<String>,
    apply_as_deletes: Option<String>,
    apply_as_truncates: Option<String>,
    source_deletes: Option<SourceDeletes>,
    #[serde(default)]
    ignore_null_updates: bool,
    column_list: Option<Vec<String>>,
    except_column_list: Option<Vec<String>>,
    #[serde(rename = "where")]
    filter: Option<String>,
    tombstone_retention: Option<String>,
    track_history: Option<Vec<String>>,
    track_history_except: Option<Vec<String>>,
    schema_evolution: Option<SchemaEvolution>,
    #[serde(default)]
    widen_types: bool,
    #[serde(default)]
    expect: Ordered<String>,
    on_violation: Option<OnViolation>,
    on_sequence_conflict: Option<OnSequenceConflict>,
    pub(crate) write_mode: Option<WriteMode>,
    change_data: Option<ChangeData>,
    optimize: Option<OptimizeMode>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    #[serde(default = "some_ingest")]
    ingest_timestamp: Option<String>,
    #[serde(default = "some_update")]
    update_timestamp: Option<String>,
    #[serde(default)]
    update_timestamp_on: Option<UpdateTimestampOn>,
}

fn some_ingest() -> Option<String> {
    AuditColumns::default().ingest_timestamp
}
fn some_update() -> Option<String> {
    AuditColumns::default().update_timestamp
}

/// Adds the SCD2 history columns, typed like the sequence, unless the DDL declares them.
fn with_history_columns(mut def: TableDef, ty: ColumnType) -> TableDef {
    for name in [START_AT, END_AT] {
        if !def.columns.iter().any(|c| c.name == name) {
            def.columns.push(ddl::ColumnDef {
                name: name.to_string(),
                ty,
                nullable: true,
            });
        }
    }
    def
}

/// Adds the audit columns to a silver definition when the DDL does not declare them, and
/// checks their type when it does.
fn with_audit_columns(
    mut def: TableDef,
    audit: &AuditColumns,
    path: &Path,
    field: &str,
    line: Option<usize>,
    errors: &mut Vec<SpecError>,
) -> TableDef {
    for name in [&audit.ingest_timestamp, &audit.update_timestamp]
        .into_iter()
        .flatten()
    {
        match def.columns.iter().find(|c| &c.name == name) {
            Some(c) if c.ty != ColumnType::Timestamp => errors.push(
                SpecError::new(
                    path,
                    field,
                    format!("audit column `{name}` is {} in the table definition", c.ty),
                )
                .at(line)
                .hint("declare it as TIMESTAMP, or name another audit column"),
            ),
            Some(_) => {}
            None => def.columns.push(ddl::ColumnDef {
                name: name.clone(),
                ty: ColumnType::Timestamp,
                nullable: true,
            }),
        }
    }
    def
}
