//! `BatchStore`: batches of jobs with callbacks, counted in the commit that finishes each
//! member, whatever finishes it.
//!
//! | operation      | cases |
//! |----------------|-------|
//! | `add_to_batch` | every case; `jobs_are_added_to_an_open_batch_until_it_closes` |
//! | `close_batch`  | `jobs_are_added_to_an_open_batch_until_it_closes`, `a_batch_closed_after_its_members_finished_fires_at_once` |
//! | `batch`, `batches`, `delete_batch` | `batches_are_listed_and_deleted` |
//!
//! Members end by `complete_jobs` (kept or not) and `pop_jobs` (`JobLeases`), `fail_job`
//! (dead), `delete_jobs` and `replay_jobs` (`JobCuration`), `expire_jobs` and `expire_leases`
//! (`JobUpkeep`).

use std::sync::Arc;

use serde_json::value::RawValue;
use tenax_core::model::{
    Batch, BatchId, BatchState, JobFilter, JobId, JobTemplate, NewBatch, Replay, Selection,
};
use tenax_core::store::{BatchTarget, Store, StoreError};

use super::support::*;

fn template(queue: &str, payload: &str) -> JobTemplate {
    JobTemplate {
        queue: queue.to_owned(),
        kind: "callback".to_owned(),
        payload: RawValue::from_string(payload.to_owned()).expect("JSON"),
        priority: 3,
        policy: None,
        retry_limit: None,
    }
}

