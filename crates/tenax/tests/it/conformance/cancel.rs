//! `JobCuration::cancel_jobs`: cancellation (docs/workflows.md#cancellation).
//!
//! | operation                      | cases |
//! |--------------------------------|-------|
//! | `cancel_jobs`                  | `unfinished_jobs_are_cancelled_or_marked`, `a_selection_cancels_what_it_names` |
//! | `extend_lease` (the mark)      | `unfinished_jobs_are_cancelled_or_marked` |
//! | `fail_job`, `expire_leases`    | `a_marked_lease_is_seen_by_the_decision_that_ends_it` |
//! | `complete_jobs` (after a mark) | `a_marked_lease_is_seen_by_the_decision_that_ends_it` |
//! | `purge_finished`, `replay_jobs`, `counts`, `backlog` (cancelled jobs) | `cancelled_jobs_are_counted_replayed_and_purged_as_dead_ones` |

use std::sync::{Arc, Mutex};

use tenax_core::model::{JobFilter, JobId, Replay, Selection, Status};
use tenax_core::store::{DecideContext, Store, Transition};

use super::support::*;

const REASON: &str = "cancelled by request";

/// `cancel_jobs` of `ids` at `now_ms`: (cancelled, marked).
async fn cancel_ids(
    store: &Arc<dyn Store>,
    ids: &[JobId],
    now_ms: u64,
) -> (Vec<JobId>, Vec<JobId>) {
    let selection = Selection {
        ids: Some(ids.to_vec()),
        filter: JobFilter::default(),
    };
    let done = store
        .cancel_jobs(&selection, REASON, now_ms)
        .await
        .expect("cancelled");
    (done.cancelled, done.marked)
}

/// A decision that records whether it saw the lease marked, and cancels when it did (retries
/// otherwise), as the engine's does.
fn watching(
    seen: &Arc<Mutex<Vec<(JobId, bool)>>>,
    now_ms: u64,
) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
    let seen = seen.clone();
    let retry = retry(now_ms, 10 * SECOND, "failed");
    move |ctx| {
        seen.lock()
            .expect("not poisoned")
            .push((ctx.id, ctx.cancel_requested));
        if ctx.cancel_requested {
            Transition {
                state: ctx.state.cancelled(now_ms, "cancelled while in flight"),
                error: Some(error_entry(ctx, now_ms, "stopped")),
                moved_to: None,
            }
        } else {
            retry(ctx)
        }
    }
}

