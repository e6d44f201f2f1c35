//! Group commit for enqueues of plain jobs (no unique key, parent, subscription or job they
//! wait for: nothing
//! that can refuse one request and not another, but an old facts version, which the statement
//! checks row by row). Such enqueues that arrive while one is being committed wait for it, and
//! then share the next commit: one statement and one WAL flush for many requests, where each
//! would otherwise wait for its own flush. A commit about to leave with fewer requests than
//! the last round had in play waits a bounded moment for the rest ([`super::linger`]). With
//! one request at a time nothing waits, so this adds no latency; under load it is what lets
//! single-job enqueues keep up with the disk.
//!
//! Invariants: a request's jobs get increasing ids in its order; a request is answered only
//! after the commit that stored its jobs (or with that commit's error, which stored none).

use std::sync::Arc;
use std::time::Instant;

use tenax_core::clock::UnixMs;
use tenax_core::model::{Enqueued, JobId, JobState, Status};
use tenax_core::store::{CommitObserver, FactsSeen, Insert, StoreError};
use tokio::sync::{Notify, oneshot};

use super::inserts::{Columns, INSERT_SHARED};
use super::linger::Linger;
use super::rows::{id, unid};
use super::transitions::query;
use super::wakeups::{Wakeup, Wakeups};
use super::{Pool, fault};

/// The most jobs one shared commit takes; more wait for the next.
const MOST_JOBS: usize = 20_000;

type Reply = oneshot::Sender<Result<Vec<Option<Enqueued>>, StoreError>>;

#[derive(Debug)]
struct Pending {
    jobs: Vec<Insert>,
    /// The facts version the jobs were made from: they are stored only if it is current.
    seen: FactsSeen,
    now_ms: UnixMs,
    reply: Reply,
}

#[derive(Debug, Default)]
struct Queue {
    /// A task is committing (and will take what is queued next).
    running: bool,
    queued: Vec<Pending>,
    /// The committing task waits for more requests: tell it of each.
    lingering: bool,
    /// What the last commit saw.
    linger: Linger,
}

#[derive(Debug)]
pub struct Combiner {
    queue: parking_lot::Mutex<Queue>,
    /// Fired for each request queued while the committing task lingers.
    arrived: Notify,
    pool: Pool,
    wakeups: Arc<Wakeups>,
    commits: Option<Arc<dyn CommitObserver>>,
}

/// The most jobs of a request that shares a commit: larger batches commit on their own, so
/// that several can be written at once by several connections.
const MOST_PER_REQUEST: usize = 16;

/// Whether an enqueue shares a commit with others: it is small, and none of its jobs can be
/// refused alone.
pub fn is_shared(jobs: &[Insert]) -> bool {
    jobs.len() <= MOST_PER_REQUEST
        && jobs.iter().all(|j| {
            j.job.unique_key.is_none()
                && j.parent.is_none()
                && j.owner.is_none()
                && j.after.is_empty()
        })
}

