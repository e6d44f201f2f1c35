//! Activity per minute: how many jobs were enqueued, completed, failed (retried or not) and
//! died, and how many webhook attempts delivered or failed, in each minute of the last day.
//!
//! The engine counts what its server did ([`crate::engine::activity`]) and adds it to the store
//! every few seconds, so that the store holds the cluster's sums ([`crate::store::ActivityStore`]).
//! [`MinuteRing`] is the bounded memory both the engine and the embedded store keep them in.

use serde::{Deserialize, Serialize};

use crate::clock::UnixMs;

/// Minutes kept: one day.
pub const MINUTES: usize = 24 * 60;
/// One minute, in ms. A minute is named by its start, a multiple of this.
pub const MINUTE_MS: u64 = 60_000;

/// The start of the minute `at_ms` is in.
pub fn minute_of(at_ms: UnixMs) -> UnixMs {
    at_ms / MINUTE_MS * MINUTE_MS
}

/// What happened in one minute (or over several: [`Counts::add`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    pub fn add(&mut self, other: &Counts) {
        self.enqueued += other.enqueued;
        self.completed += other.completed;
        self.failed += other.failed;
        self.dead += other.dead;
        self.delivered += other.delivered;
        self.delivery_failed += other.delivery_failed;
    }

    pub fn is_zero(&self) -> bool {
        *self == Counts::default()
    }

    /// The sums of `counts`.
    pub fn sum<'a>(counts: impl IntoIterator<Item = &'a Counts>) -> Counts {
        let mut total = Counts::default();
        for c in counts {
            total.add(c);
        }
        total
    }
}

/// One minute's counts: the minute's start, and what happened in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Minute {
    pub at_ms: UnixMs,
    pub counts: Counts,
}

/// One slot per minute of a day, reused as time goes on: memory is bounded whatever happens.
/// A slot remembers which minute it holds, so a slot left from an earlier day reads as empty,
/// and counts for a minute more than a day older than the slot's are dropped.
#[derive(Debug, Clone)]
pub struct MinuteRing {
    slots: Vec<Minute>,
}

impl Default for MinuteRing {
    fn default() -> Self {
        Self {
            // `u64::MAX` names no minute: an empty slot never matches one.
            slots: vec![
                Minute {
                    at_ms: u64::MAX,
                    counts: Counts::default(),
                };
                MINUTES
            ],
        }
    }
}

/// The ring's slot of the minute starting at `at_ms`.
fn slot_of(at_ms: UnixMs) -> usize {
    usize::try_from(at_ms / MINUTE_MS % MINUTES as u64).unwrap_or(0)
}

impl MinuteRing {
    /// The counts of the minute `at_ms` is in, to change: made empty when its slot held an
    /// older minute; `None` when the slot holds a newer one (the minute is over a day old).
    pub fn minute_mut(&mut self, at_ms: UnixMs) -> Option<&mut Counts> {
        let at_ms = minute_of(at_ms);
        let slot = self.slots.get_mut(slot_of(at_ms))?;
        if slot.at_ms != at_ms {
            if slot.at_ms != u64::MAX && slot.at_ms > at_ms {
                return None;
            }
            *slot = Minute {
                at_ms,
                counts: Counts::default(),
            };
        }
        Some(&mut slot.counts)
    }

    /// Adds `counts` to the minute `at_ms` is in.
    pub fn add(&mut self, at_ms: UnixMs, counts: &Counts) {
        if let Some(held) = self.minute_mut(at_ms) {
            held.add(counts);
        }
    }

    /// The counts of the minute starting at `at_ms` (zeros when none are held).
    pub fn get(&self, at_ms: UnixMs) -> Counts {
        match self.slots.get(slot_of(at_ms)) {
            Some(slot) if slot.at_ms == at_ms => slot.counts,
            _ => Counts::default(),
        }
    }

    /// The minutes from the one starting at `from_ms` to the one starting at `to_ms` that hold
    /// counts, oldest first.
    pub fn held(&self, from_ms: UnixMs, to_ms: UnixMs) -> Vec<Minute> {
        let mut held: Vec<Minute> = self
            .slots
            .iter()
            .filter(|m| m.at_ms != u64::MAX && (from_ms..=to_ms).contains(&m.at_ms))
            .filter(|m| !m.counts.is_zero())
            .copied()
            .collect();
        held.sort_by_key(|m| m.at_ms);
        held
    }

