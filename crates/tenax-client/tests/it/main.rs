//! The client's tests against the real server, in one test binary (built and linked once): a
//! module per suite, its tests named `<suite>::<test>` (`cargo test -p tenax-client --test it --
//! worker::`), and the harness they share in `common/`.

mod common;

mod batches;
mod client;
mod worker;
