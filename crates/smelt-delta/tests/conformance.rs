//! The port conformance suite (`smelt_test::scd1`, `smelt_test::scd2`) on Delta: bronze,
//! silver and tombstones as Delta tables in a temporary folder, read back by delta-rs' own
//! scan (not smelt's lookups): [`smelt_test::delta::Delta`].

smelt_test::conformance_suite!(smelt_test::delta::Delta);
