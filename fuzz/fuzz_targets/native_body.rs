//! Every native API request body, decoded as its handler does: tenax::fuzzing::native_bodies.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tenax::fuzzing::native_bodies(data));
