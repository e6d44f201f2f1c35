//! Policy JSON in all three spellings: tenax::fuzzing::policy.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tenax::fuzzing::policy(data));