fn spec(on_complete: bool, on_success: bool) -> NewBatch {
    NewBatch {
        description: Some("nightly import".to_owned()),
        on_complete: on_complete.then(|| template("done", r#"{"n":1}"#)),
        on_success: on_success.then(|| template("ok", r#""yes""#)),
        queues: vec!["done".to_owned(), "ok".to_owned(), "q".to_owned()],
    }
}

/// Adds `count` jobs of queue `q` to `to`; returns the batch and the members' ids.
async fn add(
    store: &Arc<dyn Store>,
    to: BatchTarget,
    count: usize,
    close: bool,
    now_ms: u64,
) -> Result<(Batch, Vec<JobId>), StoreError> {
    let jobs = (0..count).map(|_| job("q")).collect();
    let (batch, results) = store
        .add_to_batch(to, jobs, close, current(store).await, now_ms)
        .await?;
    let ids: Vec<JobId> = results.into_iter().flatten().map(|e| e.id).collect();
    assert_eq!(ids.len(), count);
    Ok((batch, ids))
}

async fn batch(store: &Arc<dyn Store>, id: BatchId) -> Batch {
    store
        .batch(id)
        .await
        .expect("readable")
        .unwrap_or_else(|| panic!("batch {id} exists"))
}

/// The jobs of `queue`, as (id, payload).
async fn jobs_of(store: &Arc<dyn Store>, queue: &str) -> Vec<(JobId, serde_json::Value)> {
    let filter = JobFilter {
        queue: Some(queue.to_owned()),
        ..JobFilter::default()
    };
    store
        .list_jobs(&filter, tenax_core::model::Page::after(None, 100))
        .await
        .expect("list")
        .into_iter()
        .map(|j| {
            let payload = serde_json::from_str(j.spec.payload.get()).expect("JSON payload");
            (j.id, payload)
        })
        .collect()
}

async fn complete_all(store: &Arc<dyn Store>, ids: &[JobId], retain: bool, now_ms: u64) {
    let taken = take(store, &["q"], ids.len(), now_ms).await;
    assert_eq!(taken_ids(&taken), ids);
    let acks: Vec<_> = taken.iter().map(ack).collect();
    let results = store
        .complete_plain(&acks, retain, now_ms)
        .await
        .expect("completed");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// Many tasks complete the members at once (each its own commit): exactly one callback of
/// each kind, with the counts, in the commit of the last; and so after a restart.
pub(crate) async fn concurrent_finishes_enqueue_each_callback_once(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (made, ids) = add(
        &store,
        BatchTarget::New(Box::new(spec(true, true))),
        40,
        true,
        T0,
    )
    .await
    .expect("made");
    assert_eq!(made.state, BatchState::Closed);
    assert_eq!((made.counts.total, made.counts.pending), (40, 40));
    assert!(jobs_of(&store, "done").await.is_empty());
    let taken = take(&store, &["q"], 40, T0 + 1).await;
    assert_eq!(taken.len(), 40);
    let tasks: Vec<_> = taken
        .iter()
        .enumerate()
        .map(|(n, job)| {
            let store = store.clone();
            let acks = [ack(job)];
            // Half kept for their retention, half deleted as they complete: both count.
            tokio::spawn(async move { store.complete_plain(&acks, n % 2 == 0, T0 + 2).await })
        })
        .collect();
    for task in tasks {
        let results = task.await.expect("task").expect("completed");
        assert!(results[0].is_ok());
    }
    let finished = batch(&store, made.id).await;
    assert_eq!(finished.state, BatchState::Finished);
    assert_eq!(
        (
            finished.counts.total,
            finished.counts.pending,
            finished.counts.completed,
            finished.counts.dead,
            finished.counts.deleted
        ),
        (40, 0, 40, 0, 0)
    );
    let done = jobs_of(&store, "done").await;
    let ok = jobs_of(&store, "ok").await;
    assert_eq!(done.len(), 1, "one on_complete callback");
    assert_eq!(ok.len(), 1, "one on_success callback");
    assert_eq!(finished.on_complete_job, Some(done[0].0));
    assert_eq!(finished.on_success_job, Some(ok[0].0));
    assert_eq!(
        done[0].1,
        serde_json::json!({
            "batch": {"id": made.id.0, "description": "nightly import", "total": 40,
                      "completed": 40, "dead": 0, "deleted": 0, "cancelled": 0,
                      "succeeded": true},
            "payload": {"n": 1}
        })
    );
    assert_eq!(ok[0].1["payload"], "yes");
    let callback = get(&store, done[0].0).await;
    assert_eq!(
        (callback.spec.kind.as_str(), callback.spec.priority),
        ("callback", 3)
    );
    assert_eq!(callback.spec.batch, None, "a callback is no member");

    close(store).await;
    let store = backend.open(T0 + 3).await;
    assert_eq!(batch(&store, made.id).await.state, BatchState::Finished);
    assert_eq!(jobs_of(&store, "done").await.len(), 1);
    assert_eq!(jobs_of(&store, "ok").await.len(), 1);
    assert_eq!(get(&store, ids[0]).await.spec.batch, Some(made.id));
    close(store).await;
}

/// A member that dies: on_complete fires with it counted dead, on_success never.
pub(crate) async fn a_dead_member_fires_on_complete_and_not_on_success(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (made, ids) = add(
        &store,
        BatchTarget::New(Box::new(spec(true, true))),
        3,
        true,
        T0,
    )
    .await
    .expect("made");
    kill(&store, "q", &ids[..1], T0 + 1).await;
    assert_eq!(batch(&store, made.id).await.counts.dead, 1);
    complete_all(&store, &ids[1..], true, T0 + 2).await;
    let finished = batch(&store, made.id).await;
    assert_eq!(finished.state, BatchState::Finished);
    assert_eq!((finished.counts.completed, finished.counts.dead), (2, 1));
    let done = jobs_of(&store, "done").await;
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].1["batch"]["dead"], 1);
    assert_eq!(done[0].1["batch"]["succeeded"], false);
    assert!(jobs_of(&store, "ok").await.is_empty(), "no on_success");
    assert_eq!(finished.on_success_job, None);

    // A replay after the batch finished changes nothing, and its end fires nothing again.
    store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: Some(vec![ids[0]]),
                    ..Selection::default()
                },
                policy: None,
                reset_attempts: false,
            },
            T0 + 3,
        )
        .await
        .expect("replayed");
    complete_all(&store, &ids[..1], true, T0 + 4).await;
    let after = batch(&store, made.id).await;
    assert_eq!((after.counts.completed, after.counts.dead), (2, 1));
    assert_eq!(jobs_of(&store, "done").await.len(), 1);
    assert!(jobs_of(&store, "ok").await.is_empty());
    close(store).await;
}

