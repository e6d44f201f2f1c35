//! The workers this server has seen: each take, stream and heartbeat of the native API says
//! which worker sent it (by the name it gives, or its address and User-Agent), and the book
//! keeps, per worker, the queues it took from, the leases this server handed it that are still
//! running, its open streams, and when it was last seen. The server publishes the book with its
//! row ([`super::Engine::live_servers`]), so every server of a cluster lists every worker.
//!
//! Invariants:
//! - Memory is bounded: at most [`MAX_WORKERS`] workers, [`MAX_QUEUES`] queues per worker and
//!   [`MAX_HELD`] leases in all. A new worker past the bound takes the place of the one seen
//!   longest ago that has no stream open; a lease past its bound is not counted.
//! - A worker silent for [`FORGET_AFTER_MS`] is forgotten, with its leases, unless a stream of
//!   its is open (an open stream is a worker seen now).
//! - A lease stops counting when the worker completes or fails it through this server, when its
//!   stream closes, or when it ends by its time (a worker that acknowledges it through another
//!   server, or never, holds it here until then).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::clock::UnixMs;
use crate::model::{ClaimId, JobId, JobIdMap, TakenJob, WorkerInfo, WorkerQueue};

/// The most workers a server keeps. Each is written with the server's row every second on a
/// shared store, a few hundred bytes each.
pub const MAX_WORKERS: usize = 1_000;
/// The most queues kept per worker: those it named last.
pub const MAX_QUEUES: usize = 64;
/// The most leases counted, of all workers together.
pub const MAX_HELD: usize = 100_000;
/// A worker silent this long (no take, stream or heartbeat) is forgotten.
pub const FORGET_AFTER_MS: u64 = 5 * 60_000;

/// Which worker sent a request, and the queues it named.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub name: &'a str,
    pub queues: &'a [String],
}

#[derive(Debug, Default)]
pub struct WorkerBook {
    inner: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    workers: HashMap<Arc<str>, Worker>,
    /// The leases handed out by takes and streams, by job.
    held: JobIdMap<Hold>,
}

#[derive(Debug)]
struct Worker {
    /// The queues it named, with when it last named each.
    queues: HashMap<Arc<str>, UnixMs>,
    streams: u32,
    seen_at_ms: UnixMs,
}

#[derive(Debug)]
struct Hold {
    worker: Arc<str>,
    queue: Arc<str>,
    lease_until_ms: UnixMs,
    /// The stream that took it, whose close gives it back.
    stream: Option<ClaimId>,
}

impl Book {
    /// The worker named `name`, seen at `now_ms`, made if it is new (in the place of another
    /// when the book is full).
    fn touch(&mut self, name: &str, now_ms: UnixMs) -> (Arc<str>, &mut Worker) {
        if !self.workers.contains_key(name) && self.workers.len() >= MAX_WORKERS {
            self.forget_silent(now_ms);
            if self.workers.len() >= MAX_WORKERS {
                let oldest = self
                    .workers
                    .iter()
                    .min_by_key(|(_, w)| (w.streams > 0, w.seen_at_ms))
                    .map(|(name, _)| name.clone());
                if let Some(oldest) = oldest {
                    self.forget(&oldest);
                }
            }
        }
        let key = match self.workers.get_key_value(name) {
            Some((key, _)) => key.clone(),
            None => {
                let key: Arc<str> = Arc::from(name);
                self.workers.insert(
                    key.clone(),
                    Worker {
                        queues: HashMap::new(),
                        streams: 0,
                        seen_at_ms: now_ms,
                    },
                );
                key
            }
        };
        let worker = self
            .workers
            .get_mut(&key)
            .expect("the worker was just found or made");
        worker.seen_at_ms = worker.seen_at_ms.max(now_ms);
        (key, worker)
    }

    fn forget(&mut self, name: &Arc<str>) {
        self.workers.remove(name);
        self.held.retain(|_, hold| hold.worker != *name);
    }

    /// Forgets the workers silent for [`FORGET_AFTER_MS`] without a stream open, and the
    /// leases that ended.
    fn forget_silent(&mut self, now_ms: UnixMs) {
        let since = now_ms.saturating_sub(FORGET_AFTER_MS);
        self.workers
            .retain(|_, w| w.streams > 0 || w.seen_at_ms >= since);
        let workers = &self.workers;
        self.held
            .retain(|_, hold| hold.lease_until_ms > now_ms && workers.contains_key(&hold.worker));
    }
}

