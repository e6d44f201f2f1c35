//! Completed jobs, which live on disk only (`tables`: `completed`, `completed_at`,
//! `completed_expiring`, `completed_counts`): finding them, paging through them in id order,
//! counting them, and picking those that retention or expiry removes.
//!
//! Only the writer changes these tables; everything here reads them in a read transaction, which
//! sees every commit made before it began. A completed job whose completion is not yet written
//! is still in memory (`index`), and memory is asked first.

use redb::ReadableTable;
use tenax_core::clock::UnixMs;
use tenax_core::model::{JobFilter, JobId, JobState, Order, Status};
use tenax_core::store::{StoreError, from_json_bytes};

use super::tables::{COMPLETED, COMPLETED_AT, COMPLETED_EXPIRING, StoredBody};
use super::{EmbeddedStore, Inner, fault};

/// A completed job as the disk holds it.
#[derive(Debug)]
pub(super) struct CompletedJob {
    pub id: JobId,
    pub body: StoredBody,
    pub state: JobState,
}

/// Whether completed jobs can pass `filter` at all (it may ask for another status, or for what
/// only unfinished jobs are: live, claimed).
pub(super) fn may_hold_completed(filter: &JobFilter) -> bool {
    filter.status.is_none_or(|s| s == Status::Completed)
        && filter.live_at_ms.is_none()
        && !filter.claimed_at.is_some_and(|(claimed, _)| claimed)
}

/// Whether a completed job of `queue` with `state` passes what `filter` asks of the queue and
/// the state (the body's conditions are judged apart).
fn completed_passes(filter: &JobFilter, queue: &str, state: &JobState) -> bool {
    may_hold_completed(filter)
        && filter.queue.as_deref().is_none_or(|q| q == queue)
        && filter
            .finished_since_ms
            .is_none_or(|since| state.finished_at_ms.is_some_and(|at| at >= since))
}

/// Whether the count of completed jobs matching `filter` is in the counts, without a scan.
fn counted(filter: &JobFilter) -> bool {
    filter.kind.is_none() && filter.not_origin.is_none() && filter.finished_since_ms.is_none()
}

impl EmbeddedStore {
    /// Job `id` if it is completed on disk.
    pub(super) fn completed_job(&self, id: JobId) -> Result<Option<CompletedJob>, StoreError> {
        let Some(Some(body)) = self.read_body(&[id])?.pop() else {
            return Ok(None);
        };
        let what = "reading a completed job";
        let tx = self.read_tx(what)?;
        let table = tx.open_table(COMPLETED).map_err(fault(what))?;
        let Some(bytes) = table
            .get((body.queue.as_str(), id.0))
            .map_err(fault(what))?
        else {
            return Ok(None);
        };
        let state = from_json_bytes("job state", bytes.value())?;
        Ok(Some(CompletedJob { id, body, state }))
    }

    /// The queues whose completed jobs `filter` may want, from memory's counts.
    pub(super) fn completed_queues(inner: &Inner, filter: &JobFilter) -> Vec<String> {
        if !may_hold_completed(filter) {
            return Vec::new();
        }
        match &filter.queue {
            Some(queue) => vec![queue.clone()],
            None => inner.completed.keys().cloned().collect(),
        }
    }

    /// Up to `max` completed jobs of `queues` passing `filter`'s queue and state conditions,
    /// after `after` in `order`: their ids and states. Reads one range per queue and merges
    /// them.
    pub(super) fn completed_page(
        &self,
        queues: &[String],
        filter: &JobFilter,
        after: Option<JobId>,
        order: Order,
        max: usize,
    ) -> Result<Vec<(JobId, JobState)>, StoreError> {
        if !may_hold_completed(filter) || max == 0 {
            return Ok(Vec::new());
        }
        let what = "listing completed jobs";
        let tx = self.read_tx(what)?;
        let table = tx.open_table(COMPLETED).map_err(fault(what))?;
        let mut out: Vec<(JobId, JobState)> = Vec::new();
        for queue in queues {
            let q = queue.as_str();
            let range = match (order, after) {
                (Order::Ascending, after) => {
                    let from = after.map_or(0, |a| a.0.saturating_add(1));
                    table.range((q, from)..=(q, u64::MAX))
                }
                (Order::Descending, Some(after)) => table.range((q, 0)..(q, after.0)),
                (Order::Descending, None) => table.range((q, 0)..=(q, u64::MAX)),
            }
            .map_err(fault(what))?;
            let mut taken = 0;
            let mut push = |row: Result<_, redb::StorageError>| -> Result<bool, StoreError> {
                let (key, bytes): (
                    redb::AccessGuard<'_, (&str, u64)>,
                    redb::AccessGuard<'_, &[u8]>,
                ) = row.map_err(fault(what))?;
                let state: JobState = from_json_bytes("job state", bytes.value())?;
                if completed_passes(filter, q, &state) {
                    out.push((JobId(key.value().1), state));
                    taken += 1;
                }
                Ok(taken < max)
            };
            // Each queue gives at most `max`: the merged first `max` are among them.
            match order {
                Order::Ascending => {
                    for row in range {
                        if !push(row)? {
                            break;
                        }
                    }
                }
                Order::Descending => {
                    for row in range.rev() {
                        if !push(row)? {
                            break;
                        }
                    }
                }
            }
        }
        match order {
            Order::Ascending => out.sort_unstable_by_key(|(id, _)| *id),
            Order::Descending => out.sort_unstable_by_key(|(id, _)| std::cmp::Reverse(*id)),
        }
        out.truncate(max);
        Ok(out)
    }

