//! Records stored as they are, with their ids (`tenax copy` into a data directory): the same
//! log operations an enqueue, a completion or a delivery attempt writes, in one commit per
//! call, and memory brought up to date as after those.
//!
//! Invariant: ids stay unique and never reused. A job's id must be past every id the store has
//! assigned (so imports come in ascending order), and `next_id` moves past it in the same
//! commit; a subscription's or token's id must be free, and its counter moves past it.

use std::sync::Arc;

use async_trait::async_trait;
use tenax_core::auth::TokenRecord;
use tenax_core::model::{Job, JobId, Status, Subscription, SubscriptionId};
use tenax_core::store::sealed::to_stored;
use tenax_core::store::{ImportedJob, StoreError, StoreImport, to_json_bytes};

use super::index::Entry;
use super::ops::Op;
use super::subscriptions::install;
use super::tables::StoredBody;
use super::writer::{self, Wake};
use super::{EmbeddedStore, Inner};

#[async_trait]
impl StoreImport for EmbeddedStore {
    async fn import_jobs(&self, jobs: Vec<ImportedJob>) -> Result<(), StoreError> {
        let Some(last) = jobs.last().map(|j| j.job.id) else {
            return Ok(());
        };
        let mut ops = Vec::new();
        for imported in &jobs {
            ops.extend(job_ops(imported)?);
        }
        ops.push(Op::SetNextId(JobId(last.0 + 1)));
        let receiver = {
            let mut inner = self.inner.lock();
            let mut floor = inner.next_id;
            for imported in &jobs {
                let id = imported.job.id;
                if id < floor {
                    return Err(StoreError::Refused(format!(
                        "job {id} cannot be imported: its id is not past every id the store \
                         holds or has assigned (the next is {floor})"
                    )));
                }
                floor = JobId(id.0 + 1);
            }
            inner.next_id = floor;
            // Members of a batch imported before them that is still counting.
            for imported in &jobs {
                let job = &imported.job;
                let counting = job.spec.batch.filter(|b| {
                    inner
                        .batches
                        .get(b)
                        .is_some_and(|b| b.state != tenax_core::model::BatchState::Finished)
                });
                if let (Some(batch), false) = (counting, job.state.status == Status::Completed) {
                    inner.members.insert(job.id, batch);
                }
            }
            let live: Vec<Job> = jobs
                .into_iter()
                .map(|imported| imported.job)
                .filter(|job| job.state.status != Status::Completed)
                .collect();
            let after = Box::new(move |inner: &mut Inner, written| show(inner, live, written));
            self.writer.submit_then(ops, after)
        };
        writer::wait(receiver).await?;
        self.signals.ready.notify_waiters();
        self.signals.schedule.notify_waiters();
        Ok(())
    }

    async fn import_subscription(&self, subscription: Subscription) -> Result<(), StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            let id = subscription.id;
            if id.0 == 0 || inner.subscriptions.contains_key(&id) {
                return Err(StoreError::Refused(format!(
                    "subscription {id} cannot be imported: the id is taken"
                )));
            }
            let stored = to_stored(&subscription, &self.keys)?;
            inner.next_subscription_id = inner.next_subscription_id.max(SubscriptionId(id.0 + 1));
            let receiver = self.writer.submit(vec![Op::PutSubscription {
                id,
                subscription: stored,
            }]);
            install(&mut inner, subscription);
            receiver
        };
        writer::wait(receiver).await?;
        self.signals.subscriptions.notify_waiters();
        Ok(())
    }

    async fn import_token(&self, record: TokenRecord) -> Result<(), StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            if record.id == 0 || inner.tokens.contains_key(&record.id) {
                return Err(StoreError::Refused(format!(
                    "token {} cannot be imported: the id is taken",
                    record.id
                )));
            }
            inner.next_token_id = inner.next_token_id.max(record.id + 1);
            let receiver = self.writer.submit(vec![Op::PutToken {
                id: record.id,
                record: to_json_bytes(&record),
            }]);
            inner.tokens.insert(record.id, record);
            receiver
        };
        writer::wait(receiver).await?;
        self.signals.tokens.notify_waiters();
        Ok(())
    }
}

/// The log operations that store `imported` as it is.
fn job_ops(imported: &ImportedJob) -> Result<Vec<Op>, StoreError> {
    let job = &imported.job;
    let spec = &job.spec;
    let body = StoredBody {
        queue: spec.queue.clone(),
        kind: spec.kind.clone(),
        payload: spec.payload.clone(),
        priority: spec.priority,
        unique_key: spec.unique_key.clone(),
        created_at_ms: spec.created_at_ms,
        expires_at_ms: spec.expires_at_ms,
        origin: spec.origin.clone(),
        parent: spec.parent,
        traceparent: spec.traceparent.clone(),
        payload_sealed: spec.payload_sealed,
        after: spec.after.clone(),
        on_parent_dead: spec.on_parent_dead,
        batch: spec.batch,
    };
    let mut ops = vec![Op::PutBody {
        id: job.id,
        body: to_json_bytes(&body),
    }];
    if !spec.after.is_empty() {
        ops.push(Op::PutChildren {
            child: job.id,
            parents: spec.after.clone(),
        });
    }
    if let Some(policy) = &spec.policy {
        ops.push(Op::PutPolicy {
            id: job.id,
            policy: to_json_bytes(policy),
        });
    }
    for entry in &job.errors {
        ops.push(Op::PutError {
            id: job.id,
            attempt: entry.attempt,
            entry: to_json_bytes(entry),
        });
    }
    for attempt in &imported.attempts {
        ops.push(Op::PutAttempt {
            id: job.id,
            entry: to_json_bytes(attempt),
        });
    }
    let state = to_json_bytes(&job.state);
    match job.state.status {
        Status::Completed => {
            let Some(finished_at_ms) = job.state.finished_at_ms else {
                return Err(StoreError::Refused(format!(
                    "job {} cannot be imported: it is completed without a time it finished",
                    job.id
                )));
            };
            ops.push(Op::Complete {
                id: job.id,
                queue: Arc::from(spec.queue.as_str()),
                finished_at_ms,
                expires_at_ms: spec.expires_at_ms,
                state,
            });
        }
        Status::InFlight => {
            return Err(StoreError::Refused(format!(
                "job {} cannot be imported in flight: import it at rest (ImportedJob::at_rest)",
                job.id
            )));
        }
        Status::Scheduled | Status::Ready | Status::Dead | Status::Cancelled | Status::Waiting => {
            ops.push(Op::PutState { id: job.id, state });
        }
    }
    Ok(ops)
}

/// Once the import is written: its unfinished and dead jobs go into memory, as an enqueue's do
/// (completed ones are on disk only, and their counts follow the commit).
fn show(inner: &mut Inner, jobs: Vec<Job>, written: bool) -> Wake {
    let mut wake = Wake::default();
    if !written {
        return wake;
    }
    for job in jobs {
        wake.ready |= job.state.status == Status::Ready;
        wake.schedule |= job.state.status == Status::Scheduled;
        let queue = inner.index.intern(&job.spec.queue);
        let kind = inner.index.intern_kind(&job.spec.kind);
        let entry = Entry::new(
            queue,
            kind,
            job.spec.priority,
            job.spec.unique_key.map(String::into_boxed_str),
            &job.state,
            job.spec.policy.map(|p| p.policy().clone()),
            job.spec.expires_at_ms,
        );
        // Time 0: a scheduled job stays scheduled until upkeep promotes it, as its record says.
        inner.index.insert(job.id, entry, 0);
    }
    wake
}
