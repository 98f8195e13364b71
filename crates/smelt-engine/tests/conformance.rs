//! The port conformance suite (`smelt_test::scd1`, `smelt_test::scd2`) on the in-memory
//! ports: the SCD1 and SCD2 model properties with no storage at all, so a failure here is
//! the engine's, not a format's.

smelt_test::conformance_suite!(smelt_test::mem::MemLake);