    /// How many completed jobs pass `filter`: from the counts when the filter allows, else by
    /// reading them (and their bodies, for conditions on the body).
    pub(super) fn count_completed(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        if !may_hold_completed(filter) {
            return Ok(0);
        }
        let queues = {
            let inner = self.inner.lock();
            if counted(filter) {
                return Ok(match &filter.queue {
                    Some(queue) => inner.completed.get(queue).copied().unwrap_or(0),
                    None => inner.completed.values().sum(),
                });
            }
            Self::completed_queues(&inner, filter)
        };
        let mut count = 0u64;
        let mut after = None;
        loop {
            let page = self.completed_page(&queues, filter, after, Order::Ascending, 10_000)?;
            let Some((last, _)) = page.last() else {
                return Ok(count);
            };
            after = Some(*last);
            let ids: Vec<JobId> = page.iter().map(|(id, _)| *id).collect();
            let bodies = self.read_body(&ids)?;
            count += bodies
                .iter()
                .flatten()
                .filter(|b| super::read::body_passes(filter, &b.kind, b.origin.as_deref()))
                .count() as u64;
        }
    }

    /// Completed jobs of `queue` (all of them), in id order.
    pub(super) fn completed_of_queue(&self, queue: &str) -> Result<Vec<JobId>, StoreError> {
        let what = "finding a queue's completed jobs";
        let tx = self.read_tx(what)?;
        let table = tx.open_table(COMPLETED).map_err(fault(what))?;
        let mut ids = Vec::new();
        for row in table
            .range((queue, 0)..=(queue, u64::MAX))
            .map_err(fault(what))?
        {
            let (key, _) = row.map_err(fault(what))?;
            ids.push(JobId(key.value().1));
        }
        Ok(ids)
    }

    /// Completed jobs that finished at or before `before_ms`, at most `max`, oldest first.
    pub(super) fn completed_before(
        &self,
        before_ms: UnixMs,
        max: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        self.ids_by_time(
            COMPLETED_AT,
            "finding completed jobs past retention",
            before_ms,
            max,
        )
    }

    /// Completed jobs whose expiry is at or before `now_ms`, at most `max`.
    pub(super) fn completed_expired(
        &self,
        now_ms: UnixMs,
        max: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        self.ids_by_time(
            COMPLETED_EXPIRING,
            "finding expired completed jobs",
            now_ms,
            max,
        )
    }

    /// The earliest expiry of a completed job.
    pub(super) fn next_completed_expiry(&self) -> Result<Option<UnixMs>, StoreError> {
        let what = "finding the next expiry of a completed job";
        let tx = self.read_tx(what)?;
        let table = tx.open_table(COMPLETED_EXPIRING).map_err(fault(what))?;
        Ok(table
            .first()
            .map_err(fault(what))?
            .map(|(key, _)| key.value().0))
    }

    fn ids_by_time(
        &self,
        definition: redb::TableDefinition<'static, (u64, u64), &'static str>,
        what: &'static str,
        until_ms: UnixMs,
        max: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        let tx = self.read_tx(what)?;
        let table = tx.open_table(definition).map_err(fault(what))?;
        let mut ids = Vec::new();
        for row in table
            .range((0, 0)..=(until_ms, u64::MAX))
            .map_err(fault(what))?
            .take(max)
        {
            let (key, _) = row.map_err(fault(what))?;
            ids.push(JobId(key.value().1));
        }
        Ok(ids)
    }
}
