//! Reading jobs across pools, and batches (a batch lives on its members' pool).

use std::sync::Arc;

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    Attempt, Backlog, Batch, BatchId, Enqueued, Job, JobFilter, JobId, JobPeek, Order, Page,
    QueueCounts, Searched, TextQuery,
};
use tenax_core::store::{BatchStore, BatchTarget, FactsSeen, Insert, JobReads, StoreError};

use super::jobs::Placed;
use super::{Member, PooledStore, Sequence, across_pools, seen_of};

impl PooledStore {
    /// Where to read `queue`: its pool, or the catalogue for a queue never placed (which
    /// answers that it has nothing, or holds it from before the pools were registered).
    pub(crate) async fn read_pool(&self, queue: &str) -> Result<Arc<Member>, StoreError> {
        Ok(self
            .placed(queue)
            .await?
            .unwrap_or_else(|| self.catalogue.clone()))
    }

    /// The pools `filter` can match jobs in.
    async fn pools_of(&self, filter: &JobFilter) -> Result<Vec<Arc<Member>>, StoreError> {
        match &filter.queue {
            Some(queue) => Ok(vec![self.read_pool(queue).await?]),
            None => self.pools().await.all(),
        }
    }
}

/// Where `id` comes in a listing in `order`: lower first.
fn key(order: Order, id: JobId) -> u64 {
    match order {
        Order::Ascending => id.0,
        Order::Descending => u64::MAX - id.0,
    }
}

/// Pages of several pools as one page: every job of the pools' pages in the page's order, the
/// first `limit` of them. Each pool's page holds its first `limit` past `after`, so the first
/// `limit` of all of them are the first `limit` past `after` of the whole.
fn merged(mut jobs: Vec<Job>, page: Page) -> Vec<Job> {
    jobs.sort_by_key(|job| key(page.order, job.id));
    jobs.truncate(page.limit);
    jobs
}

/// Searches of several pools as one: a pool that stopped before the end stopped at its
/// `looked_to`, and a job past it in another pool could come before one it has not looked at.
/// So the merged search stops at the earliest place a pool stopped, keeps only the jobs up to
/// it, and is exhausted only when every pool is.
fn merged_search(searches: Vec<Searched>, page: Page) -> Searched {
    let looked_at = searches.iter().map(|s| s.looked_at).sum();
    let exhausted = searches.iter().all(|s| s.exhausted);
    let bound = searches
        .iter()
        .filter(|s| !s.exhausted)
        .filter_map(|s| s.looked_to)
        .min_by_key(|id| key(page.order, *id));
    let mut jobs: Vec<Job> = searches
        .iter()
        .flat_map(|s| s.jobs.iter().cloned())
        .filter(|job| bound.is_none_or(|b| key(page.order, job.id) <= key(page.order, b)))
        .collect();
    jobs.sort_by_key(|job| key(page.order, job.id));
    let mut looked_to = bound.or_else(|| {
        searches
            .iter()
            .filter_map(|s| s.looked_to)
            .max_by_key(|id| key(page.order, *id))
    });
    let mut exhausted = exhausted;
    if jobs.len() > page.limit {
        jobs.truncate(page.limit);
        looked_to = jobs.last().map(|job| job.id);
        exhausted = false;
    }
    Searched {
        jobs,
        looked_to,
        looked_at,
        exhausted,
    }
}

#[async_trait]
impl JobReads for PooledStore {
    async fn get_job(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        self.of_job(id).await?.get_job(id).await
    }

    async fn list_jobs(&self, filter: &JobFilter, page: Page) -> Result<Vec<Job>, StoreError> {
        let mut jobs = Vec::new();
        for store in self.pools_of(filter).await? {
            jobs.extend(store.list_jobs(filter, page).await?);
        }
        Ok(merged(jobs, page))
    }

    async fn count_jobs(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        let mut count = 0;
        for store in self.pools_of(filter).await? {
            count += store.count_jobs(filter).await?;
        }
        Ok(count)
    }

    async fn count_jobs_upto(
        &self,
        filter: &JobFilter,
        max: u64,
    ) -> Result<(u64, bool), StoreError> {
        let mut count = 0;
        let mut more = false;
        for store in self.pools_of(filter).await? {
            let (some, past) = store.count_jobs_upto(filter, max).await?;
            count += some;
            more |= past;
        }
        Ok((count.min(max), more || count > max))
    }

    async fn peek_jobs(&self, ids: &[JobId]) -> Result<Vec<Option<JobPeek>>, StoreError> {
        let mut peeks: Vec<Option<JobPeek>> = (0..ids.len()).map(|_| None).collect();
        for (store, mine) in self.group(ids, Sequence::Jobs, |id| id.0).await? {
            let part: Vec<JobId> = mine.iter().map(|(_, id)| *id).collect();
            for ((at, _), peek) in mine.into_iter().zip(store.peek_jobs(&part).await?) {
                peeks[at] = peek;
            }
        }
        Ok(peeks)
    }

