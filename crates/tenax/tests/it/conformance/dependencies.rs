//! Dependencies between jobs (`tenax_core::model::dependency`): across `JobInserts` (a job
//! enqueued with parents starts `waiting`), `JobLeases` and `JobUpkeep`/`JobCuration` (a parent's
//! end moves its waiting children in the same commit) and `JobReads` (`children`).
//!
//! | operation                  | cases |
//! |----------------------------|-------|
//! | `insert_jobs` with `after` | every case here |
//! | `complete_jobs`            | `a_job_waits_for_every_parent`, `a_batch_is_a_dag_of_earlier_jobs`, `concurrent_completions_release_a_child_once`, `a_child_enqueued_while_its_parent_ends_is_never_left_waiting` |
//! | `fail_job` (dead)          | `a_lost_parent_cancels_or_releases_its_children`, `a_child_enqueued_while_its_parent_ends_is_never_left_waiting` |
//! | `delete_jobs`              | `a_lost_parent_cancels_or_releases_its_children` |
//! | `expire_leases`, `expire_jobs`, `pop_jobs`, `delete_checked`, `delete_queue`, `complete_jobs` without retention, `purge_finished` | `every_end_of_a_parent_settles_its_children` |
//! | `children`                 | `a_job_waits_for_every_parent`, `a_batch_is_a_dag_of_earlier_jobs` |
//! | `import_jobs`              | `imported_waiting_jobs_wait_as_they_did` |
//! | `replay_jobs`              | `a_replayed_parent_resumes_its_workflow`, `a_parent_ending_while_a_replay_resumes_its_child_is_counted_once` |

use std::sync::Arc;

use tenax_core::model::dependency::lost_parent_reason;
use tenax_core::model::{
    After, Job, JobId, JobState, NewBatch, OnDuplicate, OnParentDead, Replay, Replayed, Selection,
    Status,
};
use tenax_core::store::{BatchTarget, ImportedJob, Insert, Store, StoreError};

use super::support::*;

/// The status of a waiting job whose parent will not complete and that asked to be cancelled.
const LOST: Status = Status::Cancelled;

/// A job of `queue` that waits for `after`.
fn child(queue: &str, after: Vec<After>) -> Insert {
    let mut insert = job(queue);
    insert.after = after;
    insert
}

/// A child that runs even when a parent does not complete.
fn runs_anyway(mut insert: Insert) -> Insert {
    insert.job.on_parent_dead = OnParentDead::Run;
    insert
}

async fn complete_taken(store: &Arc<dyn Store>, queue: &str, ids: &[JobId], now_ms: u64) {
    // The oldest ready jobs are taken first: exactly `ids`, when they are the oldest.
    let taken = take(store, &[queue], ids.len(), now_ms).await;
    assert_eq!(taken_ids(&taken), ids);
    let acks: Vec<_> = taken.iter().map(ack).collect();
    for result in store
        .complete_plain(&acks, true, now_ms)
        .await
        .expect("completed")
    {
        result.expect("lease valid");
    }
}

