//! Zaqar queue-metadata PATCH documents, applied, checked and installed: tenax_fuzzing::zaqar_patch.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tenax_fuzzing::zaqar_patch(data));
