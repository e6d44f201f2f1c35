//! The database's clock, as one server estimates it: on a store shared by several servers,
//! the clock every server decides by, so that a server whose own clock is off neither expires
//! another server's leases early nor runs scheduled jobs early (docs/postgres.md, "Whose clock
//! decides what").
//!
//! A sample is one round trip to the database: this server's monotonic clock read when the
//! question is sent and when the answer comes back, and the database's `clock_timestamp()` read
//! somewhere in between. Taken at the round trip's midpoint, the database's time is known
//! within half the round trip. Between samples the server counts on from its best sample with
//! its monotonic clock, which no step of its wall clock moves (NTP, an operator, libfaketime),
//! and which runs at the database clock's rate within [`DRIFT_PPM`]. So the wall clock of this
//! server plays no part in the answer: it is only compared with it, for the log and the
//! metrics ([`DatabaseTime::offset`]).
//!
//! What is promised, while the database's clock runs steadily:
//! - an answer is within [`DatabaseTime::offset`]'s error bound of the database's clock:
//!   half the best sample's round trip, plus [`DRIFT_PPM`] of its age (on a LAN, sampled every
//!   few seconds, a few milliseconds);
//! - answers never go back. A better sample may put the estimate a little earlier than the
//!   last answer (by at most the two samples' bounds): the last answer is then repeated until
//!   the estimate passes it, at most [`HOLD_MS`].
//!
//! When the database's clock itself is stepped (a sample disagrees with the estimate by more
//! than both bounds), the estimate follows it, forward or back; back by more than [`HOLD_MS`]
//! is the one case where answers go back. Until its first sample, and for as long as the
//! database cannot be reached, a server keeps what it has (the local wall clock at first, then
//! its last estimate, whose bound grows with its age).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::UnixMs;

/// How much faster or slower this server's monotonic clock may run than the database's, in
/// millionths: the kernel slews a clock by at most 500 ppm (NTP's bound), and either machine's
/// may be slewed.
pub const DRIFT_PPM: u64 = 1_000;

/// The longest the answers wait for a better estimate that is earlier than the last answer.
pub const HOLD_MS: u64 = 1_000;

/// A change of the offset to this server's wall clock larger than this is logged.
pub const LOG_STEP_US: i64 = 100_000;

/// One look at the database's clock.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When the question was sent, on this server's monotonic clock.
    pub sent: Instant,
    /// When the answer came back.
    pub received: Instant,
    /// The database's `clock_timestamp()`, in microseconds since the Unix epoch.
    pub database_us: i64,
}

/// What a sample did to the estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// The first sample: the estimate starts from it.
    First,
    /// Its bound is tighter than the kept sample's now: the estimate moves to it.
    Better,
    /// It disagrees with the estimate by more than both bounds, by this many microseconds:
    /// the database's clock was stepped, or this server's monotonic clock stood still (a
    /// suspended machine). The estimate follows it.
    Stepped(i64),
    /// The kept sample is still the better one.
    Kept,
}

/// The sample the estimate comes from.
#[derive(Debug, Clone, Copy)]
struct Best {
    /// The database's time minus this server's monotonic time, in microseconds.
    offset_us: i64,
    /// Half the round trip: how far off the database's time at `at` may be.
    error_us: u64,
    /// The round trip's midpoint.
    at: Instant,
}

impl Best {
    /// How far off the estimate may be at `now`: the sample's own bound, plus the drift since.
    fn error_at(&self, now: Instant) -> u64 {
        let age_us = micros(now.saturating_duration_since(self.at));
        self.error_us
            .saturating_add(age_us.saturating_mul(DRIFT_PPM) / 1_000_000)
    }
}

#[derive(Debug, Default)]
struct State {
    best: Option<Best>,
    /// The offset to this server's wall clock last logged.
    logged_us: Option<i64>,
}

/// The database's clock, estimated from samples (see the module's documentation).
#[derive(Debug)]
pub struct DatabaseTime {
    /// The zero of this server's monotonic clock, in microseconds.
    origin: Instant,
    /// What to add to the monotonic time for the database's: read on every answer, so apart
    /// from `state`, which only samples take.
    offset_us: AtomicI64,
    /// The latest answer, which no later one goes under (but for a step back of the
    /// database's clock).
    last_ms: AtomicU64,
    state: Mutex<State>,
}

impl Default for DatabaseTime {
    fn default() -> Self {
        Self::new()
    }
}

impl DatabaseTime {
    /// An estimate without samples: this server's wall clock, until the first.
    pub fn new() -> Self {
        let origin = Instant::now();
        Self {
            origin,
            offset_us: AtomicI64::new(wall_us()),
            last_ms: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        }
    }

