//! `cargo fuzz run delta_log`: [`smelt_fuzz::delta_log`] on libFuzzer's inputs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| smelt_fuzz::delta_log(data));
