//! What one connection is doing, as far as its time bounds and the connection table care:
//! whether it has begun a request yet, how many requests it has in flight, since when it has
//! been idle, whether a new request head has started arriving, and whether its writes are
//! stalled. The socket ([`super::io::Watched`]) and the service ([`super::service`]) record
//! it; the connection's own task ([`super::connection`]) reads it to decide when to close,
//! and the accept loop ([`super::slots`]) reads it to choose which connection to close when
//! it must make room.
//!
//! Invariants:
//! - a request is in flight from the moment its head is complete (the service is called) until
//!   its response body has been sent or dropped; a connection with a request in flight is never
//!   idle, however long the response takes (long polls, streaming takes);
//! - `idle_since` is written before `in_flight` falls to 0, so a reader that sees 0 requests
//!   in flight also sees when they ended;
//! - [`Activity::check`] is a pure function of the recorded state and `now`: it never closes a
//!   connection before its bound, and the time it returns is never later than the next bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::slots::Room;

/// How long a connection whose graceful close began (an HTTP/2 GOAWAY, an HTTP/1 keep-alive
/// turned off) may take to finish once no request is in flight on it; then it is dropped. It
/// covers the round trip of HTTP/2's closing ping, not the client's good will.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A connection's time bounds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// From accept to the first request's complete head (TLS handshake included); and, on
    /// HTTP/1.1 between requests, from a new head's first byte to its end.
    pub header_read: Duration,
    /// How long a connection with no request in flight stays open; and how long a response
    /// may wait for the client to accept any of its bytes.
    pub idle: Duration,
}

/// Why a connection is closed by its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expiry {
    /// A request head (the first, or on HTTP/1.1 the next once begun) did not complete in time.
    Head,
    /// No request in flight for the idle bound: close gracefully.
    Idle,
    /// The client accepted no byte of what was written to it for the idle bound.
    Stalled,
    /// A graceful close did not finish within [`CLOSE_GRACE`] of having nothing in flight.
    Closing,
}

/// When the connection's task must look again, or that a bound has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Due {
    At(Instant),
    Now(Expiry),
}

/// Where a connection stands, for the choice of which one to close to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// No request begun yet: silent, or in its handshake or first head.
    Unserved,
    /// Served before, nothing in flight now, since this instant.
    Idle(Instant),
    /// A request in flight.
    Busy,
}

/// One connection's activity. Times are stored as nanoseconds after `accepted` (plus one where
/// 0 means "none"), in atomics, because the socket, the service and the stream tasks of an
/// HTTP/2 connection record them from different tasks.
#[derive(Debug)]
pub(super) struct Activity {
    accepted: Instant,
    in_flight: AtomicU32,
    /// A request has begun on this connection.
    served: AtomicBool,
    /// When `in_flight` last fell to 0.
    idle_since: AtomicU64,
    /// The first byte read while nothing was in flight, plus one; 0 when none. On HTTP/1.1
    /// that is the start of the next request's head.
    head_started: AtomicU64,
    /// The first write that found the socket full since the last that was accepted, plus one;
    /// 0 when none.
    stalled_since: AtomicU64,
    /// Set by the connection table when it closes this connection to make room.
    evicted: AtomicBool,
    eviction: Notify,
    /// Told when this connection stops being busy, if the accept loop waits for room.
    room: Arc<Room>,
}

impl Activity {
    pub(super) fn new(accepted: Instant, room: Arc<Room>) -> Self {
        Self {
            accepted,
            in_flight: AtomicU32::new(0),
            served: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            head_started: AtomicU64::new(0),
            stalled_since: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            eviction: Notify::new(),
            room,
        }
    }

    pub(super) fn accepted(&self) -> Instant {
        self.accepted
    }

