//! Replay, cancel (`super::cancel`) and delete.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    Cancelled, Checked, JobId, JobPeek, NotReplayed, Replay, Replayed, Selection,
};
use tenax_core::store::{DeleteCheck, JobCuration, StoreError};

use super::dependents::{End, Settled, resume, settle};
use super::filter::{Query, ids_param, selection_shapes};
use super::inserts::key_holders;
use super::rows::{id, json, peek_columns, peek_of, status_of, table_columns, time, unid};
use super::statements::{Prefix, prefixes, statements};
use super::transitions::query;
use super::wakeups::Wakeup;
use super::{PostgresStore, RETRIES, fault, is_conflict};

#[async_trait]
impl JobCuration for PostgresStore {
    /// Dead (and cancelled) jobs matching the selection move back to the table of unfinished jobs, ready,
    /// unless an unfinished job holds their unique key; every id named and not replayed is
    /// reported with the reason. The children that the replayed jobs cancelled wait for them
    /// again, in the same transaction ([`super::dependents::resume`]).
    async fn replay_jobs(&self, replay: &Replay, now_ms: UnixMs) -> Result<Replayed, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_replay(replay, now_ms).await {
                Err(error) if is_conflict(&error) && attempt < RETRIES => continue,
                done => return done,
            }
        }
    }

    /// Only scheduled jobs run now: a waiting job is left waiting (it runs when its parents
    /// let it, [`super::dependents`]), and is not among the ids answered.
    async fn run_now(&self, ids: &[JobId], now_ms: UnixMs) -> Result<Vec<JobId>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &RUN_NOW, &[&ids_param(ids), &time(now_ms)])
            .await
            .map_err(fault("running jobs now"))?;
        let mut ran: Vec<JobId> = rows.iter().map(|r| JobId(unid(r.get(0)))).collect();
        ran.sort_unstable();
        if !ran.is_empty() {
            self.announce(Wakeup::Ready);
        }
        Ok(ran)
    }

    /// See `super::cancel`.
    async fn cancel_jobs(
        &self,
        selection: &Selection,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<Cancelled, StoreError> {
        self.cancel_selected(selection, reason, now_ms).await
    }

    async fn delete_jobs(
        &self,
        selection: &Selection,
        now_ms: UnixMs,
    ) -> Result<Vec<JobId>, StoreError> {
        let what = "deleting jobs";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let mut ids: Vec<JobId> = Vec::new();
        let mut live = 0;
        let mut parents: Vec<(i64, End)> = Vec::new();
        for (prefix, unfinished) in [(DELETE_LIVE_WHERE, true), (DELETE_FINISHED_WHERE, false)] {
            let statement = delete_selected(prefix, selection);
            let rows = query(&tx, &statement, &statement.params())
                .await
                .map_err(fault(what))?;
            if unfinished {
                live = rows.len();
            }
            ids.extend(rows.iter().map(|r| JobId(unid(r.get(0)))));
            parents.extend(deleted_parents(&rows, unfinished));
        }
        let settled = if parents.is_empty() {
            Settled::default()
        } else {
            settle(&tx, &parents, now_ms).await?
        };
        tx.commit().await.map_err(fault(what))?;
        self.announce_settled(settled);
        if live > 0 {
            // A deleted job may have been held by a stream: it has room again.
            self.announce(Wakeup::Released);
        }
        ids.sort_unstable();
        Ok(ids)
    }

    async fn delete_checked(
        &self,
        ids: &[JobId],
        check: &DeleteCheck<'_>,
        now_ms: UnixMs,
    ) -> Result<Vec<Checked>, StoreError> {
        let what = "deleting jobs";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let wanted = ids_param(ids);
        let mut peeks: HashMap<JobId, JobPeek> = HashMap::new();
        for sql in [PEEK_LIVE, PEEK_FINISHED] {
            let rows = query(&tx, &sql, &[&wanted]).await.map_err(fault(what))?;
            for row in &rows {
                let (job, peek) = peek_of(row)?;
                peeks.insert(job, peek);
            }
        }
        let mut checked = Vec::with_capacity(ids.len());
        let mut doomed: Vec<i64> = Vec::new();
        let mut gone: HashSet<JobId> = HashSet::new();
        for &job in ids {
            let peek = peeks.get(&job).filter(|_| !gone.contains(&job)).cloned();
            let deleted = peek.as_ref().is_some_and(check);
            if deleted {
                gone.insert(job);
                doomed.push(id(job.0));
            }
            checked.push(Checked {
                id: job,
                peek,
                deleted,
            });
        }
        let mut settled = Settled::default();
        if !doomed.is_empty() {
            let mut parents: Vec<(i64, End)> = Vec::new();
            for (sql, unfinished) in [(DELETE_LIVE, true), (DELETE_FINISHED, false)] {
                let rows = query(&tx, &sql, &[&doomed]).await.map_err(fault(what))?;
                parents.extend(deleted_parents(&rows, unfinished));
            }
            if !parents.is_empty() {
                settled = settle(&tx, &parents, now_ms).await?;
            }
        }
        tx.commit().await.map_err(fault(what))?;
        self.announce_settled(settled);
        if !doomed.is_empty() {
            self.announce(Wakeup::Released);
        }
        Ok(checked)
    }
}

