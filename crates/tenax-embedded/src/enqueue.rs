//! Enqueue: new jobs, atomically, visible only once durable.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::value::RawValue;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    After, Enqueued, JobId, JobState, KeyHolder, OnDuplicate, OnParentDead, Status,
};
use tenax_core::store::{FactsSeen, Insert, JobInserts, QueueFacts, StoreError, to_json_bytes};

use super::dependencies;
use super::index::Entry;
use super::ops::Op;
use super::writer::{self, Wake};
use super::{EmbeddedStore, Inner};

#[async_trait]
impl JobInserts for EmbeddedStore {
    /// Read live, never from a cache: facts are as new as the request, so `seen` is not kept.
    async fn queue_facts(&self, queue: &str) -> Result<Arc<QueueFacts>, StoreError> {
        let inner = self.inner.lock();
        Ok(Arc::new(QueueFacts {
            config: inner.queues.get(queue).cloned(),
            subscribers: inner.subscribed.get(queue).cloned().unwrap_or_default(),
            seen: FactsSeen::default(),
        }))
    }

    async fn insert_jobs(
        &self,
        jobs: Vec<Insert>,
        on_duplicate: OnDuplicate,
        _seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Vec<Option<Enqueued>>, StoreError> {
        let on_disk = self.parents_on_disk(&jobs)?;
        let encoded = encode_all(jobs, now_ms);
        let (results, receiver) = {
            let mut inner = self.inner.lock();
            let Staged {
                results,
                ops,
                fresh,
            } = stage(&mut inner, encoded, on_duplicate, &on_disk, now_ms)?;
            if fresh.is_empty() {
                return Ok(results);
            }
            let after =
                Box::new(move |inner: &mut Inner, written| show(inner, fresh, written, now_ms));
            (results, self.writer.submit_then(ops, after))
        };
        writer::wait(receiver).await?;
        Ok(results)
    }
}

impl EmbeddedStore {
    /// The parents named by `jobs` that are stored: under the lock, one that memory no longer
    /// holds is completed (every job that can still change is in memory). Read before the
    /// lock is taken, since a read of the file waits for the writer, which takes the lock; and
    /// read for every parent, since one that memory holds now may complete and leave it before
    /// the lock is taken. (One deleted in between reads as completed: its child runs.)
    fn parents_on_disk(&self, jobs: &[Insert]) -> Result<HashSet<JobId>, StoreError> {
        let named = || {
            jobs.iter().flat_map(|j| &j.after).filter_map(|a| match a {
                After::Job(id) => Some(*id),
                After::Earlier(_) => None,
            })
        };
        let mut named: Vec<JobId> = named().collect();
        if named.is_empty() {
            return Ok(HashSet::new());
        }
        named.sort_unstable();
        named.dedup();
        let bodies = self.read_body(&named)?;
        Ok(named
            .into_iter()
            .zip(bodies)
            .filter_map(|(id, body)| body.map(|_| id))
            .collect())
    }
}

/// Encodes jobs before the store's lock is taken: neither a job's body nor its first state
/// depends on the id it will get, and encoding is most of the work of an enqueue. A child's
/// body names its parent's id, so it is encoded once that is known ([`stage`]).
pub(super) fn encode_all(jobs: Vec<Insert>, now_ms: UnixMs) -> Vec<Encoded> {
    jobs.into_iter()
        .map(|insert| match insert.parent {
            None => Encoded::new(insert, now_ms),
            Some(_) => Encoded::later(insert, now_ms),
        })
        .collect()
}

/// An enqueue planned under the lock: one result per insert, the ops that write it, and the
/// new jobs, which [`show`] puts in memory once the ops are written.
pub(super) struct Staged {
    pub results: Vec<Option<Enqueued>>,
    pub ops: Vec<Op>,
    pub fresh: Vec<(JobId, Insert, JobState)>,
}

/// Plans an enqueue under the lock: ids, parents, subscriptions, unique keys. When it stores
/// anything, the ids and keys are taken in memory (`next_id`, `pending_unique`), and the caller
/// submits `ops`, with [`show`] after them, before it releases the lock. A refused duplicate
/// changes nothing.
pub(super) fn stage(
    inner: &mut Inner,
    encoded: Vec<Encoded>,
    on_duplicate: OnDuplicate,
    on_disk: &HashSet<JobId>,
    now_ms: UnixMs,
) -> Result<Staged, StoreError> {
    let mut results: Vec<Option<Enqueued>> = Vec::with_capacity(encoded.len());
    let mut fresh: Vec<(JobId, Insert, JobState)> = Vec::with_capacity(encoded.len());
    // Keys claimed by earlier jobs of this same request: their id and index.
    let mut claimed: HashMap<(String, String), (JobId, usize)> = HashMap::new();
    let first_id = inner.next_id;
    let mut next_id = first_id;
    let mut ops = Vec::with_capacity(encoded.len() * 2 + 1);
    // The children that wait, registered only once nothing can refuse the request; and the
    // status each new job starts in, for the children of the same request that wait for it.
    let mut waiters: Vec<Waiting> = Vec::new();
    let mut fresh_status: HashMap<JobId, Status> = HashMap::new();
    let any_after = encoded.iter().any(|e| !e.insert.after.is_empty());
    // Invariant: `results` has one entry per insert looked at so far.
    for (index, mut encoded) in encoded.into_iter().enumerate() {
        if let Some(parent) = encoded.insert.parent {
            // Stored only with its parent, whose id it carries.
            let created = results
                .get(parent)
                .and_then(Option::as_ref)
                .filter(|e| e.created && parent < index);
            let Some(parent) = created.map(|e| e.id) else {
                results.push(None);
                continue;
            };
            encoded.insert.job.parent = Some(parent);
            encoded.encode();
        }
        if let Some(owner) = encoded.insert.owner {
            if !inner.subscriptions.contains_key(&owner) {
                results.push(None);
                continue;
            }
        }
        if !encoded.insert.after.is_empty() {
            let parents = parents_of(&encoded.insert.after, index, &results)?;
            let status = |p: JobId| {
                if p >= first_id {
                    fresh_status.get(&p).copied()
                } else {
                    inner.index.get(p).map(|e| e.status)
                }
            };
            let (unfinished, lost) =
                dependencies::standing(&parents, status, |p| on_disk.contains(&p)).map_err(
                    |position| StoreError::UnknownParent {
                        index,
                        position,
                        id: parents[position],
                    },
                )?;
            let on_parent_dead = encoded.insert.job.on_parent_dead;
            dependencies::starting_state(
                &mut encoded.state,
                &unfinished,
                lost,
                on_parent_dead,
                now_ms,
            );
            encoded.insert.job.after.clone_from(&parents);
            encoded.encode();
            let mut edges = parents.clone();
            edges.sort_unstable();
            edges.dedup();
            ops.push(Op::PutChildren {
                child: next_id,
                parents: edges,
            });
            match (encoded.state.status, lost) {
                (Status::Waiting, _) => waiters.push(Waiting {
                    child: next_id,
                    after: parents,
                    unfinished,
                    on_parent_dead,
                    because: None,
                    state: encoded.state.clone(),
                }),
                (status, Some(parent)) if status == dependencies::CANCELLED => {
                    waiters.push(Waiting {
                        child: next_id,
                        after: parents,
                        unfinished,
                        on_parent_dead,
                        because: Some(parent),
                        state: encoded.state.clone(),
                    });
                }
                _ => {}
            }
        }
        let Encoded {
            insert,
            state,
            body,
            state_bytes,
            policy,
        } = encoded;
        if any_after {
            fresh_status.insert(next_id, state.status);
        }
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
                        let (status, run_at_ms) = inner
                            .index
                            .get(existing)
                            .map_or((Status::Scheduled, insert.job.run_at_ms), |e| {
                                (e.status, e.run_at_ms)
                            });
                        results.push(Some(Enqueued {
                            id: existing,
                            created: false,
                            status,
                            run_at_ms,
                        }));
                        continue;
                    }
                }
            }
            claimed.insert(k, (next_id, index));
        }
        results.push(Some(Enqueued {
            id: next_id,
            created: true,
            status: state.status,
            run_at_ms: state.run_at_ms,
        }));
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
        fresh.push((next_id, insert, state));
        next_id = JobId(next_id.0 + 1);
    }
    if !fresh.is_empty() {
        ops.push(Op::SetNextId(next_id));
        inner.next_id = next_id;
        inner
            .pending_unique
            .extend(claimed.into_iter().map(|(k, (id, _))| (k, id)));
        for w in waiters {
            match w.because {
                None => inner.index.deps.wait(
                    w.child,
                    &w.after,
                    &w.unfinished,
                    w.on_parent_dead,
                    Some(w.state),
                ),
                Some(parent) => {
                    inner
                        .index
                        .deps
                        .cancelled_because(w.child, parent, &w.after, w.on_parent_dead)
                }
            }
        }
    }
    Ok(Staged {
        results,
        ops,
        fresh,
    })
}

