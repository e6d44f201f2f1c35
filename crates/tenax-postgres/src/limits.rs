//! Per-queue limits, held exactly across servers: a take (or pop) from a limited queue counts
//! under a lock of the queue's row.
//!
//! The counted path is one transaction: (1) lock the rows of the limited queues in
//! `tenax_queues` (`FOR UPDATE`, in name order), reading their settings as they are now; (2)
//! count, in a new statement (so its snapshot sees every take that held the lock before), each
//! queue's jobs in flight (`tenax_jobs_in_flight_queue`) and its starts in the rate limit's
//! period (`tenax_queue_starts`); (3) take at most what that leaves room for; (4) add the
//! starts to the queue's bucket, forgetting buckets two periods old; commit. Takes of one
//! limited queue wait for each other; nothing else does.
//!
//! Why counting rather than a counter row per queue: jobs leave flight in many ways (complete,
//! fail, lease expiry, delete, a queue or subscription deleted), on any server; a counter that
//! each of them decrements is a hot row every acknowledgement of the queue updates, and one
//! forgotten path leaks a slot for good. Counting costs the takes of limited queues one index
//! range of at most `concurrency` entries, and costs the rest nothing (one more look at the
//! queue row the take already reads for `paused`). Starts are only ever added by takes, which
//! hold the lock anyway: their rows are written by nobody else.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use tenax_core::clock::UnixMs;
use tenax_core::model::{Job, QueueConfig, RateLimit};
use tenax_core::store::{LimitHold, StoreError, TakeRequest, Taken};

use super::dependents::settle;
use super::leases::{POP, popped, take, taken_jobs};
use super::rows::{limit, queue_config_of, time, untime};
use super::statements::statements;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, fault};

/// Whether any of `queues` is limited (and not paused).
pub async fn any_limited<C: GenericClient>(
    client: &C,
    queues: &[String],
) -> Result<bool, StoreError> {
    let rows = query(client, &ANY_LIMITED, &[&queues])
        .await
        .map_err(fault("looking for limited queues"))?;
    Ok(!rows.is_empty())
}

/// A queue's starts that count at `now_ms` under `rate`.
pub async fn started<C: GenericClient>(
    client: &C,
    queue: &str,
    rate: &RateLimit,
    now_ms: UnixMs,
) -> Result<u64, StoreError> {
    let rows = query(client, &STARTED, &[&queue, &since(rate, now_ms)])
        .await
        .map_err(fault("counting a queue's starts"))?;
    Ok(rows.first().map_or(0, |r| untime(r.get(0))))
}

/// The start of the period that counts at `now_ms`: buckets ending after it count.
fn since(rate: &RateLimit, now_ms: UnixMs) -> i64 {
    time(now_ms.saturating_sub(rate.period_ms))
}

/// What the counts leave room for in each queue, and what they hold back.
struct Room {
    /// One per queue of the request.
    caps: Vec<i64>,
    held: LimitHold,
    /// The rate-limited queues, with their limits.
    rated: HashMap<String, RateLimit>,
}

impl PostgresStore {
    /// [`super::leases`]'s take, counted: see the module's description.
    pub(super) async fn take_limited(
        &self,
        request: &TakeRequest<'_>,
        now_ms: UnixMs,
    ) -> Result<Taken, StoreError> {
        let what = "taking jobs of limited queues";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let room = count(&tx, request.queues, request.max, now_ms, true).await?;
        let rows = take(&tx, request, false, &room.caps, now_ms).await?;
        let expires_at_ms = now_ms.saturating_add(request.lease_ms);
        let jobs = taken_jobs(&rows, expires_at_ms)?;
        record(
            &tx,
            &room.rated,
            jobs.iter().map(|j| j.queue.as_str()),
            now_ms,
        )
        .await?;
        tx.commit().await.map_err(fault(what))?;
        Ok(Taken {
            jobs,
            held: room.held,
        })
    }

    /// [`super::leases`]'s pop, counted: popped jobs count as started.
    pub(super) async fn pop_limited(
        &self,
        queues: &[String],
        max: usize,
        now_ms: UnixMs,
    ) -> Result<Vec<Job>, StoreError> {
        let what = "popping jobs of limited queues";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let room = count(&tx, queues, max, now_ms, false).await?;
        let no_subscription: Option<i64> = None;
        let rows = query(
            &tx,
            &POP,
            &[
                &queues,
                &limit(max),
                &no_subscription,
                &false,
                &room.caps,
                &time(now_ms),
                &true,
            ],
        )
        .await
        .map_err(fault(what))?;
        let (mut jobs, parents) = popped(&rows)?;
        let settled = settle(&tx, &parents, now_ms).await?;
        record(
            &tx,
            &room.rated,
            jobs.iter().map(|j| j.spec.queue.as_str()),
            now_ms,
        )
        .await?;
        tx.commit().await.map_err(fault(what))?;
        self.announce_settled(settled);
        if !jobs.is_empty() {
            self.announce(Wakeup::Released);
        }
        jobs.sort_by_key(|job| (std::cmp::Reverse(job.spec.priority), job.id));
        Ok(jobs)
    }
}