impl Worker {
    /// Notes that it named `queues` at `now_ms`; the queue objects of the book are reused.
    fn named(&mut self, queues: &[String], now_ms: UnixMs) -> Vec<Arc<str>> {
        let mut named = Vec::with_capacity(queues.len());
        for queue in queues {
            let key = match self.queues.get_key_value(queue.as_str()) {
                Some((key, _)) => key.clone(),
                None => Arc::from(queue.as_str()),
            };
            self.queues.insert(key.clone(), now_ms);
            named.push(key);
        }
        while self.queues.len() > MAX_QUEUES {
            let oldest = self
                .queues
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(queue, _)| queue.clone());
            match oldest {
                Some(oldest) => self.queues.remove(&oldest),
                None => break,
            };
        }
        named
    }
}

impl WorkerBook {
    /// A worker took `jobs` (in `stream`, when a stream did) from the queues it named.
    pub fn took(&self, seen: Seen<'_>, jobs: &[TakenJob], stream: Option<ClaimId>, now_ms: UnixMs) {
        let mut book = self.inner.lock();
        let (name, worker) = book.touch(seen.name, now_ms);
        let queues = worker.named(seen.queues, now_ms);
        for job in jobs {
            if book.held.len() >= MAX_HELD && !book.held.contains_key(&job.id) {
                break;
            }
            let queue = queues
                .iter()
                .find(|q| ***q == *job.queue)
                .cloned()
                .unwrap_or_else(|| Arc::from(job.queue.as_str()));
            book.held.insert(
                job.id,
                Hold {
                    worker: name.clone(),
                    queue,
                    lease_until_ms: job.lease_expires_at_ms,
                    stream,
                },
            );
        }
    }

    /// A worker opened `stream` on the queues it named.
    pub fn stream_opened(&self, seen: Seen<'_>, now_ms: UnixMs) {
        let mut book = self.inner.lock();
        let (_, worker) = book.touch(seen.name, now_ms);
        worker.named(seen.queues, now_ms);
        worker.streams += 1;
    }

    /// `name`'s `stream` closed: the leases it held went back to ready.
    pub fn stream_closed(&self, name: &str, stream: ClaimId, now_ms: UnixMs) {
        let mut book = self.inner.lock();
        book.held.retain(|_, hold| hold.stream != Some(stream));
        if let Some(worker) = book.workers.get_mut(name) {
            worker.streams = worker.streams.saturating_sub(1);
            worker.seen_at_ms = worker.seen_at_ms.max(now_ms);
        }
    }

    /// A worker extended the lease of `job` to `lease_until_ms`.
    pub fn heartbeat(&self, name: &str, job: JobId, lease_until_ms: UnixMs, now_ms: UnixMs) {
        let mut book = self.inner.lock();
        book.touch(name, now_ms);
        if let Some(hold) = book.held.get_mut(&job) {
            hold.lease_until_ms = lease_until_ms;
        }
    }

    /// `jobs` were completed or failed under their current leases: those are over, whoever
    /// held them.
    pub fn released(&self, jobs: &[JobId]) {
        let mut book = self.inner.lock();
        for job in jobs {
            book.held.remove(job);
        }
    }

    /// The workers seen within [`FORGET_AFTER_MS`] of `now_ms`, most recently seen first (a
    /// worker with a stream open is seen now), by name among equals.
    pub fn workers(&self, now_ms: UnixMs) -> Vec<WorkerInfo> {
        let mut book = self.inner.lock();
        book.forget_silent(now_ms);
        let mut in_flight: HashMap<(&Arc<str>, &Arc<str>), u64> = HashMap::new();
        for hold in book.held.values() {
            *in_flight.entry((&hold.worker, &hold.queue)).or_default() += 1;
        }
        let since = now_ms.saturating_sub(FORGET_AFTER_MS);
        let mut workers: Vec<WorkerInfo> = book
            .workers
            .iter()
            .map(|(name, worker)| {
                let mut queues: Vec<WorkerQueue> = worker
                    .queues
                    .iter()
                    .filter(|(_, at)| **at >= since || worker.streams > 0)
                    .map(|(queue, _)| queue)
                    .chain(
                        in_flight
                            .keys()
                            .filter(|(w, q)| *w == name && !worker.queues.contains_key(*q))
                            .map(|(_, q)| *q),
                    )
                    .map(|queue| WorkerQueue {
                        queue: queue.to_string(),
                        in_flight: in_flight.get(&(name, queue)).copied().unwrap_or(0),
                    })
                    .collect();
                queues.sort_by(|a, b| a.queue.cmp(&b.queue));
                WorkerInfo {
                    name: name.to_string(),
                    queues,
                    streams: worker.streams,
                    seen_at_ms: if worker.streams > 0 {
                        now_ms.max(worker.seen_at_ms)
                    } else {
                        worker.seen_at_ms
                    },
                }
            })
            .collect();
        workers.sort_by(|a, b| {
            b.seen_at_ms
                .cmp(&a.seen_at_ms)
                .then_with(|| a.name.cmp(&b.name))
        });
        workers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LeaseToken, Trigger};