/// A job of an enqueue that waits for others (or was cancelled at once `because` a parent of
/// it did not complete): registered with the dependencies once nothing can refuse the request.
struct Waiting {
    child: JobId,
    after: Vec<JobId>,
    unfinished: Vec<JobId>,
    on_parent_dead: OnParentDead,
    because: Option<JobId>,
    state: JobState,
}

/// The ids of the parents an insert at `index` names, earlier inserts of the request by the id
/// they got (or the holder of their unique key).
fn parents_of(
    after: &[After],
    index: usize,
    results: &[Option<Enqueued>],
) -> Result<Vec<JobId>, StoreError> {
    after
        .iter()
        .map(|a| match a {
            After::Job(id) => Ok(*id),
            After::Earlier(i) => results
                .get(*i)
                .filter(|_| *i < index)
                .and_then(Option::as_ref)
                .map(|e| e.id)
                .ok_or_else(|| {
                    StoreError::Refused(format!(
                        "jobs[{index}] waits for jobs[{i}], which is not an earlier job of the \
                         request"
                    ))
                }),
        })
        .collect()
}

/// Once the enqueue is written: the new jobs go into memory, where workers find them (and their
/// unique keys leave the pending ones). Runs in the writer, under the lock.
pub(super) fn show(
    inner: &mut Inner,
    fresh: Vec<(JobId, Insert, JobState)>,
    written: bool,
    now_ms: UnixMs,
) -> Wake {
    let mut wake = Wake::default();
    for (id, insert, mut state) in fresh {
        if !insert.after.is_empty() {
            // Cancelled meanwhile, by a parent that will not complete.
            if let Some(cancelled) = inner.index.deps.shown(id, written) {
                state = cancelled;
            }
        }
        let job = insert.job;
        if let Some(key) = &job.unique_key {
            inner
                .pending_unique
                .remove(&(job.queue.clone(), key.clone()));
        }
        if !written {
            continue;
        }
        wake.ready |= state.status == Status::Ready;
        wake.schedule |= state.status == Status::Scheduled;
        let queue = inner.index.intern(&job.queue);
        let kind = inner.index.intern_kind(&job.kind);
        let entry = Entry::new(
            queue,
            kind,
            job.priority,
            job.unique_key.map(String::into_boxed_str),
            &state,
            job.policy.map(|p| p.policy().clone()),
            job.expires_at_ms,
        );
        inner.index.insert(id, entry, now_ms);
    }
    wake
}