/// Locks the limited queues of `queues` and counts what they leave room for, for a take of up
/// to `max` (`in_flight`: the jobs will be in flight, so concurrency counts too).
async fn count<C: GenericClient>(
    client: &C,
    queues: &[String],
    max: usize,
    now_ms: UnixMs,
    in_flight: bool,
) -> Result<Room, StoreError> {
    let what = "counting what limited queues leave room for";
    let locked = query(client, &LOCK_LIMITED, &[&queues])
        .await
        .map_err(fault(what))?;
    let mut limited: HashMap<String, QueueConfig> = HashMap::new();
    for row in &locked {
        limited.insert(row.get(0), queue_config_of(row.get(1))?);
    }
    // A new statement, so a new snapshot: every take that held a lock before is seen.
    let names: Vec<&str> = limited.keys().map(String::as_str).collect();
    let since: Vec<i64> = names
        .iter()
        .map(|name| match &limited[*name].rate {
            Some(rate) => since(rate, now_ms),
            None => i64::MAX,
        })
        .collect();
    let counted = query(client, &COUNT, &[&names, &since])
        .await
        .map_err(fault(what))?;
    let mut room: HashMap<String, u64> = HashMap::new();
    let mut held = LimitHold::default();
    let mut rated = HashMap::new();
    for row in &counted {
        let name: String = row.get(0);
        let config = &limited[&name];
        let mut free = u64::MAX;
        if let (Some(limit), true) = (config.concurrency, in_flight) {
            let flying = untime(row.get(1));
            free = free.min(u64::from(limit).saturating_sub(flying));
            held.in_flight |= free == 0;
        }
        if let Some(rate) = config.rate {
            let used = untime(row.get(2));
            let left = u64::from(rate.limit).saturating_sub(used);
            if left == 0 {
                let until = row
                    .get::<_, Option<i64>>(3)
                    .map(|end| untime(end).saturating_add(rate.period_ms));
                held = held.and(LimitHold {
                    in_flight: false,
                    until_ms: until,
                });
            }
            free = free.min(left);
            rated.insert(name.clone(), rate);
        }
        room.insert(name, free);
    }
    let caps = queues
        .iter()
        .map(|q| {
            let free = room.get(q).copied().unwrap_or(u64::MAX);
            limit(usize::try_from(free).unwrap_or(usize::MAX).min(max))
        })
        .collect();
    Ok(Room { caps, held, rated })
}

/// Adds the starts of the rate-limited queues among `taken` (a queue per job handed out) to
/// their buckets, and forgets their buckets that no take can count any more
/// ([`RateLimit::forget_before`]).
async fn record<'a, C: GenericClient>(
    client: &C,
    rated: &HashMap<String, RateLimit>,
    taken: impl Iterator<Item = &'a str>,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for queue in taken.filter(|q| rated.contains_key(*q)) {
        *counts.entry(queue).or_default() += 1;
    }
    if counts.is_empty() {
        return Ok(());
    }
    let (mut queues, mut buckets, mut widths, mut adds, mut before) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (queue, count) in counts {
        let rate = &rated[queue];
        queues.push(queue);
        buckets.push(time(rate.bucket_of(now_ms)));
        widths.push(time(rate.bucket_ms()));
        adds.push(count);
        before.push(time(rate.forget_before(now_ms)));
    }
    execute(
        client,
        &RECORD,
        &[&queues, &buckets, &widths, &adds, &before],
    )
    .await
    .map_err(fault("recording the starts of rate-limited queues"))?;
    Ok(())
}

statements! {
    ANY_LIMITED = "SELECT 1 FROM tenax_queues WHERE name = ANY($1::text[]) AND limited AND NOT paused";
    STARTED = "SELECT coalesce(sum(count), 0)::bigint FROM tenax_queue_starts
         WHERE queue = $1 AND bucket + width > $2";
    LOCK_LIMITED = "SELECT name, config FROM tenax_queues
         WHERE name = ANY($1::text[]) AND limited AND NOT paused
         ORDER BY name FOR UPDATE";
    COUNT = "SELECT l.name,
             (SELECT count(*) FROM tenax_jobs j WHERE j.queue = l.name AND j.status = 2),
             (SELECT coalesce(sum(s.count), 0)::bigint FROM tenax_queue_starts s
                 WHERE s.queue = l.name AND s.bucket + s.width > l.since),
             (SELECT min(s.bucket + s.width) FROM tenax_queue_starts s
                 WHERE s.queue = l.name AND s.bucket + s.width > l.since)
         FROM unnest($1::text[], $2::bigint[]) AS l(name, since)";
    RECORD = "WITH forgotten AS (
             DELETE FROM tenax_queue_starts s
             USING unnest($1::text[], $5::bigint[]) AS f(queue, before)
             WHERE s.queue = f.queue AND s.bucket + s.width <= f.before
         )
         INSERT INTO tenax_queue_starts (queue, bucket, width, count)
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])
         ON CONFLICT (queue, bucket) DO UPDATE
         SET count = tenax_queue_starts.count + excluded.count,
             width = greatest(tenax_queue_starts.width, excluded.width)";
}
