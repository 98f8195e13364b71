//! `cargo fuzz run pipeline`: [`smelt_fuzz::pipeline`] on libFuzzer's inputs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| smelt_fuzz::pipeline(data));
