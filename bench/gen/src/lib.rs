//! Test and benchmark data for smelt: TPC-H `part` files for the `tpch_part` example
//! (seed 002), made by the `tpchgen` crate (a port of the TPC-H `dbgen`); and an
//! independent Delta reader for checks (`kernel`).

pub mod kernel;
pub mod tpch;