    /// Nanoseconds from accept to `at`, plus one (so that 0 stays "none").
    fn stamp(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.accepted).as_nanos())
            .unwrap_or(u64::MAX - 1)
            + 1
    }

    fn instant(&self, stamp: u64) -> Option<Instant> {
        (stamp != 0).then(|| self.accepted + Duration::from_nanos(stamp - 1))
    }

    /// A request's head is complete: it is in flight until the guard is dropped (with the
    /// response body, or with the request if it is abandoned).
    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        self.served.store(true, Ordering::Relaxed);
        self.head_started.store(0, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Some(self.clone()))
    }

    fn end(&self, now: Instant) {
        // Before the decrement: see the module's invariants.
        self.idle_since
            .fetch_max(self.stamp(now), Ordering::Release);
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.room.made();
        }
    }

    /// The socket delivered bytes; `now` is called only if the time is needed.
    pub(super) fn read_some(&self, now: impl FnOnce() -> Instant) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.head_started.load(Ordering::Relaxed) == 0
        {
            self.head_started
                .store(self.stamp(now()), Ordering::Relaxed);
        }
    }

    /// A write found the socket's buffer full; `now` is called only if the time is needed.
    pub(super) fn write_blocked(&self, now: impl FnOnce() -> Instant) {
        if self.stalled_since.load(Ordering::Relaxed) == 0 {
            self.stalled_since
                .store(self.stamp(now()), Ordering::Relaxed);
        }
    }

    /// A write was accepted.
    pub(super) fn wrote(&self) {
        if self.stalled_since.load(Ordering::Relaxed) != 0 {
            self.stalled_since.store(0, Ordering::Relaxed);
        }
    }

    pub(super) fn served(&self) -> bool {
        self.served.load(Ordering::Relaxed)
    }

    pub(super) fn standing(&self) -> Standing {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            Standing::Busy
        } else if !self.served() {
            Standing::Unserved
        } else {
            let since = self.idle_since.load(Ordering::Acquire);
            Standing::Idle(self.instant(since).unwrap_or(self.accepted))
        }
    }

    #[cfg(test)]
    pub(super) fn was_evicted(&self) -> bool {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Asks the connection to close, to make room for another.
    pub(super) fn evict(&self) {
        self.evicted.store(true, Ordering::Relaxed);
        self.eviction.notify_one();
    }

    /// Completes once [`Activity::evict`] has been called (at once if it was before).
    pub(super) async fn evicted(&self) {
        if !self.evicted.load(Ordering::Relaxed) {
            self.eviction.notified().await;
        }
    }

    /// The connection's next bound, or the one that has passed. `http1`: the connection speaks
    /// HTTP/1.1, whose requests follow one another, so a head begun while idle is bounded by
    /// the header bound rather than the idle one (HTTP/2 frames read while idle, pings among
    /// them, do not keep a connection open). `closing`: when a graceful close began.
    pub(super) fn check(
        &self,
        now: Instant,
        bounds: Bounds,
        http1: bool,
        closing: Option<Instant>,
    ) -> Due {
        let mut due = now + bounds.idle;
        if let Some(stalled) = self.instant(self.stalled_since.load(Ordering::Relaxed)) {
            let end = stalled + bounds.idle;
            if now >= end {
                return Due::Now(Expiry::Stalled);
            }
            due = due.min(end);
        }
        let bound = match (self.standing(), closing) {
            // In flight: not idle, however long it takes; look again later.
            (Standing::Busy, _) => None,
            (_, Some(began)) => Some((began + CLOSE_GRACE, Expiry::Closing)),
            (Standing::Unserved, None) => Some((self.accepted + bounds.header_read, Expiry::Head)),
            (Standing::Idle(since), None) => {
                let head = self.instant(self.head_started.load(Ordering::Relaxed));
                match head {
                    Some(head) if http1 => Some((head + bounds.header_read, Expiry::Head)),
                    _ => Some((since + bounds.idle, Expiry::Idle)),
                }
            }
        };
        if let Some((end, expiry)) = bound {
            if now >= end {
                return Due::Now(expiry);
            }
            due = due.min(end);
        }
        Due::At(due)
    }
}

/// A request in flight on a connection, until dropped.
#[derive(Debug)]
pub(super) struct InFlight(Option<Arc<Activity>>);

