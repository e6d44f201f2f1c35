//! When a shared commit ([`super::combiner`]) should wait a moment before it leaves: the
//! requests that will share it may be on their way.
//!
//! Clients that each send one small enqueue at a time come back one round trip after their
//! answer. A commit that leaves as soon as the previous one is done carries only those that
//! arrived meanwhile, and the others start the next commit: with `n` such clients, commits of
//! about `n / 2` requests each. PostgreSQL's cost is per transaction more than per row, so
//! fewer, fuller commits leave more of the machine for everything else: this is what lets
//! two servers, each with half the clients, be as fast as one (docs/benchmarks.md).
//!
//! The rule, like PostgreSQL's own `commit_delay` / `commit_siblings`: the last commit carried
//! `b` requests and `a` more arrived while it ran, so about `b + a` requests are in play. The
//! next commit, when it would leave with fewer, waits for them, but never longer than the
//! last commit took (nor [`MOST`]), and not at all when the last commit is not recent. A lone
//! request (the last commit carried one and none came meanwhile) never waits.
//!
//! Pure: time is passed in, so the rule is tested without clocks.

use std::time::{Duration, Instant};

/// The longest a commit waits for company.
pub const MOST: Duration = Duration::from_millis(2);

/// How long what the last commit saw is a guide: after a pause longer than this the load is
/// unknown, and the next commit leaves at once.
pub const RECENT: Duration = Duration::from_millis(20);

/// What the last commit saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct Linger {
    /// Its requests, and those that arrived while it ran.
    expected: usize,
    /// How long it took.
    took: Duration,
    /// When it ended; `None` before the first.
    ended: Option<Instant>,
}

/// Wait until `requests` are queued, or for `at_most`, whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub requests: usize,
    pub at_most: Duration,
}

impl Linger {
    /// A commit of `carried` requests took `took` and ended at `ended`; `arrived` requests
    /// came while it ran.
    pub fn committed(&mut self, carried: usize, arrived: usize, took: Duration, ended: Instant) {
        *self = Self {
            expected: carried.saturating_add(arrived),
            took,
            ended: Some(ended),
        };
    }

    /// Whether a commit about to leave at `now` with `queued` requests waits, and for what.
    /// `full` says the queued requests already fill a commit.
    pub fn plan(&self, queued: usize, full: bool, now: Instant) -> Option<Wait> {
        let ended = self.ended?;
        let recent = now.saturating_duration_since(ended) <= RECENT;
        if full || !recent || queued >= self.expected || self.took.is_zero() {
            return None;
        }
        Some(Wait {
            requests: self.expected,
            at_most: self.took.min(MOST),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nothing_is_known_before_the_first_commit() {
        let now = Instant::now();
        assert_eq!(Linger::default().plan(1, false, now), None);
    }

    #[test]
    fn a_lone_request_never_waits() {
        let t0 = Instant::now();
        let mut linger = Linger::default();
        linger.committed(1, 0, ms(1), t0);
        assert_eq!(linger.plan(1, false, t0), None);
        assert_eq!(linger.plan(1, false, t0 + ms(1)), None);
    }

    #[test]
    fn waits_for_the_requests_of_the_last_round_up_to_its_commit_time() {
        let t0 = Instant::now();
        let mut linger = Linger::default();
        // 2 carried, 2 more came meanwhile: 4 in play.
        linger.committed(2, 2, Duration::from_micros(700), t0);
        assert_eq!(
            linger.plan(2, false, t0),
            Some(Wait {
                requests: 4,
                at_most: Duration::from_micros(700),
            })
        );
        assert_eq!(linger.plan(4, false, t0), None, "all there");
        assert_eq!(linger.plan(5, false, t0), None);
    }

    #[test]
    fn never_waits_longer_than_the_most() {
        let t0 = Instant::now();
        let mut linger = Linger::default();
        linger.committed(8, 0, ms(40), t0);
        assert_eq!(linger.plan(1, false, t0).map(|w| w.at_most), Some(MOST));
    }

    #[test]
    fn an_old_round_is_no_guide() {
        let t0 = Instant::now();
        let mut linger = Linger::default();
        linger.committed(8, 0, ms(1), t0);
        assert!(linger.plan(1, false, t0 + RECENT).is_some());
        assert_eq!(linger.plan(1, false, t0 + RECENT + ms(1)), None);
    }

    #[test]
    fn a_full_commit_leaves_at_once() {
        let t0 = Instant::now();
        let mut linger = Linger::default();
        linger.committed(8, 8, ms(1), t0);
        assert_eq!(linger.plan(3, true, t0), None);
    }
}