/// A job's rows, encoded before the store's lock is taken.
pub(super) struct Encoded {
    insert: Insert,
    state: JobState,
    body: Vec<u8>,
    state_bytes: Vec<u8>,
    policy: Option<Vec<u8>>,
}

impl Encoded {
    fn new(insert: Insert, now_ms: UnixMs) -> Self {
        let mut encoded = Self::later(insert, now_ms);
        encoded.encode();
        encoded
    }

    /// Not encoded yet: [`Encoded::encode`] once the job is complete.
    fn later(insert: Insert, now_ms: UnixMs) -> Self {
        let state = JobState::new(insert.job.run_at_ms, now_ms);
        Self {
            insert,
            state,
            body: Vec::new(),
            state_bytes: Vec::new(),
            policy: None,
        }
    }

    fn encode(&mut self) {
        let job = &self.insert.job;
        self.body = to_json_bytes(&BodyRef {
            queue: &job.queue,
            kind: &job.kind,
            payload: &job.payload,
            priority: job.priority,
            unique_key: job.unique_key.as_deref(),
            created_at_ms: job.created_at_ms,
            expires_at_ms: job.expires_at_ms,
            origin: job.origin.as_deref(),
            parent: job.parent,
            traceparent: job.traceparent.as_deref(),
            payload_sealed: job.payload_sealed,
            after: &job.after,
            on_parent_dead: job.on_parent_dead,
            batch: job.batch,
        });
        self.state_bytes = to_json_bytes(&self.state);
        self.policy = job.policy.as_ref().map(to_json_bytes);
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
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<JobId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    payload_sealed: bool,
    #[serde(skip_serializing_if = "<[JobId]>::is_empty")]
    after: &'a [JobId],
    #[serde(skip_serializing_if = "OnParentDead::is_default")]
    on_parent_dead: OnParentDead,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<tenax_core::model::BatchId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::StoredBody;

    #[test]
    fn body_by_reference_encodes_as_the_stored_body() {
        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        for (unique_key, traceparent, payload_sealed) in [
            (None, None, false),
            (Some("k-1".to_owned()), Some(trace), true),
        ] {
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
                parent: Some(JobId(9)),
                traceparent: traceparent.map(str::to_owned),
                payload_sealed,
                after: vec![JobId(3), JobId(5)],
                on_parent_dead: OnParentDead::Run,
                batch: Some(tenax_core::model::BatchId(3)),
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
                parent: Some(JobId(9)),
                traceparent,
                payload_sealed,
                after: &[JobId(3), JobId(5)],
                on_parent_dead: OnParentDead::Run,
                batch: Some(tenax_core::model::BatchId(3)),
            };
            assert_eq!(to_json_bytes(&by_ref), to_json_bytes(&owned));
        }
    }
}
