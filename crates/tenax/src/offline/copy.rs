//! `tenax copy`: every record of one stopped store into another (a data directory into a
//! PostgreSQL database, or back), with ids kept, then counted on both sides.
//!
//! What moves: API tokens, queues' settings, endpoints' delivery states, subscriptions (their
//! secrets opened with the source's keys and sealed with the target's), schedules, every job
//! with its state, errors and (deliveries) attempts, and the activity per minute a database
//! keeps. A job in flight arrives ready, as a restart of the embedded store leaves it: its
//! lease is not carried over. An encrypted queue's payloads are opened with the source's data
//! key and sealed with the target's. Rate limits' recent starts are not moved: they are
//! counted afresh.
//!
//! The target must hold nothing (unless told): ids are kept, and a record whose id is taken
//! stops the copy. Jobs go in ascending id order, in batches; each batch is one commit.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context as _;
use tenax_core::clock::Clock;
use tenax_core::engine::reseal_job;
use tenax_core::model::subscription::subscription_of_queue;
use tenax_core::model::{JobFilter, JobId, Page, QueueCounts};
use tenax_core::store::{ImportedJob, Store};

use super::OfflineError;

/// How many jobs one commit of the target stores.
const BATCH: usize = 1_000;

/// What a copy moved, and the counts that prove it.
#[derive(Debug, Default)]
pub struct Copied {
    pub tokens: usize,
    pub queues: usize,
    pub endpoints: usize,
    pub subscriptions: usize,
    pub schedules: usize,
    pub batches: usize,
    pub jobs: u64,
    pub activity_minutes: usize,
    /// Per queue: (unfinished, completed, dead) on the source and on the target.
    pub counts: BTreeMap<String, (Tally, Tally)>,
}

/// A queue's jobs by what a copy keeps of their status: unfinished (scheduled, ready or in
/// flight: a due scheduled job may read as ready on one side and scheduled on the other, and an
/// in-flight one arrives ready), completed, dead.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub unfinished: u64,
    pub completed: u64,
    pub dead: u64,
}

impl From<&QueueCounts> for Tally {
    fn from(c: &QueueCounts) -> Self {
        Self {
            unfinished: c.scheduled + c.ready + c.in_flight,
            completed: c.completed,
            dead: c.dead,
        }
    }
}

/// Refuses a target that holds anything, naming what it holds.
pub async fn ensure_empty(target: &dyn Store) -> Result<(), OfflineError> {
    let what = "looking at what the target holds";
    let mut held = Vec::new();
    let jobs: u64 = target
        .counts()
        .await
        .context(what)?
        .iter()
        .map(|c| c.scheduled + c.ready + c.in_flight + c.completed + c.dead)
        .sum();
    let mut note = |n: usize, name: &str| {
        if n > 0 {
            held.push(format!("{n} {name}"));
        }
    };
    note(usize::try_from(jobs).unwrap_or(usize::MAX), "jobs");
    note(target.queues().await.context(what)?.len(), "queues");
    note(
        target.subscriptions(None).await.context(what)?.len(),
        "subscriptions",
    );
    note(target.tokens().await.context(what)?.len(), "tokens");
    note(target.schedules().await.context(what)?.len(), "schedules");
    note(
        target.batches(None, 1).await.context(what)?.len(),
        "batches",
    );
    if held.is_empty() {
        return Ok(());
    }
    Err(OfflineError::Invalid(format!(
        "the target is not empty (it holds {}): copy into an empty one, or pass \
         --into-non-empty to add to it (a record whose id it holds then stops the copy)",
        held.join(", ")
    )))
}

