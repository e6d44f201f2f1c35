//! Encrypted queues: the payloads of a queue whose settings say `encrypt_payloads` are sealed
//! with the store's data key (`crate::secrets::payload_key`) before they reach the store, and
//! opened on every path that reads a job back.
//!
//! Invariants:
//! - Nothing above the engine sees a sealed payload: every engine operation that returns a job
//!   or a leased job opens it here first ([`Engine::opened_job`], [`Engine::opened_taken`]).
//! - Nothing below the engine sees an encrypted queue's payload in clear: the message and each
//!   of its webhook deliveries (whose payload carries the message's body) are sealed before
//!   they are handed to the store ([`Engine::seal_payload`]).
//! - Whether a stored payload is sealed is the job's own record (`NewJob::payload_sealed`), not
//!   its queue's current setting: turning the setting off leaves sealed payloads readable, and
//!   turning it on leaves plain ones as they are.
//! - A sealed payload is bound to its job by associated data made of what a job keeps for life
//!   (its type and its creation time; its queue changes on a dead-letter move), so a sealed
//!   payload copied into another job does not open.

use serde_json::value::RawValue;

use super::Engine;
use crate::clock::UnixMs;
use crate::model::{Job, JobId, NewJob, TakenJob};
use crate::secrets::PayloadKey;
use crate::store::StoreError;

/// The associated data of a job's sealed payload.
fn associated_data(kind: &str, created_at_ms: UnixMs) -> Vec<u8> {
    format!("tenax payload\0{kind}\0{created_at_ms}").into_bytes()
}

/// Seals `job`'s payload with `key`, unless it is sealed already.
fn seal_with(key: &PayloadKey, job: &mut NewJob) -> Result<(), StoreError> {
    if job.payload_sealed {
        return Ok(());
    }
    let aad = associated_data(&job.kind, job.created_at_ms);
    let text = key
        .seal(&aad, job.payload.get().as_bytes())
        .map_err(|e| StoreError::storage("sealing a payload", e))?;
    // Base64 needs no escaping: the JSON string is the text in quotes.
    job.payload = RawValue::from_string(format!("\"{text}\""))
        .map_err(|e| StoreError::Corrupt(format!("a sealed payload: {e}")))?;
    job.payload_sealed = true;
    Ok(())
}

/// The payload a sealed `payload` holds, opened with `key`.
fn open_with(
    key: &PayloadKey,
    payload: &RawValue,
    kind: &str,
    created_at_ms: UnixMs,
    what: impl std::fmt::Display,
) -> Result<Box<RawValue>, StoreError> {
    let damaged = |rule: String| StoreError::Corrupt(format!("{what}'s sealed payload: {rule}"));
    let text: &str = serde_json::from_str(payload.get())
        .map_err(|_| damaged("it is not a JSON string".into()))?;
    let plain = key
        .open(&associated_data(kind, created_at_ms), text)
        .map_err(|e| damaged(e.to_string()))?;
    let plain = String::from_utf8(plain).map_err(|e| damaged(e.to_string()))?;
    RawValue::from_string(plain).map_err(|e| damaged(e.to_string()))
}

/// Moves job `id`'s sealed payload from one store's data key to another's (`tenax copy`): opened
/// with `from`, sealed with `to`. A payload that is not sealed is left as it is.
pub fn reseal_payload(
    id: JobId,
    job: &mut NewJob,
    from: &PayloadKey,
    to: &PayloadKey,
) -> Result<(), StoreError> {
    if !job.payload_sealed {
        return Ok(());
    }
    job.payload = open_with(
        from,
        &job.payload,
        &job.kind,
        job.created_at_ms,
        format_args!("job {id}"),
    )?;
    job.payload_sealed = false;
    seal_with(to, job)
}

impl Engine {
    /// Seals `job`'s payload with the store's data key, unless it is sealed already.
    pub(super) fn seal_payload(&self, job: &mut NewJob) -> Result<(), StoreError> {
        seal_with(self.store.payload_key(), job)
    }

    /// The payload a sealed `payload` holds, opened.
    fn open_payload(
        &self,
        payload: &RawValue,
        kind: &str,
        created_at_ms: UnixMs,
        what: impl std::fmt::Display,
    ) -> Result<Box<RawValue>, StoreError> {
        open_with(self.store.payload_key(), payload, kind, created_at_ms, what)
    }

    /// `job` with its payload opened, if it was sealed.
    pub(super) fn opened_job(&self, mut job: Job) -> Result<Job, StoreError> {
        if job.spec.payload_sealed {
            job.spec.payload = self.open_payload(
                &job.spec.payload,
                &job.spec.kind,
                job.spec.created_at_ms,
                format_args!("job {}", job.id),
            )?;
            job.spec.payload_sealed = false;
        }
        Ok(job)
    }

    /// Every job of `jobs` with its payload opened.
    pub(super) fn opened_jobs(&self, jobs: Vec<Job>) -> Result<Vec<Job>, StoreError> {
        jobs.into_iter().map(|job| self.opened_job(job)).collect()
    }

    /// Every leased job of `jobs` with its payload opened.
    pub(super) fn opened_taken(&self, jobs: Vec<TakenJob>) -> Result<Vec<TakenJob>, StoreError> {
        jobs.into_iter()
            .map(|mut job| {
                if job.payload_sealed {
                    job.payload = self.open_payload(
                        &job.payload,
                        &job.kind,
                        job.created_at_ms,
                        format_args!("job {}", job.id),
                    )?;
                    job.payload_sealed = false;
                }
                Ok(job)
            })
            .collect()
    }
}
