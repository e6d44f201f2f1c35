//! A primary demoted to a standby by a failover: the connections made to it before stay open,
//! and every write on them is refused as read-only (SQLSTATE 25006). Such a refusal counts as a
//! lost connection: the request gets a 503 ([`super::fault`]), and every connection made
//! before the refusal was seen is dropped when it comes back to its pool instead of being
//! handed out again (the pool's pre-recycle hook asks [`predates`]). New connections go to a
//! writable server ([`super::connect`]: `target_session_attrs=read-write`).
//!
//! When the refusal was seen is kept for the process, not per store: the statements that see
//! it are far from any store, and a process has one store (in the tests, a needless reconnect
//! of another store's pool is the whole cost).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The start of this clock.
static EPOCH: OnceLock<Instant> = OnceLock::new();
/// Nanoseconds from [`EPOCH`] to the latest refusal, plus one (0: none yet).
static SEEN: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

/// A write was refused as read-only just now.
pub fn seen() {
    let since = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
    let before = SEEN.fetch_max(since + 1, Ordering::Relaxed);
    // Once per burst: every statement on the old connections says the same.
    if before == 0 || since.saturating_sub(before - 1) > 1_000_000_000 {
        tracing::warn!(
            "PostgreSQL refused a write as read-only (a failover demoted the primary?): the \
             connections made until now are dropped as they come back"
        );
    }
}

/// Whether a connection made at `created` was made before the latest refusal, and so may be
/// to the demoted server.
pub fn predates(created: Instant) -> bool {
    let seen = SEEN.load(Ordering::Relaxed);
    if seen == 0 {
        return false;
    }
    let at = epoch() + std::time::Duration::from_nanos(seen - 1);
    created <= at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_made_before_a_refusal_are_retired() {
        let before = Instant::now();
        seen();
        let after = Instant::now();
        assert!(predates(before));
        assert!(!predates(after + std::time::Duration::from_millis(1)));
    }
}