    /// The database's time now, in Unix milliseconds.
    pub fn now_ms(&self) -> UnixMs {
        self.answer_at(Instant::now())
    }

    /// The database's time at `instant`, never under the last answer unless the database's
    /// clock was stepped back by more than [`HOLD_MS`].
    fn answer_at(&self, instant: Instant) -> UnixMs {
        let estimate = u64::try_from(self.estimate_us(instant) / 1_000).unwrap_or(0);
        let mut last = self.last_ms.load(Ordering::Acquire);
        loop {
            // Equal (the common case, many answers per millisecond): nothing to write.
            if estimate <= last && last - estimate <= HOLD_MS {
                return last;
            }
            match self.last_ms.compare_exchange_weak(
                last,
                estimate,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return estimate,
                Err(seen) => last = seen,
            }
        }
    }

    /// The database's time at `instant` by the current estimate, in microseconds.
    fn estimate_us(&self, instant: Instant) -> i64 {
        self.monotonic_us(instant)
            .saturating_add(self.offset_us.load(Ordering::Acquire))
    }

    fn monotonic_us(&self, instant: Instant) -> i64 {
        i64::try_from(micros(instant.saturating_duration_since(self.origin))).unwrap_or(i64::MAX)
    }

    /// Takes `sample` into the estimate if it is better (or the database's clock moved), and
    /// logs the offset to this server's wall clock the first time and when it changes by more
    /// than [`LOG_STEP_US`].
    pub fn offer(&self, sample: Sample) -> Offered {
        self.offer_at(sample, wall_us())
    }

    /// [`DatabaseTime::offer`], with this server's wall clock read at `sample.received` given.
    pub fn offer_at(&self, sample: Sample, wall_at_received_us: i64) -> Offered {
        let half = sample.received.saturating_duration_since(sample.sent) / 2;
        let at = sample.sent + half;
        let candidate = Best {
            offset_us: sample.database_us.saturating_sub(self.monotonic_us(at)),
            // clock_timestamp() counts microseconds: never claim better than one.
            error_us: micros(half).max(1),
            at,
        };
        let mut state = self.state.lock();
        let offered = match state.best {
            None => Offered::First,
            Some(best) => {
                let best_error = best.error_at(sample.received);
                let apart = candidate.offset_us.saturating_sub(best.offset_us);
                if apart.unsigned_abs() > best_error.saturating_add(candidate.error_us) {
                    Offered::Stepped(apart)
                } else if candidate.error_us <= best_error {
                    Offered::Better
                } else {
                    Offered::Kept
                }
            }
        };
        if offered != Offered::Kept {
            state.best = Some(candidate);
            self.offset_us.store(candidate.offset_us, Ordering::Release);
        }
        let offset = self
            .estimate_us(sample.received)
            .saturating_sub(wall_at_received_us);
        let error = state.best.map_or(0, |best| best.error_at(sample.received));
        if let Offered::Stepped(by) = offered {
            // Either clock may have moved: the database's stepped, or this machine was
            // suspended (its monotonic clock stops meanwhile). Either way the database's wins.
            tracing::warn!(
                by = %seconds(by),
                "PostgreSQL's clock moved against this server's monotonic clock (stepped, or \
                 this machine was suspended); this server follows it"
            );
        }
        match state.logged_us {
            None => {
                #[allow(clippy::cast_precision_loss)]
                let said = format!(
                    "this server decides by PostgreSQL's clock, which is {:.6}s {} its own \
                     (± {:.6}s)",
                    offset.unsigned_abs() as f64 / 1e6,
                    if offset < 0 { "behind" } else { "ahead of" },
                    error as f64 / 1e6,
                );
                // A server more than a second off is worth fixing even though it decides
                // rightly: its logs and traces carry its own clock.
                if offset.unsigned_abs() > 1_000_000 {
                    tracing::warn!(offset = %seconds(offset), "{said}");
                } else {
                    tracing::info!(offset = %seconds(offset), "{said}");
                }
                state.logged_us = Some(offset);
            }
            Some(logged) if offset.saturating_sub(logged).abs() > LOG_STEP_US => {
                tracing::info!(
                    offset = %seconds(offset),
                    was = %seconds(logged),
                    "the offset of PostgreSQL's clock to this server's changed"
                );
                state.logged_us = Some(offset);
            }
            Some(_) => {}
        }
        offered
    }

    /// The database's clock minus this server's wall clock now, and the bound of the estimate
    /// now, both in microseconds; `None` before the first sample.
    pub fn offset(&self) -> Option<(i64, u64)> {
        let now = Instant::now();
        let wall = wall_us();
        let best = self.state.lock().best?;
        Some((
            self.estimate_us(now).saturating_sub(wall),
            best.error_at(now),
        ))
    }
}

fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// This server's wall clock, in microseconds since the Unix epoch.
fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Microseconds in seconds, for the log (`+120.003s`, `-0.000250s`).
fn seconds(us: i64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let seconds = us as f64 / 1e6;
    format!("{seconds:+.6}s")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A round trip of `rtt` that starts `start` after the origin, answered with the time
    /// the database had at its midpoint, `database_at_mid_us`.
    fn sample(
        time: &DatabaseTime,
        start: Duration,
        rtt: Duration,
        database_at_mid_us: i64,
    ) -> Sample {
        Sample {
            sent: time.origin + start,
            received: time.origin + start + rtt,
            database_us: database_at_mid_us,
        }
    }

    const DB: i64 = 1_800_000_000_000_000;
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn counts_on_from_the_sample_whatever_the_wall_clock() {
        let time = DatabaseTime::new();
        // This server's wall clock is two minutes ahead: it plays no part in the answer.
        let wall = DB + 120_000_000;
        let s = sample(&time, 10 * MS, 2 * MS, DB);
        assert_eq!(time.offer_at(s, wall), Offered::First);
        // 11 ms after the origin was the database's DB; 1 s later it is DB + 1 s.
        let later = time.origin + Duration::from_millis(1_011);
        assert_eq!(
            time.answer_at(later),
            u64::try_from((DB + 1_000_000) / 1_000).unwrap()
        );
        // The estimate's bound: half the round trip, then the drift.
        let best = time.state.lock().best.unwrap();
        assert_eq!(best.error_us, 1_000);
        assert_eq!(best.error_at(later), 1_000 + 1_000);
    }

    #[test]
    fn keeps_the_sample_with_the_tighter_bound_now() {
        let time = DatabaseTime::new();
        assert_eq!(
            time.offer_at(sample(&time, MS, 2 * MS, DB), 0),
            Offered::First
        );
        // 10 ms later, a round trip of 4 ms (bound 2 ms) against the first's 1 ms and 13 µs.
        let later = sample(&time, 11 * MS, 4 * MS, DB + 12_000);
        assert_eq!(time.offer_at(later, 0), Offered::Kept);
        // 10 s later, the first's bound has grown to 11 ms: a 4 ms round trip beats it.
        let much_later = sample(&time, 10_001 * MS, 4 * MS, DB + 10_002_000);
        assert_eq!(time.offer_at(much_later, 0), Offered::Better);
        assert_eq!(time.state.lock().best.unwrap().error_us, 2_000);
    }

    #[test]
    fn follows_a_step_of_the_databases_clock() {
        let time = DatabaseTime::new();
        time.offer_at(sample(&time, MS, 2 * MS, DB), 0);
        // One second on, the database says a minute more than it should.
        let stepped = sample(&time, 1_001 * MS, 2 * MS, DB + 1_000_000 + 60_000_000);
        assert_eq!(time.offer_at(stepped, 0), Offered::Stepped(60_000_000));
        let after = time.origin + 2_002 * MS;
        assert_eq!(
            time.answer_at(after),
            u64::try_from((DB + 61_000_000 + 1_000_000) / 1_000).unwrap()
        );
    }

    #[test]
    fn answers_never_go_back_by_less_than_the_hold() {
        let time = DatabaseTime::new();
        time.offer_at(sample(&time, MS, 20 * MS, DB), 0);
        let at = time.origin + 1_011 * MS;
        let before = time.answer_at(at);
        // A better sample puts the database 5 ms earlier (within both bounds): the answers
        // repeat the last one until the estimate passes it.
        let better = sample(&time, 1_010 * MS, 2 * MS, DB + 1_000_000 - 5_000);
        assert_eq!(time.offer_at(better, 0), Offered::Better);
        assert_eq!(time.answer_at(at + MS), before);
        assert_eq!(time.answer_at(at + 4 * MS), before);
        assert_eq!(time.answer_at(at + 10 * MS), before + 5);
        // A step back of a minute is followed.
        let back = sample(&time, 2_000 * MS, 2 * MS, DB - 59_000_000);
        assert!(matches!(time.offer_at(back, 0), Offered::Stepped(_)));
        let stepped_back = time.answer_at(time.origin + 2_001 * MS);
        assert!(stepped_back < before, "{stepped_back} < {before}");
    }

    #[test]
    fn before_a_sample_it_is_the_wall_clock() {
        let time = DatabaseTime::new();
        let wall = u64::try_from(wall_us() / 1_000).unwrap();
        let answer = time.now_ms();
        assert!(answer.abs_diff(wall) < 1_000, "{answer} {wall}");
        assert_eq!(time.offset(), None);
    }
}