pub(crate) async fn a_job_waits_for_every_parent(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let parents = enqueue(&store, vec![job("p"), job("p")], T0).await;
    let waiting = insert(
        &store,
        vec![child(
            "c",
            vec![After::Job(parents[0]), After::Job(parents[1])],
        )],
        OnDuplicate::Refuse,
        T0,
    )
    .await
    .expect("enqueued");
    assert_eq!(waiting[0].status, Status::Waiting);
    let c = waiting[0].id;
    assert_eq!(get(&store, c).await.spec.after, parents);
    // A waiting job is never taken.
    assert!(take(&store, &["c"], 10, T0).await.is_empty());
    assert_eq!(
        store.children(&parents).await.expect("children"),
        [(parents[0], c), (parents[1], c)]
    );

    complete_taken(&store, "p", &parents[..1], T0 + 1).await;
    assert_eq!(status(&store, c).await, Some(Status::Waiting));
    let store = reopen(backend, store, T0 + 2).await;
    assert_eq!(status(&store, c).await, Some(Status::Waiting));
    assert!(take(&store, &["c"], 10, T0 + 2).await.is_empty());
    complete_taken(&store, "p", &parents[1..], T0 + 3).await;
    assert_eq!(status(&store, c).await, Some(Status::Ready));
    let taken = take(&store, &["c"], 10, T0 + 4).await;
    assert_eq!(taken_ids(&taken), [c]);
    assert_eq!(taken[0].after, parents);
    // A completed parent keeps its edge for the workflow's view.
    assert_eq!(
        store.children(&parents[..1]).await.expect("children"),
        [(parents[0], c)]
    );

    // A parent that has completed already counts as done at enqueue.
    let at_once = insert(
        &store,
        vec![child("c", vec![After::Job(parents[0])])],
        OnDuplicate::Refuse,
        T0 + 5,
    )
    .await
    .expect("enqueued");
    assert_eq!(at_once[0].status, Status::Ready);
    // An unknown parent refuses the whole enqueue, naming it.
    let unknown = JobId(parents[1].0 + 1_000_000);
    let refused = insert(
        &store,
        vec![
            job("c"),
            child("c", vec![After::Job(parents[0]), After::Job(unknown)]),
        ],
        OnDuplicate::Refuse,
        T0 + 5,
    )
    .await;
    assert_eq!(
        refused.expect_err("refused"),
        StoreError::UnknownParent {
            index: 1,
            position: 1,
            id: unknown
        }
    );
    close(store).await;
}

pub(crate) async fn a_batch_is_a_dag_of_earlier_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    // 0 → {1, 2} → 3, and 4 after 0, due later: a fan-out and a fan-in in one enqueue.
    let ids = enqueue(
        &store,
        vec![
            job("w"),
            child("w", vec![After::Earlier(0)]),
            child("w", vec![After::Earlier(0)]),
            child("w", vec![After::Earlier(1), After::Earlier(2)]),
            child("w", vec![After::Earlier(0)]).at(T0 + 60 * SECOND),
        ],
        T0,
    )
    .await;
    for id in &ids[1..] {
        assert_eq!(status(&store, *id).await, Some(Status::Waiting));
    }
    assert_eq!(get(&store, ids[3]).await.spec.after, [ids[1], ids[2]]);
    assert_eq!(
        store.children(&ids[..3]).await.expect("children"),
        [
            (ids[0], ids[1]),
            (ids[0], ids[2]),
            (ids[0], ids[4]),
            (ids[1], ids[3]),
            (ids[2], ids[3])
        ]
    );
    complete_taken(&store, "w", &ids[..1], T0 + 1).await;
    assert_eq!(status(&store, ids[1]).await, Some(Status::Ready));
    assert_eq!(status(&store, ids[2]).await, Some(Status::Ready));
    assert_eq!(status(&store, ids[3]).await, Some(Status::Waiting));
    // Released before its run time: scheduled, as it would have been.
    let later = get(&store, ids[4]).await;
    assert_eq!(
        (later.state.status, later.state.run_at_ms),
        (Status::Scheduled, T0 + 60 * SECOND)
    );
    complete_taken(&store, "w", &ids[1..2], T0 + 2).await;
    assert_eq!(status(&store, ids[3]).await, Some(Status::Waiting));
    complete_taken(&store, "w", &ids[2..3], T0 + 3).await;
    assert_eq!(status(&store, ids[3]).await, Some(Status::Ready));
    let store = reopen(backend, store, T0 + 4).await;
    assert_eq!(status(&store, ids[3]).await, Some(Status::Ready));
    close(store).await;
}

