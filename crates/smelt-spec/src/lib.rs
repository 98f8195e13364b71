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
//!
//! Modules depend one way: `load` → `model` → the flow kinds (`apply`, `ingest`,
//! `append`, `replace_where`, `export`) → `check`, `ordered`, `policy`, `ddl`, `locate`,
//! `error`.
#![deny(missing_docs)]

mod append;
mod apply;
pub mod catalog;
mod check;
pub mod ddl;
mod error;
mod export;
pub mod ingest;
mod load;
pub use load::check_lake_url;
mod locate;
mod model;
mod name;
mod ordered;
mod policy;
mod replace_where;
mod script;

pub use append::AppendFlow;
pub use apply::{ApplyFlow, AuditColumns, CastDialect, UpdateTimestampOn};
pub use catalog::{Catalog, CatalogKind};
pub use ddl::{ColumnDef, ColumnType, TableDef, TableName};
pub use error::{SpecError, SpecErrors, did_you_mean};
pub use export::{ChangedBy, Compression, ExportFlow};
pub use ingest::{CsvLayout, FileFormat, IngestAudit, IngestEvolution, IngestFlow};
pub use model::{Engine, Flow, FlowKind, Pipeline};
pub use policy::{
    OnCastError, OnChangedFile, OnRewrite, OnSequenceConflict, OnViolation, OptimizeMode,
    SchemaEvolution, SourceDeletes, UpdateColumns, WriteMode,
};
pub use replace_where::{ReplaceSource, ReplaceWhereFlow};

/// The pipeline model and the apply flow at their former paths (`smelt_spec::pipeline::…`).
pub mod pipeline {
    pub use crate::apply::{ApplyFlow, AuditColumns, COMMIT_TIMESTAMP, END_AT, START_AT};
    pub use crate::check::parse_duration;
    pub use crate::model::{Flow, FlowKind, Pipeline};
    pub use crate::policy::{
        OnCastError, OnSequenceConflict, OnViolation, SchemaEvolution, SourceDeletes, UpdateColumns,
    };
}

/// The `append`, `replace_where` and `export` flows at their former paths
/// (`smelt_spec::flows::…`).
pub mod flows {
    pub use crate::append::AppendFlow;
    pub use crate::export::{ChangedBy, Compression, ExportFlow};
    pub use crate::policy::OnRewrite;
    pub use crate::replace_where::{ReplaceSource, ReplaceWhereFlow};
}
