//! Enqueue: new jobs in one transaction, ids from a sequence, unique keys held by a unique
//! index on the table of unfinished jobs; stored only while the queue facts they were made from
//! are current ([`super::facts`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{Enqueued, JobId, JobState, KeyHolder, OnDuplicate, Status};
use tenax_core::store::{FactsSeen, Insert, JobInserts, QueueFacts, StoreError};
use tokio_postgres::Row;

use super::rows::{id, json, limit, status_code, status_of, time, unid, untime};
use super::statements::statements;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, RETRIES, combiner, facts, fault, is_conflict};

/// What becomes of one insert.
enum Plan {
    /// Not stored: its parent was not created, or its subscription is gone.
    Skip,
    /// A stored job holds its key: answered with it.
    Existing(Enqueued),
    /// Stored, as the `n`th new job of the request.
    Fresh(usize),
    /// An earlier insert of the request (the `n`th new job, at this index) holds its key.
    Earlier(usize, usize),
}

#[async_trait]
impl JobInserts for PostgresStore {
    /// From this server's cache ([`super::facts`]), else one statement.
    async fn queue_facts(&self, queue: &str) -> Result<Arc<QueueFacts>, StoreError> {
        if let Some(facts) = self.facts.get(queue) {
            return Ok(facts);
        }
        let facts = Arc::new(facts::read(&self.client().await?, queue).await?);
        self.facts.keep(queue, facts.clone());
        Ok(facts)
    }

    async fn insert_jobs(
        &self,
        jobs: Vec<Insert>,
        on_duplicate: OnDuplicate,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Vec<Option<Enqueued>>, StoreError> {
        let inserted = if combiner::is_shared(&jobs) {
            self.combiner.insert(jobs, seen, now_ms).await
        } else {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let started = std::time::Instant::now();
                match self.try_insert(&jobs, on_duplicate, seen, now_ms).await {
                    // Another transaction took a key between our look and our insert: again.
                    Err(error) if is_conflict(&error) && attempt < RETRIES => continue,
                    done => {
                        if let (Some(commits), Ok(_)) = (&self.commits, &done) {
                            commits.committed(1, started.elapsed());
                        }
                        break done;
                    }
                }
            }
        };
        if matches!(inserted, Err(StoreError::FactsChanged)) {
            self.facts.forget();
        }
        inserted
    }
}

impl PostgresStore {
    async fn try_insert(
        &self,
        jobs: &[Insert],
        on_duplicate: OnDuplicate,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Vec<Option<Enqueued>>, StoreError> {
        let what = "enqueueing jobs";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let (results, made) = insert_in(&tx, jobs, on_duplicate, seen, now_ms).await?;
        tx.commit().await.map_err(fault(what))?;
        self.announce_made(made);
        Ok(results)
    }

    /// Wakes whoever waits for the jobs an insert made.
    pub(super) fn announce_made(&self, made: Made) {
        if made.ready {
            self.announce(Wakeup::Ready);
        }
        if made.scheduled {
            self.announce(Wakeup::Schedule);
        }
    }
}

/// What new jobs an insert made: ready ones, scheduled ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct Made {
    pub ready: bool,
    pub scheduled: bool,
}