/// An open batch takes more jobs, across a restart; a closed one refuses them; its members'
/// deaths replayed before it finished and their deletions count as they end.
pub(crate) async fn jobs_are_added_to_an_open_batch_until_it_closes(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (made, first) = add(
        &store,
        BatchTarget::New(Box::new(spec(true, true))),
        2,
        false,
        T0,
    )
    .await
    .expect("made");
    assert_eq!(made.state, BatchState::Open);
    complete_all(&store, &first, false, T0 + 1).await;
    let open = batch(&store, made.id).await;
    assert_eq!(
        (open.state, open.counts.pending, open.counts.completed),
        (BatchState::Open, 0, 2),
        "an open batch waits, whatever is pending"
    );
    assert!(jobs_of(&store, "done").await.is_empty());

    let (added, more) = add(&store, BatchTarget::Existing(made.id), 3, false, T0 + 2)
        .await
        .expect("added");
    assert_eq!((added.counts.total, added.counts.pending), (5, 3));
    // One dies, then is replayed while the batch is open: pending again.
    kill(&store, "q", &more[..1], T0 + 3).await;
    assert_eq!(batch(&store, made.id).await.counts.dead, 1);
    store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: Some(vec![more[0]]),
                    ..Selection::default()
                },
                policy: None,
                reset_attempts: false,
            },
            T0 + 4,
        )
        .await
        .expect("replayed");
    let replayed = batch(&store, made.id).await;
    assert_eq!((replayed.counts.dead, replayed.counts.pending), (0, 3));

    // Across a restart, the members are still counted.
    close(store).await;
    let store = backend.open(T0 + 5).await;
    let closed = store.close_batch(made.id, T0 + 5).await.expect("closed");
    assert_eq!(
        (closed.state, closed.counts.pending),
        (BatchState::Closed, 3)
    );
    assert_eq!(
        add(&store, BatchTarget::Existing(made.id), 1, false, T0 + 5)
            .await
            .map(drop),
        Err(StoreError::BatchClosed(made.id))
    );
    assert_eq!(
        add(
            &store,
            BatchTarget::Existing(BatchId(9_999)),
            1,
            false,
            T0 + 5
        )
        .await
        .map(drop),
        Err(StoreError::NoBatch(BatchId(9_999)))
    );
    // One is deleted: finished, not succeeded.
    let deleted = store
        .delete_jobs(
            &Selection {
                ids: Some(vec![more[2]]),
                ..Selection::default()
            },
            T0,
        )
        .await
        .expect("deleted");
    assert_eq!(deleted, [more[2]]);
    assert_eq!(batch(&store, made.id).await.counts.deleted, 1);
    complete_all(&store, &more[..2], true, T0 + 6).await;
    let finished = batch(&store, made.id).await;
    assert_eq!(finished.state, BatchState::Finished);
    assert_eq!(
        (
            finished.counts.total,
            finished.counts.completed,
            finished.counts.dead,
            finished.counts.deleted
        ),
        (5, 4, 0, 1)
    );
    assert_eq!(jobs_of(&store, "done").await.len(), 1);
    assert!(
        jobs_of(&store, "ok").await.is_empty(),
        "a deletion is no success"
    );
    close(store).await;
}

/// Closing a batch whose members have all finished enqueues its callbacks in that commit; a
/// member past its expiry counts as deleted.
pub(crate) async fn a_batch_closed_after_its_members_finished_fires_at_once(
    backend: &impl Backend,
) {
    let store = backend.open(T0).await;
    let jobs = vec![job("q"), job("q").expires(T0 + 10)];
    let (made, results) = store
        .add_to_batch(
            BatchTarget::New(Box::new(spec(true, true))),
            jobs,
            false,
            current(&store).await,
            T0,
        )
        .await
        .expect("made");
    let ids: Vec<JobId> = results.into_iter().flatten().map(|e| e.id).collect();
    let taken = take(&store, &["q"], 1, T0 + 1).await;
    assert_eq!(taken_ids(&taken), ids[..1]);
    store
        .complete_plain(&[ack(&taken[0])], true, T0 + 1)
        .await
        .expect("completed");
    assert_eq!(store.expire_jobs(T0 + 20, 10).await.expect("expired"), 1);
    let open = batch(&store, made.id).await;
    assert_eq!(
        (open.state, open.counts.completed, open.counts.deleted),
        (BatchState::Open, 1, 1)
    );
    assert!(jobs_of(&store, "done").await.is_empty());
    let closed = store.close_batch(made.id, T0 + 30).await.expect("closed");
    assert_eq!(closed.state, BatchState::Finished);
    assert_eq!(closed.finished_at_ms, Some(T0 + 30));
    let done = jobs_of(&store, "done").await;
    assert_eq!(done.len(), 1);
    assert_eq!(closed.on_complete_job, Some(done[0].0));
    assert!(jobs_of(&store, "ok").await.is_empty());
    // Closing again changes nothing.
    let again = store.close_batch(made.id, T0 + 31).await.expect("closed");
    assert_eq!(again.on_complete_job, Some(done[0].0));
    assert_eq!(jobs_of(&store, "done").await.len(), 1);

    // A batch closed with no member finishes as it is made.
    let (empty, _) = add(
        &store,
        BatchTarget::New(Box::new(spec(true, true))),
        0,
        true,
        T0 + 40,
    )
    .await
    .expect("made");
    assert_eq!(empty.state, BatchState::Finished);
    assert_eq!(jobs_of(&store, "done").await.len(), 2);
    assert_eq!(jobs_of(&store, "ok").await.len(), 1);
    close(store).await;
}