pub(crate) async fn a_lost_parent_cancels_or_releases_its_children(backend: &impl Backend) {
    let store = backend.open(T0).await;
    // 0 dies; 1 (cancel) and its child 2 are cancelled; 3 runs anyway; 4 waits for 0 and 5
    // and runs anyway, so still waits for 5.
    let ids = enqueue(
        &store,
        vec![
            job("d"),
            child("d", vec![After::Earlier(0)]),
            child("d", vec![After::Earlier(1)]),
            runs_anyway(child("d", vec![After::Earlier(0)])),
            job("other"),
            runs_anyway(child("d", vec![After::Earlier(0), After::Earlier(4)])),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["d"], 10, T0 + 1).await;
    assert_eq!(taken_ids(&taken), [ids[0]]);
    store
        .fail_job(ack(&taken[0]), T0 + 2, &dead(T0 + 2, "fatal"))
        .await
        .expect("failed");
    let cancelled = get(&store, ids[1]).await;
    assert_eq!(cancelled.state.status, LOST);
    assert_eq!(cancelled.state.finished_at_ms, Some(T0 + 2));
    assert_eq!(
        cancelled.state.dead_reason.as_deref(),
        Some(lost_parent_reason(ids[0]).as_str())
    );
    // Cancelled in turn, with its own parent named.
    let grandchild = get(&store, ids[2]).await;
    assert_eq!(grandchild.state.status, LOST);
    assert_eq!(
        grandchild.state.dead_reason.as_deref(),
        Some(lost_parent_reason(ids[1]).as_str())
    );
    assert_eq!(status(&store, ids[3]).await, Some(Status::Ready));
    assert_eq!(status(&store, ids[5]).await, Some(Status::Waiting));

    // A deleted parent will not complete either.
    let more = enqueue(
        &store,
        vec![
            job("e"),
            child("e", vec![After::Earlier(0)]),
            runs_anyway(child("e", vec![After::Earlier(0)])),
        ],
        T0 + 3,
    )
    .await;
    store
        .delete_jobs(
            &Selection {
                ids: Some(vec![more[0], ids[4]]),
                ..Selection::default()
            },
            T0,
        )
        .await
        .expect("deleted");
    assert_eq!(status(&store, more[1]).await, Some(LOST));
    assert_eq!(status(&store, more[2]).await, Some(Status::Ready));
    assert_eq!(status(&store, ids[5]).await, Some(Status::Ready));

    // A parent already dead at enqueue: the child is cancelled at once, or runs.
    let late = insert(
        &store,
        vec![
            child("d", vec![After::Job(ids[0])]),
            runs_anyway(child("d", vec![After::Job(ids[0])])),
        ],
        OnDuplicate::Refuse,
        T0 + 4,
    )
    .await
    .expect("enqueued");
    assert_eq!((late[0].status, late[1].status), (LOST, Status::Ready));
    let store = reopen(backend, store, T0 + 5).await;
    assert_eq!(status(&store, ids[2]).await, Some(LOST));
    assert_eq!(status(&store, late[0].id).await, Some(LOST));
    close(store).await;
}

pub(crate) async fn concurrent_completions_release_a_child_once(backend: &impl Backend) {
    let store = backend.open(T0).await;
    const PARENTS: usize = 16;
    let mut inserts: Vec<Insert> = (0..PARENTS).map(|_| job("fan")).collect();
    inserts.push(child("join", (0..PARENTS).map(After::Earlier).collect()));
    let ids = enqueue(&store, inserts, T0).await;
    let join = ids[PARENTS];
    let taken = take(&store, &["fan"], PARENTS, T0 + 1).await;
    assert_eq!(taken.len(), PARENTS);
    // Every parent completes in its own request, all at once.
    let tasks: Vec<_> = taken
        .iter()
        .map(|t| {
            let store = store.clone();
            let ack = ack(t);
            tokio::spawn(async move {
                store
                    .complete_plain(&[ack], true, T0 + 2)
                    .await
                    .expect("completed")
            })
        })
        .collect();
    for task in tasks {
        for result in task.await.expect("joined") {
            result.expect("lease valid");
        }
    }
    assert_eq!(status(&store, join).await, Some(Status::Ready));
    let once = take(&store, &["join"], 10, T0 + 3).await;
    assert_eq!(taken_ids(&once), [join]);
    assert!(take(&store, &["join"], 10, T0 + 3).await.is_empty());
    close(store).await;
}

pub(crate) async fn a_child_enqueued_while_its_parent_ends_is_never_left_waiting(
    backend: &impl Backend,
) {
    let store = backend.open(T0).await;
    const ROUNDS: usize = 12;
    const CHILDREN: usize = 6;
    for round in 0..ROUNDS {
        let now = T0 + 10 * round as u64;
        // Half the rounds complete the parent, half let it die.
        let completes = round % 2 == 0;
        let parent = enqueue(&store, vec![job("race")], now).await[0];
        let taken = take(&store, &["race"], 1, now).await;
        assert_eq!(taken_ids(&taken), [parent]);
        let ending = {
            let store = store.clone();
            let ack = ack(&taken[0]);
            tokio::spawn(async move {
                if completes {
                    for result in store
                        .complete_plain(&[ack], true, now + 1)
                        .await
                        .expect("completed")
                    {
                        result.expect("lease valid");
                    }
                } else {
                    store
                        .fail_job(ack, now + 1, &dead(now + 1, "fatal"))
                        .await
                        .expect("failed");
                }
            })
        };
        // Children enqueued at the same moment, each in its own request.
        let enqueues: Vec<_> = (0..CHILDREN)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    insert(
                        &store,
                        vec![child("race-child", vec![After::Job(parent)])],
                        OnDuplicate::Refuse,
                        now + 1,
                    )
                    .await
                    .expect("enqueued")[0]
                        .id
                })
            })
            .collect();
        ending.await.expect("joined");
        let mut children = Vec::new();
        for task in enqueues {
            children.push(task.await.expect("joined"));
        }
        children.sort_unstable();
        // Whichever came first, the child saw the parent's end exactly once.
        let expected = if completes { Status::Ready } else { LOST };
        for child in &children {
            assert_eq!(
                status(&store, *child).await,
                Some(expected),
                "round {round}"
            );
        }
        let mut listed: Vec<JobId> = store
            .children(&[parent])
            .await
            .expect("children")
            .into_iter()
            .map(|(_, child)| child)
            .collect();
        listed.sort_unstable();
        assert_eq!(listed, children, "round {round}");
        if completes {
            let released = take(&store, &["race-child"], 2 * CHILDREN, now + 2).await;
            assert_eq!(released.len(), CHILDREN, "round {round}");
            let acks: Vec<_> = released.iter().map(ack).collect();
            store
                .complete_plain(&acks, true, now + 2)
                .await
                .expect("completed");
        }
    }
    close(store).await;
}

