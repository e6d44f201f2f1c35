//! `pools.rs` still declares `mod common;`, as it did when it was a test binary of its own; in
//! this binary that module is this one, the binary's harness under another name. It must not be
//! a second copy of `tests/it/common/`: the statics there (the shared PostgreSQL cluster, the
//! port counter) are one per process.

pub use crate::common::*;