/// Adds jobs as [`JobInserts::insert_jobs`] says, in the transaction `tx` (which the caller
/// commits, and then announces what was [`Made`]).
pub async fn insert_in(
    tx: &deadpool_postgres::Transaction<'_>,
    jobs: &[Insert],
    on_duplicate: OnDuplicate,
    seen: FactsSeen,
    now_ms: UnixMs,
) -> Result<(Vec<Option<Enqueued>>, Made), StoreError> {
    {
        let what = "enqueueing jobs";

        // Subscriptions the deliveries are for, locked against deletion until the commit.
        let owners: Vec<i64> = jobs
            .iter()
            .filter_map(|j| j.owner.map(|o| id(o.0)))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let live_owners: HashSet<i64> = if owners.is_empty() {
            HashSet::new()
        } else {
            query(tx, &LOCK_OWNERS, &[&owners])
                .await
                .map_err(fault(what))?
                .iter()
                .map(|r| r.get(0))
                .collect()
        };

        // Stored jobs holding the keys asked for.
        let (key_queues, keys): (Vec<&str>, Vec<&str>) = jobs
            .iter()
            .filter_map(|j| Some((j.job.queue.as_str(), j.job.unique_key.as_deref()?)))
            .unzip();
        let holders = key_holders(tx, &key_queues, &keys).await?;

        // Which inserts are stored, in order; a child only after its created parent.
        let mut plans: Vec<Plan> = Vec::with_capacity(jobs.len());
        let mut claimed: HashMap<(&str, &str), (usize, usize)> = HashMap::new();
        let mut fresh = 0;
        for (index, insert) in jobs.iter().enumerate() {
            if let Some(parent) = insert.parent {
                let created = parent < index && matches!(plans.get(parent), Some(Plan::Fresh(_)));
                if !created {
                    plans.push(Plan::Skip);
                    continue;
                }
            }
            if insert
                .owner
                .is_some_and(|o| !live_owners.contains(&id(o.0)))
            {
                plans.push(Plan::Skip);
                continue;
            }
            if let Some(key) = insert.job.unique_key.as_deref() {
                let queue = insert.job.queue.as_str();
                let stored = holders.get(&(queue.to_owned(), key.to_owned()));
                let earlier = claimed.get(&(queue, key)).copied();
                let holder = stored
                    .map(|held| KeyHolder::Job(held.id))
                    .or(earlier.map(|(_, at)| KeyHolder::Earlier(at)));
                if let Some(holder) = holder {
                    if on_duplicate == OnDuplicate::Refuse {
                        return Err(StoreError::Duplicate {
                            index,
                            queue: queue.to_owned(),
                            key: key.to_owned(),
                            holder,
                        });
                    }
                    plans.push(match (stored, earlier) {
                        (Some(held), _) => Plan::Existing(held.clone()),
                        (None, Some((n, at))) => Plan::Earlier(n, at),
                        (None, None) => Plan::Skip,
                    });
                    continue;
                }
                claimed.insert((queue, key), (fresh, index));
            }
            plans.push(Plan::Fresh(fresh));
            fresh += 1;
        }
        if fresh == 0 {
            let results = plans
                .into_iter()
                .map(|plan| match plan {
                    Plan::Existing(held) => Some(held),
                    _ => None,
                })
                .collect();
            return Ok((results, Made::default()));
        }

        let ids: Vec<i64> = query(tx, &NEXT_IDS, &[&limit(fresh)])
            .await
            .map_err(fault(what))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut rows = Columns::with_capacity(fresh);
        let mut results = Vec::with_capacity(jobs.len());
        let (mut any_ready, mut any_scheduled) = (false, false);
        for (index, plan) in plans.iter().enumerate() {
            results.push(match plan {
                Plan::Skip => None,
                Plan::Existing(held) => Some(held.clone()),
                Plan::Earlier(n, at) => {
                    let job = &jobs[*at].job;
                    let state = JobState::new(job.run_at_ms, now_ms);
                    Some(Enqueued {
                        id: JobId(unid(ids[*n])),
                        created: false,
                        status: state.status,
                        run_at_ms: state.run_at_ms,
                    })
                }
                Plan::Fresh(n) => {
                    let insert = &jobs[index];
                    let parent = insert.parent.and_then(|p| match plans.get(p) {
                        Some(Plan::Fresh(m)) => Some(ids[*m]),
                        _ => None,
                    });
                    let state = JobState::new(insert.job.run_at_ms, now_ms);
                    any_ready |= state.status == Status::Ready;
                    any_scheduled |= state.status == Status::Scheduled;
                    rows.push(insert, parent, &state);
                    Some(Enqueued {
                        id: JobId(unid(ids[*n])),
                        created: true,
                        status: state.status,
                        run_at_ms: state.run_at_ms,
                    })
                }
            });
        }
        let version = id(seen.0);
        let params = rows.params([&ids, &version]);
        let stored = execute(tx, &INSERT_ROWS, &params)
            .await
            .map_err(fault(what))?;
        if stored == 0 {
            // The version moved on since `seen`: rolled back as `tx` goes.
            return Err(StoreError::FactsChanged);
        }
        let made = Made {
            ready: any_ready,
            scheduled: any_scheduled,
        };
        Ok((results, made))
    }
}

/// The unfinished jobs holding the unique keys `keys[i]` of queues `queues[i]`, by (queue,
/// key), as an enqueue answers with them.
pub async fn key_holders<C: deadpool_postgres::GenericClient, T: AsRef<str> + Sync>(
    client: &C,
    queues: &[T],
    keys: &[T],
) -> Result<HashMap<(String, String), Enqueued>, StoreError> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let queues: Vec<&str> = queues.iter().map(AsRef::as_ref).collect();
    let keys: Vec<&str> = keys.iter().map(AsRef::as_ref).collect();
    query(client, &KEY_HOLDERS, &[&queues, &keys])
        .await
        .map_err(fault("looking up unique keys"))?
        .iter()
        .map(holder_of)
        .collect()
}

/// A stored job holding a key: (queue, key) and what an enqueue answers with it.
fn holder_of(row: &Row) -> Result<((String, String), Enqueued), StoreError> {
    Ok((
        (row.get(0), row.get(1)),
        Enqueued {
            id: JobId(unid(row.get(2))),
            created: false,
            status: status_of(row.get(3))?,
            run_at_ms: untime(row.get(4)),
        },
    ))
}

