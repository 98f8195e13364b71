//! smelt's CLI tests: one binary (one link of the whole stack), a module per subject. Each
//! test drives the real `smelt` binary on a temporary project (`common`); services a test
//! needs (S3, Azure, a REST catalog, a Spark cluster, a browser) are installed by
//! `testenv/setup.sh` and started by the tests that use them.

mod azure;
mod bronze_rewrites;
mod cast_dialects;
mod change_feed;
mod cluster;
mod common;
mod concurrent;
mod crashes;
mod damaged;
mod derived_change_data;
mod docs_page;
mod errors;
mod flows;
mod foreign_tables;
mod iceberg;
mod iceberg_flows;
mod iceberg_rest;
mod ingest;
mod keys;
mod ledgers;
mod merge_on_read;
mod pipelines;
mod predicates;
mod product2;
mod product2_deletes;
mod quarantine;
mod races;
mod s3;
mod seed_statements;
mod spark_cast;
mod spark_engine;
mod spark_reads;
mod sql;
mod sql_dml;
mod store_faults;
mod validate;