    /// Forgets the minutes that started before `before_ms`; returns how many held counts.
    pub fn purge(&mut self, before_ms: UnixMs) -> usize {
        let mut purged = 0;
        for slot in &mut self.slots {
            if slot.at_ms != u64::MAX && slot.at_ms < before_ms {
                purged += usize::from(!slot.counts.is_zero());
                slot.at_ms = u64::MAX;
                slot.counts = Counts::default();
            }
        }
        purged
    }
}

/// `minutes` minutes up to the one `now_ms` is in (at least one, at most [`MINUTES`]): the
/// first and the last minute's starts.
pub fn window(minutes: usize, now_ms: UnixMs) -> (UnixMs, UnixMs) {
    let minutes = minutes.clamp(1, MINUTES) as u64;
    let last = minute_of(now_ms);
    (last.saturating_sub((minutes - 1) * MINUTE_MS), last)
}

/// Every minute from `from_ms` to `to_ms`, oldest first, with the counts `held` gives it
/// (zeros for those it leaves out): a series without gaps, for charts.
pub fn series(from_ms: UnixMs, to_ms: UnixMs, held: &[Minute]) -> Vec<Minute> {
    let mut held = held.iter().peekable();
    (from_ms / MINUTE_MS..=to_ms / MINUTE_MS)
        .map(|m| {
            let at_ms = m * MINUTE_MS;
            let mut counts = Counts::default();
            while let Some(minute) = held.next_if(|h| h.at_ms <= at_ms) {
                if minute.at_ms == at_ms {
                    counts.add(&minute.counts);
                }
            }
            Minute { at_ms, counts }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000 / MINUTE_MS * MINUTE_MS;

    fn enqueued(n: u64) -> Counts {
        Counts {
            enqueued: n,
            ..Counts::default()
        }
    }

    #[test]
    fn a_ring_keeps_a_day_and_forgets_older_minutes() {
        let mut ring = MinuteRing::default();
        ring.add(T0 + 5, &enqueued(2));
        ring.add(T0 + 59_999, &enqueued(1));
        ring.add(T0 + MINUTE_MS, &enqueued(4));
        assert_eq!(ring.get(T0), enqueued(3));
        assert_eq!(
            ring.held(T0, T0 + MINUTE_MS),
            [
                Minute {
                    at_ms: T0,
                    counts: enqueued(3)
                },
                Minute {
                    at_ms: T0 + MINUTE_MS,
                    counts: enqueued(4)
                }
            ]
        );
        // A day later the slot holds another minute; counts for the old one are dropped.
        let day = MINUTES as u64 * MINUTE_MS;
        ring.add(T0 + day, &enqueued(7));
        assert_eq!(ring.get(T0), Counts::default());
        ring.add(T0, &enqueued(1));
        assert_eq!(ring.get(T0 + day), enqueued(7));
        assert_eq!(ring.purge(T0 + day), 1, "the minute after T0");
        assert_eq!(ring.held(0, u64::MAX).len(), 1);
    }

    #[test]
    fn a_series_has_every_minute_of_its_window() {
        let (from, to) = window(3, T0 + 2 * MINUTE_MS + 1);
        assert_eq!((from, to), (T0, T0 + 2 * MINUTE_MS));
        let held = [Minute {
            at_ms: T0 + MINUTE_MS,
            counts: enqueued(5),
        }];
        let series = series(from, to, &held);
        assert_eq!(
            series
                .iter()
                .map(|m| (m.at_ms, m.counts.enqueued))
                .collect::<Vec<_>>(),
            [(T0, 0), (T0 + MINUTE_MS, 5), (T0 + 2 * MINUTE_MS, 0)]
        );
        assert_eq!(window(0, T0).0, T0, "at least one minute");
        assert_eq!(
            window(usize::MAX, T0).0,
            T0 - (MINUTES as u64 - 1) * MINUTE_MS
        );
    }
}
