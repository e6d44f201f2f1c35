//! Loopback ports for listeners a test names before a server binds them (`--listen`,
//! `--metrics-listen`).
//!
//! Why not a port the kernel hands out (`127.0.0.1:0`), released and passed on: between the
//! release and the server's bind, any other socket of the machine asking for an ephemeral port
//! (another test's server, any client connection's source port) may get the same one, and the
//! server then fails with "address in use". These ports are drawn below the ephemeral range
//! (32768–60999 on Linux by default, `net.ipv4.ip_local_port_range`), which nothing takes
//! unasked, and are checked free; a counter keeps the tests of one binary apart.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The first port drawn from, and how many there are.
const FIRST: u32 = 20_000;
const SPAN: u32 = 12_000;

/// A loopback port below the ephemeral range, free a moment ago, for a server to bind next.
pub fn spare_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Test binaries of one run start from different places.
    let start = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + (start + n * 7) % SPAN).expect("a port below 65536");
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port from {FIRST} to {}", FIRST + SPAN);
}
