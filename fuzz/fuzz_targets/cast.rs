//! `cargo fuzz run cast`: [`smelt_fuzz::cast`] on libFuzzer's inputs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| smelt_fuzz::cast(data));
