//! Enqueue: new jobs, atomically, visible only once durable.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;

use super::EmbeddedStore;
use super::index::Entry;
use super::writer::{self, Op};
use crate::clock::UnixMs;
use crate::model::subscription::{DELIVERY_KIND, delivery_queue};
use crate::model::{DeliveryPayload, JobId, JobState, NewJob, SubscriptionId};
use crate::store::{Enqueued, Insert, KeyHolder, OnDuplicate, StoreError, to_json_bytes};

impl EmbeddedStore {
    pub async fn enqueue(
        &self,
        jobs: Vec<Insert>,
        on_duplicate: OnDuplicate,
        now_ms: UnixMs,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let mut results = Vec::with_capacity(jobs.len());
        let mut fresh: Vec<(JobId, Insert, JobState)> = Vec::with_capacity(jobs.len());
        // Encoded before taking the lock: neither a job's body nor its first state depends on
        // the id it will get, and encoding is most of the work of an enqueue.
        let encoded: Vec<Encoded> = jobs
            .into_iter()
            .map(|insert| Encoded::new(insert, now_ms))
            .collect();
        let receiver = {
            let mut inner = self.inner.lock();
            // Keys claimed by earlier jobs of this same request: their id and index.
            let mut claimed: HashMap<(String, String), (JobId, usize)> = HashMap::new();
            let mut next_id = inner.next_id;
            let mut ops = Vec::with_capacity(encoded.len() * 2 + 1);
            for (
                index,
                Encoded {
                    insert,
                    state,
                    body,
                    state_bytes,
                    policy,
                },
            ) in encoded.into_iter().enumerate()
            {
                if let Some(key) = &insert.job.unique_key {
                    let k = (insert.job.queue.clone(), key.clone());
                    let held = inner
                        .index
                        .unique(&insert.job.queue, key)
                        .or_else(|| inner.pending_unique.get(&k).copied())
                        .map(|id| (id, KeyHolder::Job(id)))
                        .or_else(|| {
                            claimed
                                .get(&k)
                                .map(|(id, at)| (*id, KeyHolder::Earlier(*at)))
                        });
                    if let Some((existing, holder)) = held {
                        match on_duplicate {
                            OnDuplicate::Refuse => {
                                return Err(StoreError::Duplicate {
                                    index,
                                    queue: k.0,
                                    key: k.1,
                                    holder,
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
                    claimed.insert(k, (next_id, index));
                }
                results.push(Enqueued {
                    id: next_id,
                    created: true,
                    status: state.status,
                    run_at_ms: state.run_at_ms,
                });
                ops.push(Op::PutBody { id: next_id, body });
                ops.push(Op::PutState {
                    id: next_id,
                    state: state_bytes,
                });
                if let Some(policy) = policy {
                    ops.push(Op::PutPolicy {
                        id: next_id,
                        policy,
                    });
                }
                let message_id = next_id;
                next_id += 1;
                // One delivery per subscription of the queue, in the same commit as the message.
                let subscribed = inner.subscribed.get(&insert.job.queue);
                for subscription in subscribed.into_iter().flatten() {
                    let delivery =
                        Encoded::new(delivery_for(*subscription, message_id, &insert), now_ms);
                    ops.push(Op::PutBody {
                        id: next_id,
                        body: delivery.body,
                    });
                    ops.push(Op::PutState {
                        id: next_id,
                        state: delivery.state_bytes,
                    });
                    fresh.push((next_id, delivery.insert, delivery.state));
                    next_id += 1;
                }
                fresh.push((message_id, insert, state));
            }
            if fresh.is_empty() {
                return Ok(results);
            }
            ops.push(Op::SetNextId(next_id));
            inner.next_id = next_id;
            inner
                .pending_unique
                .extend(claimed.into_iter().map(|(k, (id, _))| (k, id)));
            self.writer.submit(ops)
        };
        let written = writer::wait(receiver).await;

        let mut inner = self.inner.lock();
        let mut any_ready = false;
        let mut any_scheduled = false;
        // The interned name of the previous job's queue: a batch is mostly of one queue.
        let mut last_queue: Option<Arc<str>> = None;
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
            let queue = match &last_queue {
                Some(queue) if **queue == *job.queue => queue.clone(),
                _ => {
                    let queue = inner.index.intern(&job.queue);
                    last_queue = Some(queue.clone());
                    queue
                }
            };
            let entry = Entry {
                queue,
                priority: job.priority,
                unique_key: job.unique_key.map(String::into_boxed_str),
                state,
                lease: None,
                policy: insert.policy,
                expires_at_ms: job.expires_at_ms,
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

/// The delivery of message `message_id` to `subscription`: due when the message is.
fn delivery_for(subscription: SubscriptionId, message_id: JobId, message: &Insert) -> Insert {
    let job = &message.job;
    let payload = DeliveryPayload {
        message_id,
        queue: job.queue.clone(),
        kind: job.kind.clone(),
        body: job.payload.clone(),
        ttl_s: job
            .expires_at_ms
            .map(|at| at.saturating_sub(job.created_at_ms) / 1_000),
    };
    let payload = serde_json::value::to_raw_value(&payload).unwrap_or_else(|_| job.payload.clone());
    Insert {
        job: NewJob {
            queue: delivery_queue(subscription),
            kind: DELIVERY_KIND.to_owned(),
            payload,
            priority: job.priority,
            run_at_ms: job.run_at_ms,
            policy: None,
            unique_key: None,
            created_at_ms: job.created_at_ms,
            // A delivery outlives its message: it is retried until its own policy gives up.
            expires_at_ms: None,
            origin: None,
        },
        policy: None,
    }
}

/// A job's rows, encoded before the store's lock is taken.
struct Encoded {
    insert: Insert,
    state: JobState,
    body: Vec<u8>,
    state_bytes: Vec<u8>,
    policy: Option<Vec<u8>>,
}

impl Encoded {
    fn new(insert: Insert, now_ms: UnixMs) -> Self {
        let job = &insert.job;
        let state = JobState::new(job.run_at_ms, now_ms);
        let body = to_json_bytes(&BodyRef {
            queue: &job.queue,
            kind: &job.kind,
            payload: &job.payload,
            priority: job.priority,
            unique_key: job.unique_key.as_deref(),
            created_at_ms: job.created_at_ms,
            expires_at_ms: job.expires_at_ms,
            origin: job.origin.as_deref(),
        });
        let state_bytes = to_json_bytes(&state);
        let policy = job.policy.as_ref().map(to_json_bytes);
        Self {
            insert,
            state,
            body,
            state_bytes,
            policy,
        }
    }
}

/// [`StoredBody`](super::tables::StoredBody) by reference: the same fields in the same order
/// with the same attributes, so the same bytes, without copying the job's strings.
#[derive(Serialize)]
struct BodyRef<'a> {
    queue: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    payload: &'a RawValue,
    priority: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    unique_key: Option<&'a str>,
    created_at_ms: UnixMs,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<UnixMs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::tables::StoredBody;

    #[test]
    fn body_by_reference_encodes_as_the_stored_body() {
        for unique_key in [None, Some("k-1".to_owned())] {
            let payload = RawValue::from_string(r#"{"a": [1, "x"]}"#.into()).unwrap();
            let owned = StoredBody {
                queue: "q".into(),
                kind: "email.send".into(),
                payload: payload.clone(),
                priority: -3,
                unique_key: unique_key.clone(),
                created_at_ms: 1_700_000_000_123,
                expires_at_ms: Some(1_700_000_060_000),
                origin: Some("c-1".into()),
            };
            let by_ref = BodyRef {
                queue: "q",
                kind: "email.send",
                payload: &payload,
                priority: -3,
                unique_key: unique_key.as_deref(),
                created_at_ms: 1_700_000_000_123,
                expires_at_ms: Some(1_700_000_060_000),
                origin: Some("c-1"),
            };
            assert_eq!(to_json_bytes(&by_ref), to_json_bytes(&owned));
        }
    }
}
