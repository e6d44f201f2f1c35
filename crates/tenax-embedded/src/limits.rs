//! Per-queue limits: how many of each queue's jobs a take may hand out, and the record of a
//! rate-limited queue's recent starts.
//!
//! Concurrency counts the queue's jobs in flight, which the index keeps per queue. Starts are
//! kept per queue in buckets ([`RateLimit`]), in memory (oldest first) and in the `starts`
//! table: a take writes the buckets it adds without waiting for the commit (takes write
//! nothing else, and stay free of fsyncs), so a clean stop keeps every start and a crash may
//! forget the starts of the last commit before it. Everything here runs under the index lock,
//! which serialises every take: the counts are exact.

use std::collections::VecDeque;

use tenax_core::clock::UnixMs;
use tenax_core::model::RateLimit;
use tenax_core::store::{LimitHold, StartBucket};

use super::Inner;
use super::index::QueueRef;
use super::ops::Op;

/// The queues a take looks in, and what their limits leave room for.
pub(super) struct Room {
    pub queues: Vec<QueueRef>,
    /// How many of each queue may be handed out; `None` when no queue is limited.
    pub caps: Option<Vec<usize>>,
    pub held: LimitHold,
}

/// Room in `queues` (those unpaused and with jobs) for a take of up to `max` at `now_ms`. A
/// pop (`in_flight` false) is held by rate limits only: its jobs never are in flight.
pub(super) fn room(
    inner: &Inner,
    queues: &[String],
    max: usize,
    now_ms: UnixMs,
    in_flight: bool,
) -> Room {
    let mut room = Room {
        queues: Vec::with_capacity(queues.len()),
        caps: None,
        held: LimitHold::default(),
    };
    for name in queues {
        let config = inner.queues.get(name.as_str());
        if config.is_some_and(|c| c.paused) {
            continue;
        }
        let Some(queue) = inner.index.queue_ref(name) else {
            continue;
        };
        let mut cap = max;
        if let Some(config) = config.filter(|c| c.is_limited()) {
            if let (Some(limit), true) = (config.concurrency, in_flight) {
                let free = u64::from(limit).saturating_sub(inner.index.in_flight(queue));
                if free == 0 {
                    room.held.in_flight = true;
                }
                cap = cap.min(usize::try_from(free).unwrap_or(usize::MAX));
            }
            if let Some(rate) = &config.rate {
                let window = inner.starts.get(name.as_str());
                let used = used(window, rate, now_ms);
                let free = u64::from(rate.limit).saturating_sub(used);
                if free == 0 {
                    let until = window.and_then(|w| frees_at(w, rate, now_ms));
                    room.held = room.held.and(LimitHold {
                        in_flight: false,
                        until_ms: until,
                    });
                }
                cap = cap.min(usize::try_from(free).unwrap_or(usize::MAX));
            }
            let caps = room
                .caps
                .get_or_insert_with(|| vec![max; room.queues.len()]);
            caps.push(cap);
            room.queues.push(queue);
            continue;
        }
        if let Some(caps) = &mut room.caps {
            caps.push(cap);
        }
        room.queues.push(queue);
    }
    room
}

/// Starts of `window` that count at `now_ms`.
pub(super) fn used(
    window: Option<&VecDeque<StartBucket>>,
    rate: &RateLimit,
    now_ms: UnixMs,
) -> u64 {
    window
        .into_iter()
        .flatten()
        .filter(|b| rate.counts(b.start_ms, b.width_ms, now_ms))
        .map(|b| b.count)
        .sum()
}

/// When the oldest bucket that counts at `now_ms` stops counting.
fn frees_at(window: &VecDeque<StartBucket>, rate: &RateLimit, now_ms: UnixMs) -> Option<UnixMs> {
    window
        .iter()
        .filter(|b| rate.counts(b.start_ms, b.width_ms, now_ms))
        .map(|b| rate.frees_at(b.start_ms, b.width_ms))
        .min()
}

/// Records `count` starts of `queue` at `now_ms`, if it is rate-limited: in memory, and as the
/// op that writes them.
pub(super) fn started(inner: &mut Inner, queue: &str, count: u64, now_ms: UnixMs) -> Option<Op> {
    let rate = inner.queues.get(queue)?.rate?;
    if count == 0 {
        return None;
    }
    let width_ms = rate.bucket_ms();
    let mut bucket_ms = rate.bucket_of(now_ms);
    let window = inner.starts.entry(queue.to_owned()).or_default();
    match window.back_mut() {
        // A clock that stepped back adds to the newest bucket, which counts at least as long.
        Some(last) if last.start_ms >= bucket_ms => {
            bucket_ms = last.start_ms;
            last.count = last.count.saturating_add(count);
            last.width_ms = last.width_ms.max(width_ms);
        }
        _ => window.push_back(StartBucket {
            start_ms: bucket_ms,
            width_ms,
            count,
        }),
    }
    let forget_before_ms = rate.forget_before(now_ms);
    while window
        .front()
        .is_some_and(|b| !rate.kept(b.start_ms, b.width_ms, now_ms))
    {
        window.pop_front();
    }
    Some(Op::Started {
        queue: queue.to_owned(),
        bucket_ms,
        width_ms,
        count,
        forget_before_ms,
    })
}
