//! Reads: one job, a filtered page of jobs, counts. Memory gives status; disk gives the rest.

use redb::ReadableDatabase;

use super::EmbeddedStore;
use super::index::Index;
use super::tables::{ERRORS, POLICIES};
use crate::model::{ErrorEntry, Job, JobId, NewJob};
use crate::store::{JobFilter, QueueCounts, Selection, StoreError, from_json_bytes};

impl EmbeddedStore {
    pub fn get(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        let Some((state, inner_expiry)) = self
            .inner
            .lock()
            .index
            .get(id)
            .map(|e| (e.state.clone(), e.expires_at_ms))
        else {
            return Ok(None);
        };
        let Some(Some(body)) = self.read_body(&[id])?.pop() else {
            return Ok(None);
        };
        let storage = |e: &dyn std::fmt::Display| StoreError::Storage(e.to_string());
        let tx = self.db.begin_read().map_err(|e| storage(&e))?;
        let policies = tx.open_table(POLICIES).map_err(|e| storage(&e))?;
        let policy = match policies.get(id).map_err(|e| storage(&e))? {
            Some(bytes) => Some(from_json_bytes("job policy", bytes.value())?),
            None => None,
        };
        let errors_table = tx.open_table(ERRORS).map_err(|e| storage(&e))?;
        let mut errors: Vec<ErrorEntry> = Vec::new();
        for row in errors_table
            .range((id, 0)..=(id, u32::MAX))
            .map_err(|e| storage(&e))?
        {
            let (_, bytes) = row.map_err(|e| storage(&e))?;
            errors.push(from_json_bytes("job error", bytes.value())?);
        }
        Ok(Some(Job {
            id,
            spec: NewJob {
                queue: body.queue,
                kind: body.kind,
                payload: body.payload,
                priority: body.priority,
                run_at_ms: state.run_at_ms,
                policy,
                unique_key: body.unique_key,
                created_at_ms: body.created_at_ms,
                expires_at_ms: inner_expiry,
                origin: body.origin,
            },
            state,
            errors,
        }))
    }

    /// A page of jobs in id order. Queue and status filter in memory; type needs the body.
    pub fn list(
        &self,
        filter: &JobFilter,
        after: Option<JobId>,
        limit: usize,
    ) -> Result<Vec<Job>, StoreError> {
        let mut ids: Vec<JobId> = {
            let inner = self.inner.lock();
            inner
                .index
                .entries()
                .filter(|(id, e)| {
                    after.is_none_or(|after| **id > after)
                        && filter.queue.as_deref().is_none_or(|q| *e.queue == *q)
                        && filter.status.is_none_or(|s| e.state.status == s)
                        && filter.finished_since(&e.state)
                })
                .map(|(id, _)| *id)
                .collect()
        };
        ids.sort_unstable();
        let mut jobs = Vec::with_capacity(limit.min(ids.len()));
        for id in ids {
            if jobs.len() >= limit {
                break;
            }
            if let Some(job) = self.get(id)? {
                if filter.kind.as_deref().is_none_or(|k| job.spec.kind == k) {
                    jobs.push(job);
                }
            }
        }
        Ok(jobs)
    }

    pub fn counts(&self) -> Vec<QueueCounts> {
        let inner = self.inner.lock();
        let mut counts: Vec<QueueCounts> = inner
            .index
            .counts()
            .filter(|(_, c)| c.iter().any(|n| *n > 0))
            .map(|(queue, c)| QueueCounts {
                queue: queue.to_owned(),
                scheduled: c[0],
                ready: c[1],
                in_flight: c[2],
                completed: c[3],
                dead: c[4],
            })
            .collect();
        counts.sort_by(|a, b| a.queue.cmp(&b.queue));
        counts
    }

    /// Ids matching a selection (type filters read bodies). Called under the lock.
    pub(super) fn select(
        &self,
        index: &Index,
        selection: &Selection,
    ) -> Result<Vec<JobId>, StoreError> {
        let filter = &selection.filter;
        let matches = |id: JobId| {
            index.get(id).is_some_and(|e| {
                filter.queue.as_deref().is_none_or(|q| *e.queue == *q)
                    && filter.status.is_none_or(|s| e.state.status == s)
                    && filter.finished_since(&e.state)
            })
        };
        let mut ids: Vec<JobId> = match &selection.ids {
            Some(ids) => ids.iter().copied().filter(|id| matches(*id)).collect(),
            None => index
                .entries()
                .map(|(id, _)| *id)
                .filter(|id| matches(*id))
                .collect(),
        };
        if let Some(kind) = &filter.kind {
            let bodies = self.read_body(&ids)?;
            let mut keep = bodies
                .iter()
                .map(|b| b.as_ref().is_some_and(|b| &b.kind == kind));
            ids.retain(|_| keep.next().unwrap_or(false));
        }
        ids.sort_unstable();
        Ok(ids)
    }
}
