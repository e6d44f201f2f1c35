//! Zaqar queue-metadata PATCH documents, applied, checked and installed: tenax::fuzzing::zaqar_patch.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tenax::fuzzing::zaqar_patch(data));