/// A job as a source store (`tenax copy`) hands it over, waiting for `after` if any.
fn copied(id: u64, status: Status, after: &[u64], on_parent_dead: OnParentDead) -> ImportedJob {
    let mut spec = job("copied").job;
    spec.after = after.iter().map(|p| JobId(*p)).collect();
    spec.on_parent_dead = on_parent_dead;
    let mut state = JobState::new(T0, T0);
    state.status = status;
    if status.is_finished() {
        state.finished_at_ms = Some(T0);
    }
    ImportedJob::at_rest(
        Job {
            id: JobId(id),
            spec,
            state,
            errors: Vec::new(),
            held: None,
        },
        Vec::new(),
    )
}

/// Waiting jobs copied into a store keep their parents and wait for those not ended yet, as
/// they did in the source: a completed parent counted, the others awaited; the edges are there
/// for the workflow's view.
pub(crate) async fn imported_waiting_jobs_wait_as_they_did(backend: &impl Backend) {
    let store = backend.open(T0).await;
    use OnParentDead::{Cancel, Run};
    // 5 completed and 6 ready; 7 waits for both (so for 6 only), 8 for 7, 9 for 6 and runs
    // past a lost parent. Imported in two calls, parents first, as a copy does.
    store
        .import_jobs(vec![
            copied(5, Status::Completed, &[], Cancel),
            copied(6, Status::Ready, &[], Cancel),
        ])
        .await
        .expect("imported");
    store
        .import_jobs(vec![
            copied(7, Status::Waiting, &[5, 6], Cancel),
            copied(8, Status::Waiting, &[7], Cancel),
            copied(9, Status::Waiting, &[6], Run),
        ])
        .await
        .expect("imported");
    let ids = |ns: &[u64]| ns.iter().map(|n| JobId(*n)).collect::<Vec<_>>();
    assert_eq!(get(&store, JobId(7)).await.spec.after, ids(&[5, 6]));
    assert_eq!(get(&store, JobId(9)).await.spec.on_parent_dead, Run);
    assert_eq!(
        store.children(&ids(&[5, 6, 7])).await.expect("children"),
        [
            (JobId(5), JobId(7)),
            (JobId(6), JobId(7)),
            (JobId(6), JobId(9)),
            (JobId(7), JobId(8))
        ]
    );
    // Only 6 is taken; it completes, and releases 7 and 9, not 8.
    let store = reopen(backend, store, T0 + 1).await;
    let taken = take(&store, &["copied"], 10, T0 + 1).await;
    assert_eq!(taken_ids(&taken), ids(&[6]));
    complete_taken_acks(&store, &taken, T0 + 2).await;
    assert_eq!(status(&store, JobId(7)).await, Some(Status::Ready));
    assert_eq!(status(&store, JobId(9)).await, Some(Status::Ready));
    assert_eq!(status(&store, JobId(8)).await, Some(Status::Waiting));
    close(store).await;
}

