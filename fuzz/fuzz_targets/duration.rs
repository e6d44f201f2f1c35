//! Durations: parse_duration, and format_duration read back: tenax_fuzzing::duration.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tenax_fuzzing::duration(data));