    const T0: u64 = 1_800_000_000_000;

    fn taken(id: u64, queue: &str, until: UnixMs) -> TakenJob {
        TakenJob {
            id: JobId(id),
            queue: queue.into(),
            lease_token: LeaseToken(id),
            lease_expires_at_ms: until,
            kind: "k".into(),
            payload: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
            payload_sealed: false,
            priority: 0,
            attempt: 1,
            created_at_ms: T0,
            expires_at_ms: None,
            parent: None,
            traceparent: None,
            trigger: Trigger::default(),
            after: Vec::new(),
            parents: Vec::new(),
            ready_at_ms: T0,
        }
    }

    fn seen<'a>(name: &'a str, queues: &'a [String]) -> Seen<'a> {
        Seen { name, queues }
    }

    #[test]
    fn leases_count_until_acknowledged_closed_or_ended() {
        let book = WorkerBook::default();
        let queues = vec!["a".to_owned(), "b".to_owned()];
        let jobs = [
            taken(1, "a", T0 + 30_000),
            taken(2, "a", T0 + 30_000),
            taken(3, "b", T0 + 5_000),
        ];
        book.took(seen("w1", &queues), &jobs, None, T0);
        let workers = book.workers(T0);
        assert_eq!(workers.len(), 1);
        assert_eq!(
            workers[0].queues,
            [
                WorkerQueue {
                    queue: "a".into(),
                    in_flight: 2
                },
                WorkerQueue {
                    queue: "b".into(),
                    in_flight: 1
                }
            ]
        );
        book.released(&[JobId(1)]);
        book.heartbeat("w1", JobId(3), T0 + 60_000, T0 + 2);
        let workers = book.workers(T0 + 10_000);
        assert_eq!(workers[0].in_flight(), 2, "job 3's lease was extended");
        assert_eq!(workers[0].seen_at_ms, T0 + 2);
        // Job 2's lease ends by its time.
        assert_eq!(book.workers(T0 + 30_000)[0].in_flight(), 1);

        // A stream's leases go when it closes.
        let one = vec!["c".to_owned()];
        book.stream_opened(seen("w2", &one), T0);
        book.took(
            seen("w2", &one),
            &[taken(4, "c", T0 + 30_000)],
            Some(ClaimId(9)),
            T0,
        );
        let later = T0 + FORGET_AFTER_MS + 1;
        let w2 = book
            .workers(T0 + 1)
            .into_iter()
            .find(|w| w.name == "w2")
            .unwrap();
        assert_eq!(
            (w2.streams, w2.in_flight(), w2.seen_at_ms),
            (1, 1, T0 + 1),
            "streaming: seen now"
        );
        book.stream_closed("w2", ClaimId(9), T0 + 2);
        let w2 = book
            .workers(T0 + 3)
            .into_iter()
            .find(|w| w.name == "w2")
            .unwrap();
        assert_eq!((w2.streams, w2.in_flight()), (0, 0));
        // Silent for long enough, both are forgotten.
        assert!(book.workers(later + 60_000).is_empty());
    }

    #[test]
    fn the_book_is_bounded() {
        let book = WorkerBook::default();
        let queues = vec!["q".to_owned()];
        book.stream_opened(seen("streaming", &queues), T0);
        for n in 0..MAX_WORKERS + 10 {
            book.took(seen(&format!("w{n}"), &queues), &[], None, T0 + n as u64);
        }
        let workers = book.workers(T0 + MAX_WORKERS as u64 + 10);
        assert_eq!(workers.len(), MAX_WORKERS);
        assert!(
            workers.iter().any(|w| w.name == "streaming"),
            "a streaming worker stays"
        );
        assert!(
            workers
                .iter()
                .any(|w| w.name == format!("w{}", MAX_WORKERS + 9))
        );
        assert!(
            !workers.iter().any(|w| w.name == "w0"),
            "the one seen longest ago went"
        );

        let many: Vec<String> = (0..MAX_QUEUES + 5).map(|n| format!("q{n}")).collect();
        book.took(seen("wide", &many), &[], None, T0 + 5_000);
        let wide = book
            .workers(T0 + 5_000)
            .into_iter()
            .find(|w| w.name == "wide")
            .unwrap();
        assert_eq!(wide.queues.len(), MAX_QUEUES);
    }
}