pub(crate) async fn unfinished_jobs_are_cancelled_or_marked(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q"),
            job("q"),
            job("q").key("k"),
            job("q").at(T0 + 60 * SECOND),
            job("q"),
        ],
        T0,
    )
    .await;
    // ids[0] completed, ids[1] dead, ids[4] in flight; ids[2] ready, ids[3] scheduled.
    let taken = take(&store, &["q"], 3, T0).await;
    assert_eq!(taken_ids(&taken), [ids[0], ids[1], ids[2]]);
    store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("completed");
    store
        .fail_job(ack(&taken[1]), T0, &dead(T0, "fatal"))
        .await
        .expect("dead");
    store
        .fail_job(ack(&taken[2]), T0, &again(T0, "lost"))
        .await
        .expect("ready again");
    let flying = take(&store, &["q"], 2, T0).await;
    assert_eq!(taken_ids(&flying), [ids[2], ids[4]]);
    // ids[2] back to ready: it is not in flight when cancelled.
    store
        .fail_job(ack(&flying[0]), T0, &again(T0, "lost"))
        .await
        .expect("ready again");
    let in_flight = &flying[1];
    let beat = store
        .extend_lease(ack(in_flight), 30 * SECOND, 3_600 * SECOND, T0 + 1)
        .await
        .expect("extended");
    assert!(!beat.cancel_requested, "not marked before a cancellation");

    let at = T0 + 2 * SECOND;
    let (cancelled, marked) = cancel_ids(&store, &ids, at).await;
    assert_eq!(
        cancelled,
        [ids[2], ids[3]],
        "the ready and the scheduled job"
    );
    assert_eq!(marked, [ids[4]], "the job in flight");
    for id in [ids[2], ids[3]] {
        let job = get(&store, id).await;
        assert_eq!(job.state.status, Status::Cancelled, "job {id}");
        assert_eq!(job.state.finished_at_ms, Some(at));
        assert_eq!(job.state.dead_reason.as_deref(), Some(REASON));
    }
    assert_eq!(status(&store, ids[0]).await, Some(Status::Completed));
    assert_eq!(status(&store, ids[1]).await, Some(Status::Dead));
    assert_eq!(status(&store, ids[4]).await, Some(Status::InFlight));
    // The holder learns it on its next heartbeat; its lease is otherwise unchanged.
    let beat = store
        .extend_lease(ack(in_flight), 30 * SECOND, 3_600 * SECOND, at)
        .await
        .expect("extended");
    assert!(beat.cancel_requested, "marked");
    assert_eq!(beat.expires_at_ms, at + 30 * SECOND);
    // Cancelled jobs are never taken, not even once the scheduled one is due.
    store
        .promote_due(T0 + 120 * SECOND, 100)
        .await
        .expect("promoted");
    assert!(take(&store, &["q"], 10, T0 + 120 * SECOND).await.is_empty());
    // The cancelled job's unique key is free again.
    enqueue(&store, vec![job("q").key("k")], at).await;
    // Cancelling again changes nothing but marks the job in flight again.
    assert_eq!(
        cancel_ids(&store, &ids, at + 1).await,
        (vec![], vec![ids[4]])
    );
    assert_eq!(get(&store, ids[2]).await.state.finished_at_ms, Some(at));

    let properties = store.properties();
    let store = reopen(backend, store, at).await;
    // A mark lives as long as its lease: kept where leases are, else the job is ready again.
    if properties.durable_leases {
        let beat = store
            .extend_lease(ack(in_flight), 30 * SECOND, 3_600 * SECOND, at + 1)
            .await
            .expect("extended");
        assert!(beat.cancel_requested, "the mark survives with the lease");
    } else {
        assert_eq!(status(&store, ids[4]).await, Some(Status::Ready));
        let again = take(&store, &["q"], 1, at).await;
        assert_eq!(taken_ids(&again), [ids[4]]);
        let beat = store
            .extend_lease(ack(&again[0]), 30 * SECOND, 3_600 * SECOND, at + 1)
            .await
            .expect("extended");
        assert!(!beat.cancel_requested, "a new lease starts unmarked");
    }
    close(store).await;
}

pub(crate) async fn a_marked_lease_is_seen_by_the_decision_that_ends_it(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"), job("q"), job("q"), job("q")], T0).await;
    let taken = take(&store, &["q"], 4, T0).await;
    assert_eq!(taken_ids(&taken), ids);
    // Mark the first three; the fourth stays unmarked.
    assert_eq!(
        cancel_ids(&store, &ids[..3], T0 + 1).await,
        (vec![], ids[..3].to_vec())
    );
    let seen = Arc::new(Mutex::new(Vec::new()));

    // A failure of a marked lease: the decision sees the mark, and the job is cancelled.
    let transition = store
        .fail_job(ack(&taken[0]), T0 + 2, &watching(&seen, T0 + 2))
        .await
        .expect("failed");
    assert_eq!(transition.state.status, Status::Cancelled);
    let job = get(&store, ids[0]).await;
    assert_eq!(job.state.status, Status::Cancelled);
    assert_eq!(job.state.finished_at_ms, Some(T0 + 2));
    assert_eq!(job.errors.len(), 1, "the attempt's error is kept");

    // A completion of a marked lease completes.
    let completed = store
        .complete_plain(&[ack(&taken[1])], true, T0 + 3)
        .await
        .expect("one commit");
    assert!(completed[0].is_ok(), "{completed:?}");
    assert_eq!(status(&store, ids[1]).await, Some(Status::Completed));

    // Leases that end: the marked one is cancelled, the unmarked one retried.
    let end = T0 + 30 * SECOND;
    let ended = store
        .expire_leases(end, 100, &watching(&seen, end))
        .await
        .expect("expired");
    assert_eq!(ended, 2);
    assert_eq!(status(&store, ids[2]).await, Some(Status::Cancelled));
    assert_eq!(status(&store, ids[3]).await, Some(Status::Scheduled));
    let mut seen = seen.lock().expect("not poisoned").clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, [(ids[0], true), (ids[2], true), (ids[3], false)]);

    // The retried job's next lease is not marked: a mark belongs to one lease.
    store
        .promote_due(end + 20 * SECOND, 100)
        .await
        .expect("promoted");
    let again = take(&store, &["q"], 1, end + 20 * SECOND).await;
    assert_eq!(taken_ids(&again), [ids[3]]);
    let beat = store
        .extend_lease(
            ack(&again[0]),
            30 * SECOND,
            3_600 * SECOND,
            end + 21 * SECOND,
        )
        .await
        .expect("extended");
    assert!(!beat.cancel_requested);
    let store = reopen(backend, store, end + 21 * SECOND).await;
    close(store).await;
}

