//! Policy JSON in all three spellings: tenax_fuzzing::policy.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tenax_fuzzing::policy(data));
