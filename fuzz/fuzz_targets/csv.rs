//! `cargo fuzz run csv`: [`smelt_fuzz::csv`] on libFuzzer's inputs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| smelt_fuzz::csv(data));