/// The columns of a new job but its id, as named in `tenax_jobs`, in [`Columns`] order.
macro_rules! new_job_columns {
    () => {
        "queue, kind, payload, priority, unique_key, created_at, expires_at, origin, parent,
         traceparent, policy, status, run_at, payload_sealed"
    };
}

/// [`new_job_columns!`] as the arrays `$1`…`$14` of [`Columns::params`].
macro_rules! new_job_arrays {
    () => {
        "$1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::bigint[],
         $7::bigint[], $8::text[], $9::bigint[], $10::text[], $11::text[], $12::smallint[],
         $13::bigint[], $14::boolean[]"
    };
}

type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);

/// New jobs as one array per column, for one `INSERT … SELECT FROM unnest(…)`.
#[derive(Debug, Default)]
pub struct Columns {
    queue: Vec<String>,
    kind: Vec<String>,
    payload: Vec<String>,
    priority: Vec<i32>,
    unique_key: Vec<Option<String>>,
    created_at: Vec<i64>,
    expires_at: Vec<Option<i64>>,
    origin: Vec<Option<String>>,
    parent: Vec<Option<i64>>,
    traceparent: Vec<Option<String>>,
    policy: Vec<Option<String>>,
    status: Vec<i16>,
    run_at: Vec<i64>,
    payload_sealed: Vec<bool>,
}

impl Columns {
    /// The arrays as `$1`…`$14` of [`INSERT_ROWS`] or [`INSERT_SHARED`], then `more`.
    pub fn params<'a, const N: usize>(&'a self, more: [Param<'a>; N]) -> Vec<Param<'a>> {
        let arrays: [Param<'a>; 14] = [
            &self.queue,
            &self.kind,
            &self.payload,
            &self.priority,
            &self.unique_key,
            &self.created_at,
            &self.expires_at,
            &self.origin,
            &self.parent,
            &self.traceparent,
            &self.policy,
            &self.status,
            &self.run_at,
            &self.payload_sealed,
        ];
        arrays.into_iter().chain(more).collect()
    }

    pub fn with_capacity(n: usize) -> Self {
        Self {
            queue: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            ..Self::default()
        }
    }

    pub fn push(&mut self, insert: &Insert, parent: Option<i64>, state: &JobState) {
        let job = &insert.job;
        self.queue.push(job.queue.clone());
        self.kind.push(job.kind.clone());
        self.payload.push(job.payload.get().to_owned());
        self.priority.push(job.priority);
        self.unique_key.push(job.unique_key.clone());
        self.created_at.push(time(job.created_at_ms));
        self.expires_at.push(job.expires_at_ms.map(time));
        self.origin.push(job.origin.clone());
        self.parent.push(parent);
        self.traceparent.push(job.traceparent.clone());
        self.policy.push(job.policy.as_ref().map(json));
        self.status.push(status_code(state.status));
        self.run_at.push(time(state.run_at_ms));
        self.payload_sealed.push(job.payload_sealed);
    }
}

statements! {
    /// Stores the rows of [`Columns::params`] with their ids (`$15`), all of them if the facts
    /// version is still `$16`, else none.
    pub INSERT_ROWS = concat!(
        "INSERT INTO tenax_jobs (",
        new_job_columns!(),
        ", id) SELECT * FROM unnest(",
        new_job_arrays!(),
        ", $15::bigint[]) WHERE (SELECT version FROM tenax_facts) = $16"
    );

    /// Stores the rows of [`Columns::params`] whose facts version (`$15`, one per row) is still
    /// the current one, with ids from the sequence in row order. Answers the current version and
    /// the new ids, ascending (so in row order).
    pub INSERT_SHARED = concat!(
        "WITH facts AS (SELECT version FROM tenax_facts),
          stored AS (INSERT INTO tenax_jobs (",
        new_job_columns!(),
        ", id) SELECT ",
        new_job_columns!(),
        ", nextval('tenax_job_ids') FROM unnest(",
        new_job_arrays!(),
        ", $15::bigint[]) AS u(",
        new_job_columns!(),
        ", seen) WHERE u.seen = (SELECT version FROM facts) RETURNING id)
     SELECT (SELECT version FROM facts), ARRAY(SELECT id FROM stored ORDER BY id)"
    );
    LOCK_OWNERS = "SELECT id FROM tenax_subscriptions WHERE id = ANY($1) FOR SHARE";
    NEXT_IDS = "SELECT nextval('tenax_job_ids') FROM generate_series(1, $1::bigint)";
    KEY_HOLDERS = "SELECT j.queue, j.unique_key, j.id, j.status, j.run_at
         FROM unnest($1::text[], $2::text[]) AS k(queue, key)
         JOIN tenax_jobs j ON j.queue = k.queue AND j.unique_key = k.key";
}
