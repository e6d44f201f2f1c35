//! Zaqar message-post bodies: tenax_fuzzing::zaqar_post.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tenax_fuzzing::zaqar_post(data));