impl Combiner {
    pub fn new(
        pool: Pool,
        wakeups: Arc<Wakeups>,
        commits: Option<Arc<dyn CommitObserver>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            queue: parking_lot::Mutex::new(Queue::default()),
            arrived: Notify::new(),
            pool,
            wakeups,
            commits,
        })
    }

    /// Stores `jobs` in the next shared commit.
    pub async fn insert(
        self: &Arc<Self>,
        jobs: Vec<Insert>,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Vec<Option<Enqueued>>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let (start, lingering) = {
            let mut queue = self.queue.lock();
            queue.queued.push(Pending {
                jobs,
                seen,
                now_ms,
                reply,
            });
            (
                !std::mem::replace(&mut queue.running, true),
                queue.lingering,
            )
        };
        if lingering {
            self.arrived.notify_waiters();
        }
        if start {
            // A task of its own: a request that goes away must not stop the others' commit.
            tokio::spawn(self.clone().drain());
        }
        answer.await.unwrap_or_else(|_| Err(ended()))
    }

    /// Commits what is queued, batch after batch, until nothing is.
    async fn drain(self: Arc<Self>) {
        let guard = Running(&self);
        loop {
            self.linger().await;
            let batch = {
                let mut queue = self.queue.lock();
                if queue.queued.is_empty() {
                    queue.running = false;
                    drop(queue);
                    // Done: the next enqueue starts a new task, which the guard must not undo.
                    std::mem::forget(guard);
                    return;
                }
                let mut jobs = 0;
                let take = queue
                    .queued
                    .iter()
                    .take_while(|p| {
                        jobs += p.jobs.len();
                        jobs <= MOST_JOBS
                    })
                    .count()
                    .max(1);
                queue.queued.drain(..take).collect::<Vec<_>>()
            };
            self.commit(batch).await;
        }
    }

    /// Waits, if the last round says more requests are on their way, until they are queued
    /// or the wait is over.
    async fn linger(&self) {
        let plan = {
            let queue = self.queue.lock();
            if queue.queued.is_empty() {
                // Nothing to wait with: the task ends, and the next request starts another.
                return;
            }
            let jobs: usize = queue.queued.iter().map(|p| p.jobs.len()).sum();
            queue
                .linger
                .plan(queue.queued.len(), jobs >= MOST_JOBS, Instant::now())
        };
        let Some(wait) = plan else { return };
        let deadline = tokio::time::Instant::now() + wait.at_most;
        loop {
            // Registered before looking, so a request queued in between is heard.
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let mut queue = self.queue.lock();
                let enough = queue.queued.len() >= wait.requests;
                queue.lingering = !enough;
                if enough {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                self.queue.lock().lingering = false;
                return;
            }
        }
    }

    async fn commit(&self, batch: Vec<Pending>) {
        let started = Instant::now();
        let stored = self.store(&batch).await;
        if let (Some(commits), Ok(_)) = (&self.commits, &stored) {
            commits.committed(batch.len(), started.elapsed());
        }
        {
            // What this round had in play, for the next commit to wait for.
            let mut queue = self.queue.lock();
            let arrived = queue.queued.len();
            queue
                .linger
                .committed(batch.len(), arrived, started.elapsed(), Instant::now());
        }
        let stored = stored.and_then(|(version, ids)| {
            let current: usize = batch
                .iter()
                .filter(|p| p.seen == version)
                .map(|p| p.jobs.len())
                .sum();
            if ids.len() == current {
                Ok((version, ids))
            } else {
                Err(StoreError::Corrupt(format!(
                    "a shared insert stored {} jobs of {current}",
                    ids.len()
                )))
            }
        });
        let (version, ids) = match stored {
            Ok(stored) => stored,
            Err(error) => {
                for pending in batch {
                    let _ = pending.reply.send(Err(error.clone()));
                }
                return;
            }
        };
        let (mut any_ready, mut any_scheduled) = (false, false);
        let mut ids = ids.into_iter();
        for pending in batch {
            if pending.seen != version {
                let _ = pending.reply.send(Err(StoreError::FactsChanged));
                continue;
            }
            let mut results = Vec::with_capacity(pending.jobs.len());
            // As many ids as jobs of a current version: checked above.
            for (insert, id) in pending.jobs.iter().zip(ids.by_ref()) {
                let state = JobState::new(insert.job.run_at_ms, pending.now_ms);
                any_ready |= state.status == Status::Ready;
                any_scheduled |= state.status == Status::Scheduled;
                results.push(Some(Enqueued {
                    id: JobId(unid(id)),
                    created: true,
                    status: state.status,
                    run_at_ms: state.run_at_ms,
                }));
            }
            let _ = pending.reply.send(Ok(results));
        }
        if any_ready {
            self.wakeups.announce(Wakeup::Ready);
        }
        if any_scheduled {
            self.wakeups.announce(Wakeup::Schedule);
        }
    }

    /// Stores in one statement (one commit) the jobs of `batch` made from the current facts
    /// version; returns that version and the new ids, in order.
    async fn store(&self, batch: &[Pending]) -> Result<(FactsSeen, Vec<i64>), StoreError> {
        let count: usize = batch.iter().map(|p| p.jobs.len()).sum();
        let mut rows = Columns::with_capacity(count);
        let mut seen = Vec::with_capacity(count);
        for pending in batch {
            for insert in &pending.jobs {
                rows.push(
                    insert,
                    None,
                    &JobState::new(insert.job.run_at_ms, pending.now_ms),
                );
                seen.push(id(pending.seen.0));
            }
        }
        let client = self.pool.get().await.map_err(super::pool_fault)?;
        let stored = query(&client, &INSERT_SHARED, &rows.params([&seen]))
            .await
            .map_err(fault("enqueueing jobs"))?;
        let row = stored
            .first()
            .ok_or_else(|| StoreError::Corrupt("a shared insert answered nothing".into()))?;
        Ok((FactsSeen(unid(row.get(0))), row.get(1)))
    }
}

/// The error of an enqueue whose shared commit ended without an answer (its task panicked).
fn ended() -> StoreError {
    StoreError::storage(
        "enqueueing jobs",
        std::io::Error::other("the shared commit ended without an answer"),
    )
}

/// While it lives, the combiner is committing; dropped early (the task panicked or was
/// cancelled), it fails what is queued and lets the next enqueue start a new task.
struct Running<'a>(&'a Combiner);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut queue = self.0.queue.lock();
        queue.running = false;
        for pending in queue.queued.drain(..) {
            let _ = pending.reply.send(Err(ended()));
        }
    }
}
