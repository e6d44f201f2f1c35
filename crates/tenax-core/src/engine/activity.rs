//! What this server did lately: jobs enqueued, completed, failed (retried or not) and dead, and
//! webhook attempts delivered and failed, per minute over the last day. The engine's
//! observation point feeds it (`super::observe`), from the same transitions as the metrics: a
//! failed run is what `tenax_jobs_failed_total` counts (a worker's failure or a lease that
//! expired; a snooze is not one).
//!
//! Each count goes two ways: into this server's own ring of the last day (what this server did,
//! from its start), and into the unflushed counts, which the engine adds to the store every few
//! seconds and at shutdown ([`super::Engine::flush_activity`]), so that the store holds the
//! cluster's sums ([`super::Engine::cluster_activity`] reads them, with what is not flushed yet).
//!
//! Memory is bounded: one slot per minute of a day in the ring
//! ([`crate::model::activity::MinuteRing`]), and at most a day of minutes unflushed.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use super::{Engine, EngineError};
use crate::clock::UnixMs;
pub use crate::model::activity::{Counts, MINUTES};
use crate::model::activity::{MINUTE_MS, Minute, MinuteRing, minute_of, series, window};

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

#[derive(Debug, Default)]
pub struct Activity {
    /// Everything this server counted in the last day.
    own: Mutex<MinuteRing>,
    /// What it counted and has not yet added to the store, by minute: taken by each flush
    /// ([`Activity::take_unflushed`]), and given back when the store refused it. Never holds a
    /// minute more than a day old, so it stays bounded while the store cannot be reached.
    unflushed: Mutex<BTreeMap<UnixMs, Counts>>,
    /// Held for writing by a flush, from taking the unflushed counts until the store has them
    /// (or they are given back), and for reading by a read of the cluster's counts: so a read
    /// sees each count once, in the store or unflushed, never both or neither.
    flushing: tokio::sync::RwLock<()>,
}

impl Event {
    fn counts(self) -> Counts {
        let mut c = Counts::default();
        match self {
            Event::Enqueued(n) => c.enqueued = n,
            Event::Completed(n) => c.completed = n,
            Event::Failed { dead } => {
                c.failed = 1;
                c.dead = u64::from(dead);
            }
            Event::Delivered => c.delivered = 1,
            Event::DeliveryFailed { dead } => {
                c.delivery_failed = 1;
                c.dead = u64::from(dead);
            }
            Event::Died => c.dead = 1,
        }
        c
    }
}

impl Activity {
    pub fn record(&self, event: Event, now_ms: UnixMs) {
        let counts = event.counts();
        if counts.is_zero() {
            return;
        }
        self.own.lock().add(now_ms, &counts);
        let mut unflushed = self.unflushed.lock();
        unflushed.entry(minute_of(now_ms)).or_default().add(&counts);
        forget_older_than_a_day(&mut unflushed, now_ms);
    }

    /// The last `minutes` minutes up to `now_ms` (at most a day) of what this server did,
    /// oldest first, each as the start of the minute and its counts.
    pub fn minutes(&self, minutes: usize, now_ms: UnixMs) -> Vec<(UnixMs, Counts)> {
        let (from, to) = window(minutes, now_ms);
        let own = self.own.lock();
        (from / MINUTE_MS..=to / MINUTE_MS)
            .map(|m| (m * MINUTE_MS, own.get(m * MINUTE_MS)))
            .collect()
    }

    /// The sums over the last `minutes` minutes of what this server did.
    pub fn total(&self, minutes: usize, now_ms: UnixMs) -> Counts {
        let minutes = self.minutes(minutes, now_ms);
        Counts::sum(minutes.iter().map(|(_, c)| c))
    }

    /// What was counted since the last flush, oldest minute first, to add to the store; the
    /// counts are no longer unflushed (give them back with [`Activity::give_back`] if the
    /// store refuses them).
    pub fn take_unflushed(&self) -> Vec<Minute> {
        std::mem::take(&mut *self.unflushed.lock())
            .into_iter()
            .map(|(at_ms, counts)| Minute { at_ms, counts })
            .collect()
    }

