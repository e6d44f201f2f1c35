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
//! - A job's result (`JobState::result`) is sealed exactly when its payload is, by the same
//!   record (`payload_sealed`), so it needs no mark of its own; it is sealed before the store
//!   sees it ([`Engine::complete_with_results`](super::Engine)) and opened with the payload.
//!   Its associated data differ from the payload's (another prefix), so a sealed result copied
//!   over its job's payload, or the other way round, does not open.

use serde_json::value::RawValue;

use super::Engine;
use crate::clock::UnixMs;
use crate::model::{Job, JobResult, NewJob, TakenJob};
use crate::secrets::PayloadKey;
use crate::store::StoreError;

/// The associated data of a job's sealed payload.
fn associated_data(kind: &str, created_at_ms: UnixMs) -> Vec<u8> {
    format!("tenax payload\0{kind}\0{created_at_ms}").into_bytes()
}

/// The associated data of a job's sealed result: not the payload's.
fn result_associated_data(kind: &str, created_at_ms: UnixMs) -> Vec<u8> {
    format!("tenax result\0{kind}\0{created_at_ms}").into_bytes()
}

/// `text` sealed with `key` under `aad`, as a JSON string.
fn seal_text(key: &PayloadKey, aad: &[u8], text: &str) -> Result<Box<RawValue>, StoreError> {
    let sealed = key
        .seal(aad, text.as_bytes())
        .map_err(|e| StoreError::storage("sealing a payload", e))?;
    // Base64 needs no escaping: the JSON string is the text in quotes.
    RawValue::from_string(format!("\"{sealed}\""))
        .map_err(|e| StoreError::Corrupt(format!("a sealed payload: {e}")))
}

/// The result of job `kind`/`created_at_ms` sealed with `key`.
fn seal_result(
    key: &PayloadKey,
    result: &JobResult,
    kind: &str,
    created_at_ms: UnixMs,
) -> Result<JobResult, StoreError> {
    let aad = result_associated_data(kind, created_at_ms);
    Ok(JobResult(seal_text(key, &aad, result.get())?))
}

/// The result a sealed `result` holds, opened with `key`.
fn open_result(
    key: &PayloadKey,
    result: &JobResult,
    kind: &str,
    created_at_ms: UnixMs,
    what: impl std::fmt::Display,
) -> Result<JobResult, StoreError> {
    let aad = result_associated_data(kind, created_at_ms);
    open_text(key, &aad, &result.0, format_args!("{what}'s sealed result")).map(JobResult)
}

/// Seals `job`'s payload with `key`, unless it is sealed already.
fn seal_with(key: &PayloadKey, job: &mut NewJob) -> Result<(), StoreError> {
    if job.payload_sealed {
        return Ok(());
    }
    let aad = associated_data(&job.kind, job.created_at_ms);
    job.payload = seal_text(key, &aad, job.payload.get())?;
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
    let aad = associated_data(kind, created_at_ms);
    open_text(key, &aad, payload, format_args!("{what}'s sealed payload"))
}

/// The JSON a sealed `sealed` (a JSON string) holds, opened with `key` under `aad`.
fn open_text(
    key: &PayloadKey,
    aad: &[u8],
    sealed: &RawValue,
    what: impl std::fmt::Display,
) -> Result<Box<RawValue>, StoreError> {
    let damaged = |rule: String| StoreError::Corrupt(format!("{what}: {rule}"));
    let text: &str = serde_json::from_str(sealed.get())
        .map_err(|_| damaged("it is not a JSON string".into()))?;
    let plain = key.open(aad, text).map_err(|e| damaged(e.to_string()))?;
    let plain = String::from_utf8(plain).map_err(|e| damaged(e.to_string()))?;
    RawValue::from_string(plain).map_err(|e| damaged(e.to_string()))
}

/// Moves `job`'s sealed payload and result from one store's data key to another's (`tenax
/// copy`): opened with `from`, sealed with `to`. A job whose payload is not sealed is left as
/// it is (its result is not sealed either).
pub fn reseal_job(job: &mut Job, from: &PayloadKey, to: &PayloadKey) -> Result<(), StoreError> {
    let spec = &mut job.spec;
    if !spec.payload_sealed {
        return Ok(());
    }
    let what = format!("job {}", job.id);
    if let Some(result) = &job.state.result {
        let plain = open_result(from, result, &spec.kind, spec.created_at_ms, &what)?;
        job.state.result = Some(seal_result(to, &plain, &spec.kind, spec.created_at_ms)?);
    }
    spec.payload = open_with(from, &spec.payload, &spec.kind, spec.created_at_ms, what)?;
    spec.payload_sealed = false;
    seal_with(to, spec)
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

    /// `result` of job `kind`/`created_at_ms` sealed with the store's data key.
    pub(super) fn seal_result(
        &self,
        result: &JobResult,
        kind: &str,
        created_at_ms: UnixMs,
    ) -> Result<JobResult, StoreError> {
        seal_result(self.store.payload_key(), result, kind, created_at_ms)
    }

    /// `job` with its payload (and result) opened, if it was sealed.
    pub(super) fn opened_job(&self, mut job: Job) -> Result<Job, StoreError> {
        if job.spec.payload_sealed {
            if let Some(result) = &job.state.result {
                job.state.result = Some(open_result(
                    self.store.payload_key(),
                    result,
                    &job.spec.kind,
                    job.spec.created_at_ms,
                    format_args!("job {}", job.id),
                )?);
            }
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
