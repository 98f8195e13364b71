//! The smelt pipeline file (`smelt.yaml`) and SQL table definitions, as a typed model.
//!
//! Loading is phase one of validation (DESIGN §2, STYLE "config → plan → run"): the file
//! alone. Every problem is collected with the file, line and field it comes from and a
//! hint, before anything touches a lake. Checks against the lake (tables exist, schemas
//! line up) are the engine's phase two.
//!
//! ```
//! let yaml = "lake: ./lake\nflows:\n  p:\n    apply:\n      from: bronze.p\n      into: silver.p\n      keys: [Id]\n";
//! let pipeline = smelt_spec::Pipeline::from_str(yaml, "smelt.yaml".as_ref()).unwrap();
//! assert_eq!(pipeline.flows[0].name, "p");
//! ```
#![deny(missing_docs)]

pub mod ddl;
mod error;
pub mod flows;
pub mod ingest;
mod locate;
pub mod pipeline;

pub use ddl::{ColumnDef, ColumnType, TableDef, TableName};
pub use error::{SpecError, SpecErrors, did_you_mean};
pub use flows::{
    AppendFlow, ChangedBy, Compression, ExportFlow, OnRewrite, ReplaceSource, ReplaceWhereFlow,
};
pub use ingest::{CsvLayout, FileFormat, IngestAudit, IngestEvolution, IngestFlow, OnChangedFile};
pub use pipeline::{
    ApplyFlow, AuditColumns, Flow, FlowKind, OnCastError, OnSequenceConflict, OnViolation,
    Pipeline, SchemaEvolution, SourceDeletes, UpdateColumns,
};