impl InFlight {
    /// Ends the request at `now` (dropping it ends it at the time of the drop).
    #[cfg(test)]
    pub(super) fn end_at(mut self, now: Instant) {
        if let Some(activity) = self.0.take() {
            activity.end(now);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(activity) = self.0.take() {
            activity.end(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        header_read: Duration::from_secs(10),
        idle: Duration::from_secs(60),
    };

    fn activity(t0: Instant) -> Arc<Activity> {
        Arc::new(Activity::new(t0, Arc::new(Room::default())))
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_connection_without_a_request_has_the_header_bound_from_accept() {
        let t0 = Instant::now();
        let a = activity(t0);
        assert_eq!(a.standing(), Standing::Unserved);
        assert_eq!(a.check(t0, BOUNDS, true, None), Due::At(t0 + s(10)));
        // Bytes of a head do not extend it.
        a.read_some(|| t0 + s(9));
        assert_eq!(a.check(t0 + s(9), BOUNDS, true, None), Due::At(t0 + s(10)));
        assert_eq!(
            a.check(t0 + s(10), BOUNDS, false, None),
            Due::Now(Expiry::Head)
        );
    }

    #[test]
    fn a_request_in_flight_is_never_idle_and_idleness_counts_from_its_end() {
        let t0 = Instant::now();
        let a = activity(t0);
        let request = a.begin();
        assert_eq!(a.standing(), Standing::Busy);
        for later in [s(0), s(59), s(3_600)] {
            let now = t0 + later;
            assert_eq!(a.check(now, BOUNDS, true, None), Due::At(now + s(60)));
        }
        let ended = t0 + s(3_600);
        request.end_at(ended);
        assert_eq!(a.standing(), Standing::Idle(ended));
        assert_eq!(a.check(ended, BOUNDS, false, None), Due::At(ended + s(60)));
        assert_eq!(
            a.check(ended + s(60), BOUNDS, false, None),
            Due::Now(Expiry::Idle)
        );
    }

    #[test]
    fn a_head_begun_while_idle_has_the_header_bound_on_http1_only() {
        let t0 = Instant::now();
        let a = activity(t0);
        a.begin().end_at(t0);
        a.read_some(|| t0 + s(50));
        // HTTP/1.1: the head that began at 50 s has until 60 s.
        assert_eq!(a.check(t0 + s(50), BOUNDS, true, None), Due::At(t0 + s(60)));
        assert_eq!(
            a.check(t0 + s(60), BOUNDS, true, None),
            Due::Now(Expiry::Head)
        );
        // HTTP/2: frames read while idle (pings) do not matter.
        assert_eq!(
            a.check(t0 + s(59), BOUNDS, false, None),
            Due::At(t0 + s(60))
        );
        // A request clears it.
        a.begin().end_at(t0 + s(50));
        assert_eq!(
            a.check(t0 + s(50), BOUNDS, true, None),
            Due::At(t0 + s(110))
        );
    }

    #[test]
    fn a_stalled_write_is_bounded_even_in_flight() {
        let t0 = Instant::now();
        let a = activity(t0);
        let _request = a.begin();
        a.write_blocked(|| t0 + s(5));
        a.write_blocked(|| t0 + s(35));
        assert_eq!(a.check(t0 + s(35), BOUNDS, true, None), Due::At(t0 + s(65)));
        assert_eq!(
            a.check(t0 + s(65), BOUNDS, true, None),
            Due::Now(Expiry::Stalled)
        );
        a.wrote();
        assert_eq!(
            a.check(t0 + s(65), BOUNDS, true, None),
            Due::At(t0 + s(125))
        );
    }

    #[test]
    fn a_graceful_close_waits_for_requests_then_for_the_grace() {
        let t0 = Instant::now();
        let a = activity(t0);
        let request = a.begin();
        let closing = Some(t0);
        assert_eq!(
            a.check(t0 + s(5), BOUNDS, false, closing),
            Due::At(t0 + s(65))
        );
        request.end_at(t0);
        assert_eq!(
            a.check(t0 + s(5), BOUNDS, false, closing),
            Due::Now(Expiry::Closing)
        );
        assert_eq!(
            a.check(t0, BOUNDS, false, closing),
            Due::At(t0 + CLOSE_GRACE)
        );
    }

    #[tokio::test]
    async fn an_eviction_before_the_wait_is_not_lost() {
        let a = activity(Instant::now());
        a.evict();
        a.evicted().await;
    }
}