    async fn counts(&self) -> Result<Vec<QueueCounts>, StoreError> {
        let mut counts: Vec<QueueCounts> = self
            .pools()
            .await
            .each(|s| s.counts())
            .await?
            .into_iter()
            .flatten()
            .collect();
        counts.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok(counts)
    }

    async fn queue_counts(&self, queue: &str) -> Result<QueueCounts, StoreError> {
        self.read_pool(queue).await?.queue_counts(queue).await
    }

    async fn attempts(&self, id: JobId) -> Result<Vec<Attempt>, StoreError> {
        self.of_job(id).await?.attempts(id).await
    }

    async fn backlog(&self) -> Result<Vec<Backlog>, StoreError> {
        Ok(self
            .pools()
            .await
            .each(|s| s.backlog())
            .await?
            .into_iter()
            .flatten()
            .collect())
    }

    async fn search_jobs(
        &self,
        filter: &JobFilter,
        text: &TextQuery,
        page: Page,
        budget: usize,
    ) -> Result<Searched, StoreError> {
        let mut searches = Vec::new();
        for store in self.pools_of(filter).await? {
            searches.push(store.search_jobs(filter, text, page, budget).await?);
        }
        Ok(merged_search(searches, page))
    }

    async fn ready_since(&self, queues: &[String]) -> Result<Vec<Option<UnixMs>>, StoreError> {
        let mut since = Vec::with_capacity(queues.len());
        for queue in queues {
            let store = self.read_pool(queue).await?;
            since.extend(store.ready_since(std::slice::from_ref(queue)).await?);
        }
        Ok(since)
    }

    async fn children(&self, parents: &[JobId]) -> Result<Vec<(JobId, JobId)>, StoreError> {
        let mut edges = Vec::new();
        for (store, mine) in self.group(parents, Sequence::Jobs, |id| id.0).await? {
            let part: Vec<JobId> = mine.into_iter().map(|(_, id)| id).collect();
            edges.extend(store.children(&part).await?);
        }
        let position = |parent: JobId| parents.iter().position(|p| *p == parent);
        edges.sort_by_key(|(parent, child)| (position(*parent), *child));
        Ok(edges)
    }
}

#[async_trait]
impl BatchStore for PooledStore {
    /// A batch lives with its members and its callbacks' queues, on one pool (its callbacks
    /// are enqueued by the commit that finishes it).
    async fn add_to_batch(
        &self,
        to: BatchTarget,
        jobs: Vec<Insert>,
        close: bool,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<(Batch, Vec<Option<Enqueued>>), StoreError> {
        let placed = match &to {
            BatchTarget::New(spec) => {
                let callbacks: Vec<&str> = [&spec.on_complete, &spec.on_success]
                    .into_iter()
                    .flatten()
                    .map(|template| template.queue.as_str())
                    .collect();
                self.pool_of_inserts(&jobs, &callbacks).await?
            }
            BatchTarget::Existing(id) => {
                let home = self.of_batch(*id).await?;
                if home.batch(*id).await?.is_none() {
                    return Err(StoreError::NoBatch(*id));
                }
                let placed = self.pool_of_inserts(&jobs, &[]).await?;
                if !jobs.is_empty() && placed.store.number != home.number {
                    return Err(across_pools("the batch's members and these jobs"));
                }
                Placed {
                    store: home,
                    ..placed
                }
            }
        };
        let seen = if jobs.is_empty() {
            FactsSeen(seen_of(seen).1.0)
        } else {
            self.facts_for(&placed, seen).await?
        };
        let store = placed.store;
        store.add_to_batch(to, jobs, close, seen, now_ms).await
    }

    async fn close_batch(&self, id: BatchId, now_ms: UnixMs) -> Result<Batch, StoreError> {
        self.of_batch(id).await?.close_batch(id, now_ms).await
    }

    async fn batch(&self, id: BatchId) -> Result<Option<Batch>, StoreError> {
        self.of_batch(id).await?.batch(id).await
    }

    async fn batches(
        &self,
        after: Option<BatchId>,
        limit: usize,
    ) -> Result<Vec<Batch>, StoreError> {
        let mut batches: Vec<Batch> = self
            .pools()
            .await
            .each(|s| s.batches(after, limit))
            .await?
            .into_iter()
            .flatten()
            .collect();
        batches.sort_by_key(|b| b.id);
        batches.truncate(limit);
        Ok(batches)
    }

    async fn delete_batch(&self, id: BatchId) -> Result<bool, StoreError> {
        self.of_batch(id).await?.delete_batch(id).await
    }

    async fn import_batch(&self, batch: Batch) -> Result<(), StoreError> {
        self.importer().await?.import_batch(batch).await
    }
}
