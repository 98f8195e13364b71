//! `cargo fuzz run sql`: [`smelt_fuzz::sql`] on libFuzzer's inputs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| smelt_fuzz::sql(data));