    /// Counts a flush could not add to the store, to add with the next one.
    pub fn give_back(&self, minutes: &[Minute], now_ms: UnixMs) {
        let mut unflushed = self.unflushed.lock();
        for minute in minutes {
            unflushed
                .entry(minute.at_ms)
                .or_default()
                .add(&minute.counts);
        }
        forget_older_than_a_day(&mut unflushed, now_ms);
    }

    /// The unflushed counts of the minutes from `from_ms` to `to_ms`, oldest first.
    pub fn unflushed(&self, from_ms: UnixMs, to_ms: UnixMs) -> Vec<Minute> {
        self.unflushed
            .lock()
            .range(from_ms..=to_ms)
            .map(|(at_ms, counts)| Minute {
                at_ms: *at_ms,
                counts: *counts,
            })
            .collect()
    }
}

impl Engine {
    /// Adds what this server counted since the last flush to the store's activity, where every
    /// server's counts add up. Counts the store refused are kept for the next flush (a failed
    /// commit that did land would count them twice: a dashboard's figure, not a ledger).
    pub async fn flush_activity(&self) -> Result<(), EngineError> {
        let _flushing = self.activity.flushing.write().await;
        let minutes = self.activity.take_unflushed();
        if minutes.is_empty() {
            return Ok(());
        }
        match self.store.add_activity(&minutes).await {
            Ok(()) => Ok(()),
            Err(error) => {
                self.activity.give_back(&minutes, self.now_ms());
                Err(error.into())
            }
        }
    }

    /// The cluster's activity over the last `minutes` minutes (1 to a day) up to now, oldest
    /// first, every minute with its counts (zeros where nothing happened): what the store holds,
    /// which on PostgreSQL is every server's, and what this server has not flushed yet. Another
    /// server's counts appear once it flushes them, within a few seconds.
    pub async fn cluster_activity(&self, minutes: usize) -> Result<Vec<Minute>, EngineError> {
        let (from, to) = window(minutes, self.now_ms());
        let _reading = self.activity.flushing.read().await;
        let mut held = self.store.activity(from, to).await?;
        held.extend(self.activity.unflushed(from, to));
        held.sort_by_key(|m| m.at_ms);
        Ok(series(from, to, &held))
    }
}

/// Drops the minutes of `unflushed` that are out of the day before `now_ms`.
fn forget_older_than_a_day(unflushed: &mut BTreeMap<UnixMs, Counts>, now_ms: UnixMs) {
    let (first, _) = window(MINUTES, now_ms);
    while unflushed
        .first_key_value()
        .is_some_and(|(at, _)| *at < first)
    {
        unflushed.pop_first();
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

    #[test]
    fn unflushed_counts_are_taken_once_and_given_back_within_a_day() {
        let activity = Activity::default();
        let t0 = 1_800_000_000_000 / MINUTE_MS * MINUTE_MS;
        activity.record(Event::Enqueued(3), t0);
        activity.record(Event::Completed(1), t0 + MINUTE_MS);
        activity.record(Event::Completed(0), t0 + 2 * MINUTE_MS);
        assert_eq!(activity.unflushed(t0, t0).len(), 1);
        let taken = activity.take_unflushed();
        assert_eq!(
            taken.iter().map(|m| m.at_ms).collect::<Vec<_>>(),
            [t0, t0 + MINUTE_MS],
            "oldest first; a minute with nothing counted is not there"
        );
        assert!(activity.take_unflushed().is_empty(), "taken once");
        activity.record(Event::Enqueued(1), t0);
        activity.give_back(&taken, t0 + MINUTE_MS);
        assert_eq!(activity.unflushed(t0, t0)[0].counts.enqueued, 4);
        // Given back a day later, the first minute is too old to keep.
        let day = MINUTES as u64 * MINUTE_MS;
        let taken = activity.take_unflushed();
        activity.give_back(&taken, t0 + day);
        assert_eq!(activity.unflushed(0, u64::MAX).len(), 1);
        // This server's own counts are not changed by flushing.
        assert_eq!(activity.total(2, t0 + MINUTE_MS).enqueued, 4);
    }
}
