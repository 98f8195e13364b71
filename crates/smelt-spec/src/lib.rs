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
pub mod bounds;
pub mod catalog;
mod check;
pub mod ddl;
mod error;
mod export;
pub mod ingest;
mod load;
pub use check::check_lake_url;
mod locate;
mod model;
mod name;
mod ordered;
mod policy;
pub mod predicate;
mod replace_where;
mod script;
mod storage;

pub use append::AppendFlow;
pub use apply::{
    ApplyFlow, AuditColumns, COMMIT_TIMESTAMP, CastDialect, END_AT, START_AT, UpdateTimestampOn,
};
pub use catalog::{Catalog, CatalogKind};
pub use check::parse_duration;
pub use ddl::{ColumnDef, ColumnType, TableDef, TableName};
pub use error::{SpecError, SpecErrors, did_you_mean};
pub use export::{ChangedBy, Compression, ExportFlow};
pub use ingest::{CsvLayout, FileFormat, IngestAudit, IngestEvolution, IngestFlow};
pub use model::{ChangeFeed, Engine, Flow, FlowKind, Pipeline};
pub use policy::{
    ChangeData, OnCastError, OnChangedFile, OnRewrite, OnSequenceConflict, OnViolation,
    OptimizeMode, SchemaEvolution, SourceDeletes, UpdateColumns, WriteMode,
};
pub use predicate::{Predicate, PredicateError};
pub use replace_where::{ReplaceSource, ReplaceWhereFlow};
/// The SQL parser predicates and table definitions are read with.
pub use sqlparser;
pub use storage::StoreSettings;
