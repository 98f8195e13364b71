//! Apache Iceberg tables for smelt, behind the engine's ports.
//!
//! The `iceberg` crate models the spec (metadata, manifests, Avro, catalogs) and reads and
//! writes data files on Arrow 58; smelt is on Arrow 59. [`bridge`] moves batches and
//! schemas between the two through the Arrow C Data Interface, without copying buffers.

#![deny(unsafe_code)]

pub mod bridge;
pub mod catalog;
mod cow;
mod deletes;
pub mod error;
pub mod inspect;
pub mod storage;

pub use catalog::IcebergCatalog;
pub use error::{Error, Result};
pub mod lake;
mod ledger;
mod manifests;
mod rest;
mod schema;
mod snapshot;
pub mod source;
pub mod table;

pub use lake::IcebergLake;