async fn complete_taken_acks(
    store: &Arc<dyn Store>,
    taken: &[tenax_core::model::TakenJob],
    now_ms: u64,
) {
    let acks: Vec<_> = taken.iter().map(ack).collect();
    for result in store
        .complete_plain(&acks, true, now_ms)
        .await
        .expect("completed")
    {
        result.expect("lease valid");
    }
}

/// Every other way a job ends settles its waiting children in the same commit: a lease that
/// expires into death, an expiry, a pop, a checked delete and a queue's deletion lose the
/// parent (its child is cancelled); a completion without retention releases the child and
/// takes the edge along; a purge of a completed parent takes its edge along.
pub(crate) async fn every_end_of_a_parent_settles_its_children(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let queues = ["lease", "ttl", "pop", "checked", "doomed", "gone", "kept"];
    let mut parents = Vec::new();
    for queue in queues {
        let mut parent = job(queue);
        if queue == "ttl" {
            parent = parent.expires(T0 + 5 * SECOND);
        }
        parents.push(enqueue(&store, vec![parent], T0).await[0]);
    }
    let children = enqueue(
        &store,
        parents
            .iter()
            .map(|p| child("kids", vec![After::Job(*p)]))
            .collect(),
        T0,
    )
    .await;
    let [lease, ttl, pop, checked, doomed, gone, kept] = parents[..] else {
        unreachable!("seven parents");
    };
    let child_of = |parent: JobId| {
        let at = parents.iter().position(|p| *p == parent);
        children[at.expect("one of the parents")]
    };

    let taken = take(&store, &["lease"], 1, T0 + 1).await;
    assert_eq!(taken_ids(&taken), [lease]);
    let expired = store
        .expire_leases(T0 + 31 * SECOND, 10, &dead(T0 + 31 * SECOND, "lease ended"))
        .await
        .expect("expired");
    assert_eq!(expired, 1);
    assert_eq!(status(&store, child_of(lease)).await, Some(LOST));

    assert_eq!(store.expire_jobs(T0 + 32 * SECOND, 100).await, Ok(1));
    assert_eq!(status(&store, ttl).await, None);
    assert_eq!(status(&store, child_of(ttl)).await, Some(LOST));

    let popped = store
        .pop_jobs(&["pop".to_owned()], 10, T0 + 33 * SECOND)
        .await
        .expect("popped");
    assert_eq!(popped.iter().map(|j| j.id).collect::<Vec<_>>(), [pop]);
    assert_eq!(status(&store, child_of(pop)).await, Some(LOST));

    let deleted = store
        .delete_checked(&[checked], &|_| true, T0 + 33 * SECOND)
        .await
        .expect("deleted");
    assert!(deleted[0].deleted);
    assert_eq!(status(&store, child_of(checked)).await, Some(LOST));

    assert_eq!(store.delete_queue("doomed", T0 + 33 * SECOND).await, Ok(1));
    assert_eq!(status(&store, child_of(doomed)).await, Some(LOST));

    let taken = take(&store, &["gone"], 1, T0 + 34 * SECOND).await;
    assert_eq!(taken_ids(&taken), [gone]);
    for result in store
        .complete_plain(&[ack(&taken[0])], false, T0 + 35 * SECOND)
        .await
        .expect("completed")
    {
        result.expect("lease valid");
    }
    assert_eq!(status(&store, gone).await, None);
    assert_eq!(status(&store, child_of(gone)).await, Some(Status::Ready));
    assert!(store.children(&[gone]).await.expect("children").is_empty());

    complete_taken(&store, "kept", &[kept], T0 + 36 * SECOND).await;
    assert_eq!(status(&store, child_of(kept)).await, Some(Status::Ready));
    assert_eq!(
        store.children(&[kept]).await.expect("children"),
        [(kept, child_of(kept))]
    );
    let purged = store
        .purge_finished(T0 + 37 * SECOND, 0, 100)
        .await
        .expect("purged");
    assert_eq!(purged, 1);
    assert_eq!(status(&store, kept).await, None);
    assert!(store.children(&[kept]).await.expect("children").is_empty());
    assert_eq!(status(&store, child_of(kept)).await, Some(Status::Ready));
    close(store).await;
}