/// Batches page in id order; a deleted one is gone and its jobs stay.
pub(crate) async fn batches_are_listed_and_deleted(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let mut made = Vec::new();
    for _ in 0..3 {
        let (b, ids) = add(
            &store,
            BatchTarget::New(Box::new(spec(true, false))),
            1,
            false,
            T0,
        )
        .await
        .expect("made");
        made.push((b.id, ids[0]));
    }
    assert!(made.windows(2).all(|w| w[0].0 < w[1].0), "ids increase");
    let page: Vec<BatchId> = store
        .batches(None, 2)
        .await
        .expect("listed")
        .iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(page, [made[0].0, made[1].0]);
    let rest: Vec<BatchId> = store
        .batches(Some(made[1].0), 10)
        .await
        .expect("listed")
        .iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(rest, [made[2].0]);
    assert!(store.delete_batch(made[1].0).await.expect("deleted"));
    assert!(!store.delete_batch(made[1].0).await.expect("deleted"));
    assert!(store.batch(made[1].0).await.expect("read").is_none());
    assert_eq!(
        status(&store, made[1].1).await,
        Some(tenax_core::model::Status::Ready)
    );
    close(store).await;
    let store = backend.open(T0 + 1).await;
    let left: Vec<BatchId> = store
        .batches(None, 10)
        .await
        .expect("listed")
        .iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(left, [made[0].0, made[2].0]);
    // Ids are not reused after a restart.
    let (next, _) = add(
        &store,
        BatchTarget::New(Box::new(spec(true, false))),
        0,
        false,
        T0 + 1,
    )
    .await
    .expect("made");
    assert!(next.id > made[2].0);
    close(store).await;
}

/// A lease that ends past the job's limits (dead by the decision) and a pop (deleted) count
/// as they end the member, on the maintenance loop's path as on a worker's.
pub(crate) async fn lease_expiry_and_pops_count_their_members(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (made, ids) = add(
        &store,
        BatchTarget::New(Box::new(spec(true, true))),
        2,
        true,
        T0,
    )
    .await
    .expect("made");
    let taken = take_on(&store, &["q"], 1, SECOND, None, T0).await;
    assert_eq!(taken_ids(&taken), ids[..1]);
    let ended = store
        .expire_leases(T0 + 2 * SECOND, 10, &dead(T0 + 2 * SECOND, "lease ended"))
        .await
        .expect("expired");
    assert_eq!(ended, 1);
    let counted = batch(&store, made.id).await;
    assert_eq!((counted.counts.dead, counted.counts.pending), (1, 1));
    let popped = store
        .pop_jobs(&["q".to_owned()], 5, T0 + 3 * SECOND)
        .await
        .expect("popped");
    assert_eq!(popped.iter().map(|j| j.id).collect::<Vec<_>>(), ids[1..]);
    let finished = batch(&store, made.id).await;
    assert_eq!(finished.state, BatchState::Finished);
    assert_eq!(
        (
            finished.counts.dead,
            finished.counts.deleted,
            finished.counts.completed
        ),
        (1, 1, 0)
    );
    assert_eq!(jobs_of(&store, "done").await.len(), 1);
    assert!(jobs_of(&store, "ok").await.is_empty());
    close(store).await;
}
