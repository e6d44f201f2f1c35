//! Every native API request body, decoded as its handler does: tenax_fuzzing::native_bodies.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tenax_fuzzing::native_bodies(data));
