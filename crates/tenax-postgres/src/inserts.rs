//! Enqueue: new jobs in one transaction, ids from a sequence, unique keys held by a unique
//! index on the table of unfinished jobs; stored only while the queue facts they were made from
//! are current ([`super::facts`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::dependency::lost_parent_reason;
use tenax_core::model::{
    After, Enqueued, JobId, JobState, KeyHolder, OnDuplicate, OnParentDead, Status,
};
use tenax_core::store::{FactsSeen, Insert, JobInserts, QueueFacts, StoreError};
use tokio_postgres::Row;

use super::dependents::{CANCEL_WAITING, CANCELLED};
use super::rows::{
    count, id, json, limit, on_parent_dead_code, status_code, status_of, time, unid, untime,
};
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

        // The stored jobs the new ones wait for, locked, before the ids are drawn.
        let waits = jobs.iter().any(|j| !j.after.is_empty());
        let parents = if waits {
            lock_parents(tx, jobs, &plans).await?
        } else {
            HashMap::new()
        };

        let ids: Vec<i64> = query(tx, &NEXT_IDS, &[&limit(fresh)])
            .await
            .map_err(fault(what))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let links = waits
            .then(|| Links::of(jobs, &plans, &ids, &parents))
            .transpose()?;
        let mut rows = Columns::with_capacity(fresh);
        let mut results = Vec::with_capacity(jobs.len());
        let (mut any_ready, mut any_scheduled) = (false, false);
        // Each fresh job's state: waiting, or as it would be without parents.
        let state_of = |index: usize| -> JobState {
            let job = &jobs[index].job;
            let mut state = JobState::new(job.run_at_ms, now_ms);
            if let Some(fate) = links.as_ref().and_then(|l| l.fates[index].as_ref()) {
                match fate {
                    Fate::Waiting(_) => state.status = Status::Waiting,
                    Fate::Cancelled(_) => state.status = CANCELLED,
                }
            }
            state
        };
        for (index, plan) in plans.iter().enumerate() {
            results.push(match plan {
                Plan::Skip => None,
                Plan::Existing(held) => Some(held.clone()),
                Plan::Earlier(n, at) => {
                    let state = state_of(*at);
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
                    let state = state_of(index);
                    any_ready |= state.status == Status::Ready;
                    any_scheduled |= state.status == Status::Scheduled;
                    // A job cancelled at once is written waiting, then moved (below).
                    let mut written = state.clone();
                    if written.status == CANCELLED {
                        written.status = Status::Waiting;
                    }
                    rows.push(insert, parent, &written);
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
        let stored = match &links {
            None => execute(tx, &INSERT_ROWS, &rows.params([&ids, &version])).await,
            Some(links) => {
                let params = rows.params([
                    &ids,
                    &version,
                    &links.after,
                    &links.on_parent_dead,
                    &links.pending,
                    &links.has_children,
                ]);
                execute(tx, &INSERT_WAITING_ROWS, &params).await
            }
        }
        .map_err(fault(what))?;
        if stored == 0 {
            // The version moved on since `seen`: rolled back as `tx` goes.
            return Err(StoreError::FactsChanged);
        }
        if let Some(links) = &links {
            links.write(tx, now_ms).await?;
        }
        let made = Made {
            ready: any_ready,
            scheduled: any_scheduled,
        };
        Ok((results, made))
    }
}

/// How a stored job that a new (or resumed, [`super::dependents::resume`]) one waits for
/// stands, read under its row's lock ([`lock_stands`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stands {
    Unfinished,
    Completed,
    /// Dead (or cancelled): it will not complete.
    Lost,
}

/// What a new job with parents starts as, at index of the request; `None` for a job without
/// parents, or whose parents are all done.
#[derive(Debug, Clone)]
enum Fate {
    /// Waiting for this many of its parents.
    Waiting(u32),
    /// Cancelled at once, because of this parent.
    Cancelled(i64),
}

/// The parent named by `after` of insert `index`, resolved: a stored job's id, or a new one's
/// index in the request. Refuses a later or unstored insert.
fn resolve(index: usize, after: After, plans: &[Plan]) -> Result<Result<JobId, usize>, StoreError> {
    match after {
        After::Job(job) => Ok(Ok(job)),
        After::Earlier(at) if at >= index => Err(StoreError::Refused(format!(
            "the job at {index} of the enqueue waits for the job at {at}, which does not come \
             before it"
        ))),
        After::Earlier(at) => match &plans[at] {
            Plan::Fresh(_) => Ok(Err(at)),
            Plan::Earlier(_, holder) => Ok(Err(*holder)),
            Plan::Existing(held) => Ok(Ok(held.id)),
            Plan::Skip => Err(StoreError::Refused(format!(
                "the job at {index} of the enqueue waits for the job at {at}, which is not \
                 stored"
            ))),
        },
    }
}

/// Locks the stored jobs that the new ones of `plans` wait for against their end, flags them as
/// having children, and reads how they stand ([`lock_stands`]). Refuses an unknown one, naming
/// the first insert and position that names it; nothing is stored then.
async fn lock_parents(
    tx: &deadpool_postgres::Transaction<'_>,
    jobs: &[Insert],
    plans: &[Plan],
) -> Result<HashMap<i64, Stands>, StoreError> {
    let what = "locking the jobs new ones wait for";
    let mut named: Vec<(i64, usize, usize)> = Vec::new();
    for (index, insert) in jobs.iter().enumerate() {
        if !matches!(plans[index], Plan::Fresh(_)) {
            continue;
        }
        for (position, after) in insert.after.iter().enumerate() {
            if let Ok(job) = resolve(index, *after, plans)? {
                named.push((id(job.0), index, position));
            }
        }
    }
    let wanted: Vec<i64> = named.iter().map(|(job, _, _)| *job).collect();
    let found = lock_stands(tx, wanted, what).await?;
    if let Some((job, index, position)) = named.iter().find(|(job, _, _)| !found.contains_key(job))
    {
        return Err(StoreError::UnknownParent {
            index: *index,
            position: *position,
            id: JobId(unid(*job)),
        });
    }
    Ok(found)
}

/// Locks the stored jobs of `wanted` against their end (`FOR KEY SHARE`: a heartbeat passes, a
/// take skips the row until the commit), flags them as having children, and reads how they
/// stand. A job that moves between the tables meanwhile (it ends, or is replayed) is looked for
/// again where it went. A job that is not stored is not in the answer.
///
/// The lock is what lets a job start waiting for an unfinished one: the parent's end either
/// waits for this transaction's commit (and then finds the waiting child, [`super::dependents`])
/// or came first (and is read as it ended).
pub(super) async fn lock_stands<C: deadpool_postgres::GenericClient>(
    client: &C,
    mut wanted: Vec<i64>,
    what: &'static str,
) -> Result<HashMap<i64, Stands>, StoreError> {
    wanted.sort_unstable();
    wanted.dedup();
    let mut found: HashMap<i64, Stands> = HashMap::with_capacity(wanted.len());
    let completed = status_code(Status::Completed);
    for (sql, unfinished) in [
        (LOCK_LIVE_PARENTS, true),
        (LOCK_FINISHED_PARENTS, false),
        (LOCK_LIVE_PARENTS, true),
    ] {
        if wanted.is_empty() {
            break;
        }
        for row in query(client, &sql, &[&wanted]).await.map_err(fault(what))? {
            // A finished job that did not complete (dead, cancelled) will not complete.
            let stands = if unfinished {
                Stands::Unfinished
            } else if row.get::<_, i16>(1) == completed {
                Stands::Completed
            } else {
                Stands::Lost
            };
            found.insert(row.get(0), stands);
        }
        wanted.retain(|job| !found.contains_key(job));
    }
    Ok(found)
}

/// What the new jobs of a request with parents write besides their rows: their parents and
/// counts (one array per column, in the order of [`Columns`]), the edges, and the jobs
/// cancelled at once.
#[derive(Debug, Default)]
struct Links {
    /// Per insert of the request (`None`: not a fresh job, or nothing to wait for).
    fates: Vec<Option<Fate>>,
    after: Vec<Option<String>>,
    on_parent_dead: Vec<i16>,
    pending: Vec<Option<i32>>,
    has_children: Vec<bool>,
    edge_parents: Vec<i64>,
    edge_children: Vec<i64>,
    cancelled: Vec<i64>,
    reasons: Vec<String>,
}

impl Links {
    /// The links of the fresh jobs of `plans` (ids `ids` in their order), their stored
    /// parents standing as `parents` says, by the rules of [`tenax_core::model::dependency`]:
    /// a completed parent is done; a lost one cancels a job that cancels on it (which is then
    /// lost to the later jobs of the request) and is done for one that runs anyway.
    fn of(
        jobs: &[Insert],
        plans: &[Plan],
        ids: &[i64],
        parents: &HashMap<i64, Stands>,
    ) -> Result<Self, StoreError> {
        let mut links = Links {
            fates: vec![None; jobs.len()],
            ..Self::default()
        };
        let fresh_id = |at: usize| match plans[at] {
            Plan::Fresh(n) => Some(ids[n]),
            _ => None,
        };
        // Fresh jobs that are parents of later ones, by index.
        let mut parent_of_later: HashSet<usize> = HashSet::new();
        for (index, insert) in jobs.iter().enumerate() {
            if !matches!(plans[index], Plan::Fresh(_)) {
                continue;
            }
            for after in &insert.after {
                if let Err(at) = resolve(index, *after, plans)? {
                    parent_of_later.insert(at);
                }
            }
        }
        for (index, insert) in jobs.iter().enumerate() {
            let Some(child) = fresh_id(index) else {
                continue;
            };
            let mut after: Vec<i64> = Vec::with_capacity(insert.after.len());
            let mut seen: HashSet<i64> = HashSet::new();
            let (mut pending, mut lost) = (0u32, None);
            for named in &insert.after {
                let (parent, stands) = match resolve(index, *named, plans)? {
                    Ok(job) => {
                        let parent = id(job.0);
                        (
                            parent,
                            parents.get(&parent).copied().unwrap_or(Stands::Lost),
                        )
                    }
                    Err(at) => {
                        let parent = fresh_id(at).ok_or_else(|| {
                            StoreError::Corrupt(format!("insert {at} resolved without an id"))
                        })?;
                        let stands = match links.fates[at] {
                            Some(Fate::Cancelled(_)) => Stands::Lost,
                            _ => Stands::Unfinished,
                        };
                        (parent, stands)
                    }
                };
                after.push(parent);
                if !seen.insert(parent) {
                    // Named twice: counted once.
                    continue;
                }
                links.edge_parents.push(parent);
                links.edge_children.push(child);
                match stands {
                    Stands::Unfinished => pending += 1,
                    Stands::Completed => {}
                    Stands::Lost => {
                        if lost.is_none() {
                            lost = Some(parent);
                        }
                    }
                }
            }
            let cancels = insert.job.on_parent_dead == OnParentDead::Cancel;
            let fate = match lost {
                Some(parent) if cancels => Some(Fate::Cancelled(parent)),
                _ if pending > 0 => Some(Fate::Waiting(pending)),
                _ => None,
            };
            if let Some(Fate::Cancelled(parent)) = fate {
                links.cancelled.push(child);
                links.reasons.push(lost_parent_reason(JobId(unid(parent))));
            }
            links
                .after
                .push((!after.is_empty()).then(|| array_text(&after)));
            links
                .on_parent_dead
                .push(on_parent_dead_code(insert.job.on_parent_dead));
            links.pending.push(match fate {
                Some(Fate::Waiting(n)) => Some(count(n)),
                _ => None,
            });
            links.has_children.push(parent_of_later.contains(&index));
            links.fates[index] = fate;
        }
        Ok(links)
    }

    /// Writes the edges, and moves the jobs cancelled at once where the finished ones are.
    async fn write(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        now_ms: UnixMs,
    ) -> Result<(), StoreError> {
        let what = "linking jobs to the jobs they wait for";
        if !self.edge_parents.is_empty() {
            execute(
                tx,
                &INSERT_EDGES,
                &[&self.edge_parents, &self.edge_children],
            )
            .await
            .map_err(fault(what))?;
        }
        if !self.cancelled.is_empty() {
            query(
                tx,
                &CANCEL_WAITING,
                &[
                    &self.cancelled,
                    &self.reasons,
                    &status_code(CANCELLED),
                    &time(now_ms),
                ],
            )
            .await
            .map_err(fault(what))?;
        }
        Ok(())
    }
}

/// Ids as the text of a PostgreSQL array (`{1,2}`): an array per row does not fit `unnest`.
fn array_text(ids: &[i64]) -> String {
    let items: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("{{{}}}", items.join(","))
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
    /// Stores the rows of [`Columns::params`] as [`INSERT_ROWS`] does, with their links
    /// ([`Links`]): `after_ids` as array texts (`$17`), `on_parent_dead` (`$18`), `pending`
    /// (`$19`) and `has_children` (`$20`).
    INSERT_WAITING_ROWS = concat!(
        "INSERT INTO tenax_jobs (",
        new_job_columns!(),
        ", id, after_ids, on_parent_dead, pending, has_children) SELECT ",
        new_job_columns!(),
        ", id, after_ids::bigint[], on_parent_dead, pending, has_children FROM unnest(",
        new_job_arrays!(),
        ", $15::bigint[], $17::text[], $18::smallint[], $19::integer[], $20::boolean[]) AS u(",
        new_job_columns!(),
        ", id, after_ids, on_parent_dead, pending, has_children)
         WHERE (SELECT version FROM tenax_facts) = $16"
    );
    /// The unfinished jobs of `$1`, locked against their end, flagged as having children:
    /// (id, status) of each ([`lock_parents`]).
    LOCK_LIVE_PARENTS = "WITH locked AS (
             SELECT id, status, has_children FROM tenax_jobs WHERE id = ANY($1::bigint[])
             ORDER BY id FOR KEY SHARE
         ), flagged AS (
             UPDATE tenax_jobs j SET has_children = true FROM locked
             WHERE j.id = locked.id AND NOT locked.has_children
         )
         SELECT id, status FROM locked";
    /// The finished jobs of `$1`, locked against their deletion, flagged as having children:
    /// (id, status) of each ([`lock_parents`]).
    LOCK_FINISHED_PARENTS = "WITH locked AS (
             SELECT id, status, has_children FROM tenax_finished WHERE id = ANY($1::bigint[])
             ORDER BY id FOR KEY SHARE
         ), flagged AS (
             UPDATE tenax_finished f SET has_children = true FROM locked
             WHERE f.id = locked.id AND NOT locked.has_children
         )
         SELECT id, status FROM locked";
    /// The edges (`$1[i]`, `$2[i]`) of new jobs.
    INSERT_EDGES = "INSERT INTO tenax_edges (parent, child)
         SELECT * FROM unnest($1::bigint[], $2::bigint[]) ON CONFLICT DO NOTHING";
    LOCK_OWNERS = "SELECT id FROM tenax_subscriptions WHERE id = ANY($1) FOR SHARE";
    NEXT_IDS = "SELECT nextval('tenax_job_ids') FROM generate_series(1, $1::bigint)";
    KEY_HOLDERS = "SELECT j.queue, j.unique_key, j.id, j.status, j.run_at
         FROM unnest($1::text[], $2::text[]) AS k(queue, key)
         JOIN tenax_jobs j ON j.queue = k.queue AND j.unique_key = k.key";
}