impl PostgresStore {
    async fn try_replay(&self, replay: &Replay, now_ms: UnixMs) -> Result<Replayed, StoreError> {
        let what = "replaying dead jobs";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let statement = replay_selected(&replay.selection);
        let selected = query(&tx, &statement, &statement.params())
            .await
            .map_err(fault(what))?;
        let mut replayed = Replayed::default();
        if let Some(named) = &replay.selection.ids {
            let selected: HashSet<i64> = selected.iter().map(|r| r.get(0)).collect();
            let missing: Vec<i64> = named
                .iter()
                .map(|j| id(j.0))
                .filter(|j| !selected.contains(j))
                .collect();
            let statuses: HashMap<i64, i16> = query(&tx, &STATUSES, &[&missing])
                .await
                .map_err(fault(what))?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            for job in missing {
                let reason = match statuses.get(&job) {
                    None => NotReplayed::NotFound,
                    Some(&code) if !status_of(code)?.is_given_up() => {
                        NotReplayed::NotDead(status_of(code)?)
                    }
                    Some(_) => NotReplayed::NotSelected,
                };
                replayed.skipped.push((JobId(unid(job)), reason));
            }
        }
        // Keys held by unfinished jobs, and by jobs this replay revives.
        let (key_queues, keys): (Vec<String>, Vec<String>) = selected
            .iter()
            .filter_map(|r| Some((r.get::<_, String>(2), r.get::<_, Option<String>>(3)?)))
            .unzip();
        let mut held: HashMap<(String, String), JobId> = key_holders(&tx, &key_queues, &keys)
            .await?
            .into_iter()
            .map(|(slot, holder)| (slot, holder.id))
            .collect();
        let mut revive: Vec<i64> = Vec::new();
        for row in &selected {
            let job = JobId(unid(row.get(0)));
            let status = status_of(row.get(1))?;
            if !status.is_given_up() {
                if replay.selection.ids.is_some() {
                    replayed.skipped.push((job, NotReplayed::NotDead(status)));
                }
                continue;
            }
            if let Some(key) = row.get::<_, Option<String>>(3) {
                let slot = (row.get::<_, String>(2), key);
                if let Some(holder) = held.get(&slot) {
                    let key = slot.1;
                    replayed.skipped.push((
                        job,
                        NotReplayed::KeyHeld {
                            key,
                            holder: *holder,
                        },
                    ));
                    continue;
                }
                held.insert(slot, job);
            }
            revive.push(id(job.0));
            replayed.ids.push(job);
        }
        if !revive.is_empty() {
            let policy: Option<String> = replay.policy.as_ref().map(json);
            let parents: Vec<i64> = query(
                &tx,
                &REVIVE,
                &[&revive, &time(now_ms), &replay.reset_attempts, &policy],
            )
            .await
            .map_err(fault(what))?
            .iter()
            .filter(|row| row.get::<_, bool>(1))
            .map(|row| row.get(0))
            .collect();
            // The children they cancelled wait for them again.
            if !parents.is_empty() {
                resume(&tx, &parents).await?;
            }
        }
        tx.commit().await.map_err(fault(what))?;
        if !revive.is_empty() {
            self.announce(Wakeup::Ready);
        }
        replayed.skipped.sort_by_key(|(job, _)| *job);
        Ok(replayed)
    }
}