/// Copies everything `source` holds into `target`, then counts both.
pub async fn copy(source: &dyn Store, target: &dyn Store) -> anyhow::Result<Copied> {
    let mut copied = Copied::default();

    for token in source.tokens().await.context("reading the tokens")? {
        let id = token.id;
        target
            .import_token(token)
            .await
            .with_context(|| format!("copying token {id}"))?;
        copied.tokens += 1;
    }

    for (name, _) in source.queues().await.context("reading the queues")? {
        // Only settings the source keeps: a queue listed for its jobs alone has none.
        let Some(config) = source.queue(&name).await.context("reading a queue")? else {
            continue;
        };
        target
            .update_queue(&name, &|_| Some(config.clone()))
            .await
            .with_context(|| format!("copying the settings of queue {name:?}"))?;
        copied.queues += 1;
    }

    for state in source.endpoints().await.context("reading the endpoints")? {
        target
            .update_endpoint(&state.origin, &|_| Some(state.clone()))
            .await
            .with_context(|| format!("copying the state of endpoint {}", state.origin))?;
        copied.endpoints += 1;
    }

    for subscription in source
        .subscriptions(None)
        .await
        .context("reading the subscriptions")?
    {
        let id = subscription.id;
        target
            .import_subscription(subscription)
            .await
            .with_context(|| format!("copying subscription {id}"))?;
        copied.subscriptions += 1;
    }

    for schedule in source.schedules().await.context("reading the schedules")? {
        let name = schedule.name.clone();
        target
            .update_schedule(&name, &|_| Some(schedule.clone()))
            .await
            .with_context(|| format!("copying schedule {name:?}"))?;
        copied.schedules += 1;
    }

    // Batches before their members: a member imported into a counting batch is counted.
    let mut after = None;
    loop {
        let page = source
            .batches(after, 500)
            .await
            .context("reading the batches")?;
        let Some(last) = page.last().map(|b| b.id) else {
            break;
        };
        for batch in page {
            let id = batch.id;
            target
                .import_batch(batch)
                .await
                .with_context(|| format!("copying batch {id}"))?;
            copied.batches += 1;
        }
        after = Some(last);
    }

    copied.jobs = copy_jobs(source, target).await?;

    let now_ms = Clock::System.now_ms();
    let minutes = source
        .activity(0, now_ms)
        .await
        .context("reading the activity")?;
    if !minutes.is_empty() {
        target
            .add_activity(&minutes)
            .await
            .context("copying the activity")?;
    }
    copied.activity_minutes = minutes.len();

    for counts in source.counts().await.context("counting the source")? {
        copied.counts.entry(counts.queue.clone()).or_default().0 = Tally::from(&counts);
    }
    for counts in target.counts().await.context("counting the target")? {
        copied.counts.entry(counts.queue.clone()).or_default().1 = Tally::from(&counts);
    }
    Ok(copied)
}

/// Every job, in id order, a batch per commit; returns how many.
async fn copy_jobs(source: &dyn Store, target: &dyn Store) -> anyhow::Result<u64> {
    let (from_key, to_key) = (source.payload_key(), target.payload_key());
    let everything = JobFilter::default();
    let mut after: Option<JobId> = None;
    let mut total = 0;
    loop {
        let page = source
            .list_jobs(&everything, Page::after(after, BATCH))
            .await
            .with_context(|| format!("reading the jobs after {after:?}"))?;
        let Some(last) = page.last().map(|j| j.id) else {
            return Ok(total);
        };
        let mut batch = Vec::with_capacity(page.len());
        for mut job in page {
            reseal_job(&mut job, from_key, to_key)
                .with_context(|| format!("moving job {}'s sealed payload and result", job.id))?;
            let attempts = if subscription_of_queue(&job.spec.queue).is_some() {
                source
                    .attempts(job.id)
                    .await
                    .with_context(|| format!("reading delivery {}'s attempts", job.id))?
            } else {
                Vec::new()
            };
            batch.push(ImportedJob::at_rest(job, attempts));
        }
        total += batch.len() as u64;
        target
            .import_jobs(batch)
            .await
            .with_context(|| format!("copying the jobs up to {last}"))?;
        after = Some(last);
    }
}

impl Copied {
    /// Whether every queue counts the same on both sides.
    pub fn matches(&self) -> bool {
        self.counts
            .values()
            .all(|(source, target)| source == target)
    }

    /// The copy in words: what moved, and each queue's counts on both sides.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "copied {} jobs, {} queue settings, {} subscriptions, {} schedules, {} batches, \
             {} tokens, {} endpoint states, {} minutes of activity",
            self.jobs,
            self.queues,
            self.subscriptions,
            self.schedules,
            self.batches,
            self.tokens,
            self.endpoints,
            self.activity_minutes
        );
        let width = self
            .counts
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(
            out,
            "{:width$}  {:>22}  {:>22}",
            "queue", "source (unf/comp/dead)", "target (unf/comp/dead)"
        );
        for (queue, (source, target)) in &self.counts {
            let mark = if source == target { "" } else { "  MISMATCH" };
            let _ = writeln!(
                out,
                "{queue:width$}  {:>22}  {:>22}{mark}",
                format!("{}/{}/{}", source.unfinished, source.completed, source.dead),
                format!("{}/{}/{}", target.unfinished, target.completed, target.dead),
            );
        }
        out
    }
}
