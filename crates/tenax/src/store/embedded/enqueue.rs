//! Enqueue: new jobs, atomically, visible only once durable.

use std::collections::HashMap;

use super::EmbeddedStore;
use super::index::Entry;
use super::tables::StoredBody;
use super::writer::{self, Op};
use crate::clock::UnixMs;
use crate::model::{JobId, JobState};
use crate::store::{Enqueued, Insert, OnDuplicate, StoreError, to_json_bytes};

impl EmbeddedStore {
    pub async fn enqueue(
        &self,
        jobs: Vec<Insert>,
        on_duplicate: OnDuplicate,
        now_ms: UnixMs,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let mut results = Vec::with_capacity(jobs.len());
        let mut fresh: Vec<(JobId, Insert, JobState)> = Vec::with_capacity(jobs.len());
        let receiver = {
            let mut inner = self.inner.lock();
            // Keys claimed by earlier jobs of this same request.
            let mut claimed: HashMap<(String, String), JobId> = HashMap::new();
            let mut next_id = inner.next_id;
            for insert in jobs {
                if let Some(key) = &insert.job.unique_key {
                    let k = (insert.job.queue.clone(), key.clone());
                    let existing = inner
                        .index
                        .unique(&insert.job.queue, key)
                        .or_else(|| inner.pending_unique.get(&k).copied())
                        .or_else(|| claimed.get(&k).copied());
                    if let Some(existing) = existing {
                        match on_duplicate {
                            OnDuplicate::Refuse => {
                                return Err(StoreError::Duplicate {
                                    queue: k.0,
                                    key: k.1,
                                    existing,
                                });
                            }
                            OnDuplicate::Existing => {
                                let (status, run_at_ms) = inner.index.get(existing).map_or(
                                    (crate::model::Status::Scheduled, insert.job.run_at_ms),
                                    |e| (e.state.status, e.state.run_at_ms),
                                );
                                results.push(Enqueued {
                                    id: existing,
                                    created: false,
                                    status,
                                    run_at_ms,
                                });
                                continue;
                            }
                        }
                    }
                    claimed.insert(k, next_id);
                }
                let state = JobState::new(insert.job.run_at_ms, now_ms);
                results.push(Enqueued {
                    id: next_id,
                    created: true,
                    status: state.status,
                    run_at_ms: state.run_at_ms,
                });
                fresh.push((next_id, insert, state));
                next_id += 1;
            }
            if fresh.is_empty() {
                return Ok(results);
            }
            let mut ops = Vec::with_capacity(fresh.len() * 2 + 1);
            for (id, insert, state) in &fresh {
                let job = &insert.job;
                let body = StoredBody {
                    queue: job.queue.clone(),
                    kind: job.kind.clone(),
                    payload: job.payload.clone(),
                    priority: job.priority,
                    unique_key: job.unique_key.clone(),
                    created_at_ms: job.created_at_ms,
                };
                ops.push(Op::PutBody {
                    id: *id,
                    body: to_json_bytes(&body),
                });
                ops.push(Op::PutState {
                    id: *id,
                    state: to_json_bytes(state),
                });
                if let Some(policy) = &job.policy {
                    ops.push(Op::PutPolicy {
                        id: *id,
                        policy: to_json_bytes(policy),
                    });
                }
            }
            ops.push(Op::SetNextId(next_id));
            inner.next_id = next_id;
            inner.pending_unique.extend(claimed);
            self.writer.submit(ops)
        };
        let written = writer::wait(receiver).await;

        let mut inner = self.inner.lock();
        let mut any_ready = false;
        let mut any_scheduled = false;
        for (id, insert, state) in fresh {
            let job = insert.job;
            if let Some(key) = &job.unique_key {
                inner
                    .pending_unique
                    .remove(&(job.queue.clone(), key.clone()));
            }
            if written.is_err() {
                continue;
            }
            any_ready |= state.status == crate::model::Status::Ready;
            any_scheduled |= state.status == crate::model::Status::Scheduled;
            let entry = Entry {
                queue: inner.index.intern(&job.queue),
                priority: job.priority,
                unique_key: job.unique_key.map(String::into_boxed_str),
                state,
                lease: None,
                policy: insert.policy,
            };
            inner.index.insert(id, entry, now_ms);
        }
        drop(inner);
        written?;
        if any_ready {
            self.ready.notify_waiters();
        }
        if any_scheduled {
            self.schedule.notify_waiters();
        }
        Ok(results)
    }
}
