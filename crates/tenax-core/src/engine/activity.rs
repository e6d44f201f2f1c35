//! What this server did lately: jobs enqueued, completed, failed (retried or not) and dead, and
//! webhook attempts delivered and failed, per minute over the last day, for the dashboard. The
//! engine's observation point feeds it (`super::observe`), from the same transitions as the
//! metrics: a failed run is what `tenax_jobs_failed_total` counts (a worker's failure or a lease
//! that expired; a snooze is not one).
//!
//! Memory is bounded: one slot per minute of a day in a ring, reused as time goes on; a slot
//! remembers which minute it holds, so a slot left over from an earlier day reads as empty.
//! Counts are this server's own (on a shared store, each server counts what it did) and start
//! again at a restart.

use parking_lot::Mutex;
use serde::Serialize;

use crate::clock::UnixMs;

/// Minutes kept: one day.
pub const MINUTES: usize = 24 * 60;
const MINUTE_MS: u64 = 60_000;

/// What happened in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub enqueued: u64,
    pub completed: u64,
    /// Failed runs, whether retried or dead.
    pub failed: u64,
    pub dead: u64,
    pub delivered: u64,
    pub delivery_failed: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.enqueued += other.enqueued;
        self.completed += other.completed;
        self.failed += other.failed;
        self.dead += other.dead;
        self.delivered += other.delivered;
        self.delivery_failed += other.delivery_failed;
    }
}

/// One event to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Enqueued(u64),
    Completed(u64),
    /// A failed run; `dead` when it left the job dead.
    Failed {
        dead: bool,
    },
    Delivered,
    DeliveryFailed {
        dead: bool,
    },
    /// A delivery died without an attempt of its own (its lease ran out past its limit).
    Died,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The minute (since the epoch) the counts are of.
    minute: u64,
    counts: Counts,
}

#[derive(Debug)]
pub struct Activity {
    slots: Mutex<Vec<Slot>>,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            slots: Mutex::new(vec![Slot::default(); MINUTES]),
        }
    }
}

/// The ring's slot of `minute`.
fn slot_of(minute: u64) -> usize {
    usize::try_from(minute % MINUTES as u64).unwrap_or(0)
}

impl Activity {
    pub fn record(&self, event: Event, now_ms: UnixMs) {
        let minute = now_ms / MINUTE_MS;
        let mut slots = self.slots.lock();
        let Some(slot) = slots.get_mut(slot_of(minute)) else {
            return;
        };
        if slot.minute != minute {
            *slot = Slot {
                minute,
                counts: Counts::default(),
            };
        }
        let c = &mut slot.counts;
        match event {
            Event::Enqueued(n) => c.enqueued += n,
            Event::Completed(n) => c.completed += n,
            Event::Failed { dead } => {
                c.failed += 1;
                c.dead += u64::from(dead);
            }
            Event::Delivered => c.delivered += 1,
            Event::DeliveryFailed { dead } => {
                c.delivery_failed += 1;
                c.dead += u64::from(dead);
            }
            Event::Died => c.dead += 1,
        }
    }

    /// The last `minutes` minutes up to `now_ms` (at most a day), oldest first, each as the
    /// start of the minute and its counts.
    pub fn minutes(&self, minutes: usize, now_ms: UnixMs) -> Vec<(UnixMs, Counts)> {
        let minutes = minutes.clamp(1, MINUTES) as u64;
        let now = now_ms / MINUTE_MS;
        let slots = self.slots.lock();
        (now.saturating_sub(minutes - 1)..=now)
            .map(|minute| {
                let slot = slots.get(slot_of(minute)).copied().unwrap_or_default();
                let counts = if slot.minute == minute {
                    slot.counts
                } else {
                    Counts::default()
                };
                (minute * MINUTE_MS, counts)
            })
            .collect()
    }

    /// The sums over the last `minutes` minutes.
    pub fn total(&self, minutes: usize, now_ms: UnixMs) -> Counts {
        let mut total = Counts::default();
        for (_, counts) in self.minutes(minutes, now_ms) {
            total.add(&counts);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_are_counted_and_forgotten_after_a_day() {
        let activity = Activity::default();
        let t0 = 1_800_000_000_000 / MINUTE_MS * MINUTE_MS;
        activity.record(Event::Enqueued(3), t0);
        activity.record(Event::Failed { dead: true }, t0 + 59_999);
        activity.record(Event::Completed(2), t0 + MINUTE_MS);
        let last = activity.minutes(2, t0 + MINUTE_MS);
        assert_eq!(last[0].0, t0);
        assert_eq!(
            (last[0].1.enqueued, last[0].1.failed, last[0].1.dead),
            (3, 1, 1)
        );
        assert_eq!(last[1].1.completed, 2);
        assert_eq!(activity.total(60, t0 + MINUTE_MS).enqueued, 3);
        // A day later the same slot holds another minute: the old counts are gone.
        let day = MINUTES as u64 * MINUTE_MS;
        assert_eq!(activity.total(MINUTES, t0 + day).enqueued, 0);
        activity.record(Event::Delivered, t0 + day);
        assert_eq!(activity.total(1, t0 + day).delivered, 1);
        assert_eq!(activity.total(1, t0 + day).enqueued, 0);
        assert_eq!(activity.minutes(10_000, t0).len(), MINUTES);
    }
}
