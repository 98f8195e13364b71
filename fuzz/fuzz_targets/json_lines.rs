//! `cargo fuzz run json_lines`: [`smelt_fuzz::json_lines`] on libFuzzer's inputs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| smelt_fuzz::json_lines(data));
