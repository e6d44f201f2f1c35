//! Zaqar message-post bodies: tenax::fuzzing::zaqar_post.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tenax::fuzzing::zaqar_post(data));