/// The jobs of `selection` in one job table (`prefix`), deleted: (id, has_children) of each.
fn delete_selected(prefix: Prefix, selection: &Selection) -> Query {
    let mut statement = Query::new(prefix);
    statement.selection(selection);
    statement.push(" RETURNING id, has_children");
    statement
}

/// The deleted jobs of `rows` (id, has_children) that had children, and how they ended for
/// them: an unfinished one is lost; a finished one only takes its edges along.
fn deleted_parents(rows: &[tokio_postgres::Row], unfinished: bool) -> Vec<(i64, End)> {
    let end = if unfinished {
        End::Deleted
    } else {
        End::Forgotten
    };
    rows.iter()
        .filter(|r| r.get::<_, bool>(1))
        .map(|r| (r.get(0), end))
        .collect()
}

/// The jobs of `selection`, for a replay to look at.
fn replay_selected(selection: &Selection) -> Query {
    let mut statement = Query::new(REPLAY_SELECTED);
    statement.selection(selection);
    statement.push(" ORDER BY id");
    statement
}

/// Every statement [`delete_selected`] and [`replay_selected`] build: each with every shape of
/// selection ([`selection_shapes`]).
pub(super) fn shapes() -> Vec<(String, Query)> {
    let mut shapes = Vec::new();
    for (label, selection) in selection_shapes() {
        for prefix in [DELETE_LIVE_WHERE, DELETE_FINISHED_WHERE] {
            shapes.push((label.clone(), delete_selected(prefix, &selection)));
        }
        shapes.push((label, replay_selected(&selection)));
    }
    shapes
}

prefixes! {
    DELETE_LIVE_WHERE = "DELETE FROM tenax_jobs WHERE true";
    DELETE_FINISHED_WHERE = "DELETE FROM tenax_finished WHERE true";
    REPLAY_SELECTED = "SELECT id, status, queue, unique_key FROM tenax_all_jobs WHERE true";
}

statements! {
    RUN_NOW = "UPDATE tenax_jobs SET status = 1, run_at = $2::bigint, trigger = 2
             WHERE id = ANY($1::bigint[]) AND status = 0 RETURNING id";
    PEEK_LIVE = concat!(
        "SELECT ",
        peek_columns!(),
        " FROM tenax_jobs WHERE id = ANY($1) FOR UPDATE"
    );
    PEEK_FINISHED = concat!(
        "SELECT ",
        peek_columns!(),
        " FROM tenax_finished WHERE id = ANY($1) FOR UPDATE"
    );
    DELETE_LIVE = "DELETE FROM tenax_jobs WHERE id = ANY($1) RETURNING id, has_children";
    DELETE_FINISHED = "DELETE FROM tenax_finished WHERE id = ANY($1) RETURNING id, has_children";
    STATUSES = "SELECT id, status FROM tenax_all_jobs WHERE id = ANY($1)";

    /// Dead and cancelled jobs back to the table of unfinished jobs, ready now; their errors
    /// are kept. Answers (id, has_children) of each: those with children resume their
    /// workflows ([`resume`]).
    REVIVE = concat!(
        "WITH revived AS (
             DELETE FROM tenax_finished WHERE id = ANY($1::bigint[]) AND status IN (4, 5)
             RETURNING *
         )
         INSERT INTO tenax_jobs (",
        table_columns!(),
        ")
         SELECT id, queue, kind, payload, priority, unique_key, created_at, expires_at, origin,
             parent, traceparent, coalesce($4::text, policy), 1, $2::bigint,
             CASE WHEN $3::bool THEN 0 ELSE failures END,
             CASE WHEN $3::bool THEN NULL ELSE first_failure_at END,
             CASE WHEN $3::bool THEN NULL ELSE last_delay END,
             NULL, NULL, errors, attempts, NULL, NULL, NULL, NULL, 1, payload_sealed, NULL,
             after_ids, on_parent_dead, NULL, has_children
         FROM revived
         RETURNING id, has_children"
    );
}