async fn replay(store: &Arc<dyn Store>, ids: &[JobId], now_ms: u64) -> Replayed {
    store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: Some(ids.to_vec()),
                    ..Selection::default()
                },
                policy: None,
                reset_attempts: false,
            },
            now_ms,
        )
        .await
        .expect("replayed")
}

/// `id`'s status and `dead_reason`.
async fn ended(store: &Arc<dyn Store>, id: JobId) -> (Status, Option<String>) {
    let state = get(store, id).await.state;
    (state.status, state.dead_reason)
}

/// Replaying a parent that did not complete resumes what it cancelled: its children cancelled
/// because of it, and theirs down the graph, wait again, each for its parents that have not
/// completed; a child that another lost parent still blocks stays cancelled, and one that ran
/// past the loss is left as it is. A resumed batch member is pending in its batch again.
pub(crate) async fn a_replayed_parent_resumes_its_workflow(backend: &impl Backend) {
    let store = backend.open(T0).await;
    // X, W, Y, Z and V stand alone; then A → B → C, D after A running anyway, E after A and
    // X, H after A and W, F after Y and Z, G after A and V.
    let others = enqueue(
        &store,
        vec![job("x"), job("w"), job("y"), job("z"), job("v")],
        T0,
    )
    .await;
    let [x, w, y, z, v] = others[..] else {
        unreachable!("five jobs");
    };
    let ids = enqueue(
        &store,
        vec![
            job("a"),
            child("b", vec![After::Earlier(0)]),
            child("c", vec![After::Earlier(1)]),
            runs_anyway(child("d", vec![After::Earlier(0)])),
            child("e", vec![After::Earlier(0), After::Job(x)]),
            child("h", vec![After::Earlier(0), After::Job(w)]),
            child("f", vec![After::Job(y), After::Job(z)]),
            child("g", vec![After::Earlier(0), After::Job(v)]),
        ],
        T0,
    )
    .await;
    let [a, b, c, d, e, h, f, g] = ids[..] else {
        unreachable!("eight jobs");
    };
    let edges = [
        (x, e),
        (w, h),
        (y, f),
        (z, f),
        (v, g),
        (a, b),
        (a, d),
        (a, e),
        (a, h),
        (a, g),
        (b, c),
    ];
    let parents = [x, w, y, z, v, a, b];
    assert_eq!(store.children(&parents).await.expect("children"), edges);
    complete_taken(&store, "x", &[x], T0 + 1).await;
    // A dies: B, C, E, H and G are cancelled because of it (C because of B), D is released. W
    // dies next (H was cancelled already); Y, then Z, die: F is cancelled because of Y.
    kill(&store, "a", &[a], T0 + 2).await;
    kill(&store, "w", &[w], T0 + 3).await;
    kill(&store, "y", &[y], T0 + 4).await;
    kill(&store, "z", &[z], T0 + 5).await;
    for (job, parent) in [(b, a), (c, b), (e, a), (h, a), (f, y), (g, a)] {
        let reason = lost_parent_reason(parent);
        assert_eq!(ended(&store, job).await, (LOST, Some(reason)), "job {job}");
    }
    assert_eq!(status(&store, d).await, Some(Status::Ready));

    let replayed = replay(&store, &[a], T0 + 6).await;
    assert_eq!(replayed.ids, [a]);
    assert!(replayed.skipped.is_empty());
    assert_eq!(status(&store, a).await, Some(Status::Ready));
    for job in [b, c, e, g] {
        let resumed = get(&store, job).await;
        assert_eq!(resumed.state.status, Status::Waiting, "job {job}");
        assert_eq!(resumed.state.finished_at_ms, None, "job {job}");
        assert_eq!(resumed.state.dead_reason, None, "job {job}");
    }
    // D ran past A's death: left as it is. H waits for dead W too: still cancelled.
    assert_eq!(status(&store, d).await, Some(Status::Ready));
    assert_eq!(ended(&store, h).await, (LOST, Some(lost_parent_reason(a))));
    // Replaying Z, which did not cancel F (Y did), leaves F cancelled.
    assert_eq!(replay(&store, &[z], T0 + 7).await.ids, [z]);
    assert_eq!(ended(&store, f).await, (LOST, Some(lost_parent_reason(y))));
    // Nothing waits where it cannot be taken, and the edges are as they were.
    let resumed = ["b", "c", "e", "h", "f", "g"];
    assert!(take(&store, &resumed, 10, T0 + 7).await.is_empty());
    assert_eq!(store.children(&parents).await.expect("children"), edges);

    let store = reopen(backend, store, T0 + 8).await;
    assert_eq!(status(&store, b).await, Some(Status::Waiting));
    // A completes: B (waiting for A only) and E (X completed long ago) are released; C still
    // waits for B, and G for V.
    complete_taken(&store, "a", &[a], T0 + 9).await;
    assert_eq!(status(&store, b).await, Some(Status::Ready));
    assert_eq!(status(&store, e).await, Some(Status::Ready));
    assert_eq!(status(&store, c).await, Some(Status::Waiting));
    assert_eq!(status(&store, g).await, Some(Status::Waiting));
    complete_taken(&store, "v", &[v], T0 + 9).await;
    assert_eq!(status(&store, g).await, Some(Status::Ready));
    assert_eq!(ended(&store, h).await, (LOST, Some(lost_parent_reason(a))));
    complete_taken(&store, "b", &[b], T0 + 10).await;
    assert_eq!(status(&store, c).await, Some(Status::Ready));
    complete_taken(&store, "c", &[c], T0 + 11).await;
    complete_taken(&store, "e", &[e], T0 + 11).await;

    // A batch member cancelled because of its parent, resumed, is pending in its batch again.
    let p = enqueue(&store, vec![job("p")], T0 + 12).await[0];
    let new_batch = NewBatch {
        description: None,
        on_complete: None,
        on_success: None,
        queues: vec!["m".to_owned(), "n".to_owned()],
    };
    let (made, added) = store
        .add_to_batch(
            BatchTarget::New(Box::new(new_batch)),
            vec![child("m", vec![After::Job(p)]), job("n")],
            false,
            current(&store).await,
            T0 + 12,
        )
        .await
        .expect("added");
    let members: Vec<JobId> = added.into_iter().flatten().map(|m| m.id).collect();
    let m = members[0];
    assert_eq!(status(&store, m).await, Some(Status::Waiting));
    kill(&store, "p", &[p], T0 + 13).await;
    let counts = |batch: tenax_core::model::Batch| {
        let counts = batch.counts;
        (counts.total, counts.pending, counts.cancelled)
    };
    let batch = store.batch(made.id).await.expect("read").expect("stored");
    assert_eq!(counts(batch), (2, 1, 1));
    replay(&store, &[p], T0 + 14).await;
    let resumed = get(&store, m).await;
    assert_eq!(resumed.state.status, Status::Waiting);
    assert_eq!(resumed.spec.batch, Some(made.id));
    let batch = store.batch(made.id).await.expect("read").expect("stored");
    assert_eq!(counts(batch), (2, 2, 0));
    let store = reopen(backend, store, T0 + 15).await;
    complete_taken(&store, "p", &[p], T0 + 16).await;
    complete_taken(&store, "m", &members[..1], T0 + 17).await;
    complete_taken(&store, "n", &members[1..], T0 + 17).await;
    let closed = store.close_batch(made.id, T0 + 18).await.expect("closed");
    assert_eq!(
        (
            closed.counts.pending,
            closed.counts.completed,
            closed.counts.cancelled
        ),
        (0, 2, 0)
    );
    close(store).await;
}