pub(crate) async fn a_selection_cancels_what_it_names(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("a"),
            job("a").kind("other"),
            job("b"),
            job("a").at(T0 + SECOND),
        ],
        T0,
    )
    .await;
    let by_queue_and_type = Selection {
        ids: None,
        filter: JobFilter {
            queue: Some("a".into()),
            kind: Some("work".into()),
            ..JobFilter::default()
        },
    };
    let done = store
        .cancel_jobs(&by_queue_and_type, REASON, T0)
        .await
        .expect("cancelled");
    assert_eq!(done.cancelled, [ids[0], ids[3]]);
    assert!(done.marked.is_empty());
    assert_eq!(status(&store, ids[1]).await, Some(Status::Ready));
    assert_eq!(status(&store, ids[2]).await, Some(Status::Ready));
    // Ids narrowed by a filter: only those that match it.
    let narrowed = Selection {
        ids: Some(vec![ids[1], ids[2]]),
        filter: JobFilter {
            queue: Some("b".into()),
            ..JobFilter::default()
        },
    };
    let done = store
        .cancel_jobs(&narrowed, REASON, T0)
        .await
        .expect("cancelled");
    assert_eq!(done.cancelled, [ids[2]]);
    assert_eq!(status(&store, ids[1]).await, Some(Status::Ready));
    // An unknown id is no error: nothing is cancelled.
    let done = store
        .cancel_jobs(
            &Selection {
                ids: Some(vec![JobId(987_654)]),
                filter: JobFilter::default(),
            },
            REASON,
            T0,
        )
        .await
        .expect("no error");
    assert!(done.cancelled.is_empty() && done.marked.is_empty());
    let store = reopen(backend, store, T0).await;
    close(store).await;
}

pub(crate) async fn cancelled_jobs_are_counted_replayed_and_purged_as_dead_ones(
    backend: &impl Backend,
) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"), job("q"), job("q"), job("q")], T0).await;
    kill(&store, "q", &ids[..1], T0).await;
    let (cancelled, _) = cancel_ids(&store, &ids[1..], T0 + SECOND).await;
    assert_eq!(cancelled, &ids[1..]);
    let counts = store.queue_counts("q").await.expect("counts");
    assert_eq!((counts.dead, counts.cancelled), (1, 3));
    let backlog = store.backlog().await.expect("backlog");
    let q = backlog
        .iter()
        .find(|b| b.queue == "q")
        .expect("q's backlog");
    assert_eq!((q.dead, q.cancelled, q.ready), (1, 3, 0));
    // Listed by status.
    let listed = list(
        &store,
        JobFilter {
            status: Some(Status::Cancelled),
            ..JobFilter::default()
        },
        None,
        10,
    )
    .await;
    assert_eq!(listed, &ids[1..]);

    // Replayed as dead jobs are: back to ready, the reason gone.
    let replay = Replay {
        selection: Selection {
            ids: Some(vec![ids[1]]),
            filter: JobFilter {
                status: Some(Status::Cancelled),
                ..JobFilter::default()
            },
        },
        ..Replay::default()
    };
    let replayed = store
        .replay_jobs(&replay, T0 + 2 * SECOND)
        .await
        .expect("replayed");
    assert_eq!(replayed.ids, [ids[1]]);
    let job = get(&store, ids[1]).await;
    assert_eq!(job.state.status, Status::Ready);
    assert_eq!(job.state.dead_reason, None);
    assert_eq!(job.state.finished_at_ms, None);

    // Purged with the dead jobs' retention, not the completed ones'.
    let purged = store
        .purge_finished(T0 + 10 * SECOND, T0, 100)
        .await
        .expect("purged");
    assert_eq!(
        purged, 1,
        "the dead job only: the cancelled ones finished later"
    );
    let purged = store
        .purge_finished(T0, T0 + SECOND, 100)
        .await
        .expect("purged");
    assert_eq!(purged, 2, "the cancelled ones, by the dead jobs' horizon");
    assert_eq!(status(&store, ids[2]).await, None);
    let store = reopen(backend, store, T0 + 3 * SECOND).await;
    close(store).await;
}