/// A replay that resumes a child and the end of the child's other parent, at the same moment:
/// whichever comes first, the child counts that parent's end exactly once, so the replayed
/// parent's completion releases it (it is never left waiting, nor released early).
pub(crate) async fn a_parent_ending_while_a_replay_resumes_its_child_is_counted_once(
    backend: &impl Backend,
) {
    let store = backend.open(T0).await;
    const ROUNDS: usize = 12;
    for round in 0..ROUNDS {
        let now = T0 + 10 * round as u64;
        // The other parent completes in half the rounds, and dies in the others.
        let completes = round % 2 == 0;
        let ids = enqueue(
            &store,
            vec![
                job("lost"),
                job("other"),
                child("joined", vec![After::Earlier(0), After::Earlier(1)]),
            ],
            now,
        )
        .await;
        let [lost, other, joined] = ids[..] else {
            unreachable!("three jobs");
        };
        kill(&store, "lost", &[lost], now).await;
        assert_eq!(status(&store, joined).await, Some(LOST), "round {round}");
        let taken = take(&store, &["other"], 1, now + 1).await;
        assert_eq!(taken_ids(&taken), [other], "round {round}");
        let ending = {
            let store = store.clone();
            let ack = ack(&taken[0]);
            tokio::spawn(async move {
                if completes {
                    for result in store
                        .complete_plain(&[ack], true, now + 2)
                        .await
                        .expect("completed")
                    {
                        result.expect("lease valid");
                    }
                } else {
                    store
                        .fail_job(ack, now + 2, &dead(now + 2, "fatal"))
                        .await
                        .expect("failed");
                }
            })
        };
        assert_eq!(replay(&store, &[lost], now + 2).await.ids, [lost]);
        ending.await.expect("joined");
        if !completes {
            // Resumed before the other parent died (and then cancelled because of it), or
            // left cancelled because it was dead already.
            assert_eq!(status(&store, joined).await, Some(LOST), "round {round}");
            complete_taken(&store, "lost", &[lost], now + 3).await;
            assert_eq!(status(&store, joined).await, Some(LOST), "round {round}");
            continue;
        }
        assert_eq!(
            status(&store, joined).await,
            Some(Status::Waiting),
            "round {round}"
        );
        complete_taken(&store, "lost", &[lost], now + 3).await;
        assert_eq!(
            status(&store, joined).await,
            Some(Status::Ready),
            "round {round}"
        );
        complete_taken(&store, "joined", &[joined], now + 4).await;
    }
    close(store).await;
}
