//! `JobCuration`: what operators do to jobs.
//!
//! | operation        | cases |
//! |------------------|-------|
//! | `replay_jobs`    | `dead_jobs_are_replayed`, `replay_respects_unique_keys` |
//! | `run_now`        | `runs_now_and_replays_mark_the_next_run` |
//! | `delete_jobs`    | `jobs_are_deleted_by_selection` |
//! | `delete_checked` | `peeks_and_checked_deletes_see_the_current_state` |

use std::sync::{Arc, Mutex};

use tenax_core::model::{
    Checked, ClaimId, JobFilter, JobId, JobPeek, KeyHolder, NotReplayed, OnDuplicate, Replay,
    Replayed, Selection, Status, StoredPolicy, Trigger,
};
use tenax_core::store::{DecideContext, StoreError, Transition};

use super::support::*;

pub(crate) async fn dead_jobs_are_replayed(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![job("q"), job("q").kind("other"), job("r"), job("q")],
        T0,
    )
    .await;
    kill(&store, "q", &ids[..2], T0).await;
    kill(&store, "r", &ids[2..3], T0).await;
    let ready = ids[3];
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ready]);

    // By id: only dead jobs are replayed; failures are kept without a reset.
    let replayed = store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: Some(vec![ids[0], ready]),
                    filter: JobFilter::default(),
                },
                policy: None,
                reset_attempts: false,
            },
            T0 + 5,
        )
        .await
        .expect("replayed");
    assert_eq!(
        replayed,
        Replayed {
            ids: vec![ids[0]],
            skipped: vec![(ready, NotReplayed::NotDead(Status::InFlight))],
        }
    );
    let shown = get(&store, ids[0]).await;
    assert_eq!(
        (
            shown.state.status,
            shown.state.failures,
            shown.state.run_at_ms
        ),
        (Status::Ready, 1, T0 + 5)
    );
    assert_eq!(
        (shown.state.finished_at_ms, shown.state.dead_reason.clone()),
        (None, None)
    );
    assert_eq!(shown.errors.len(), 1, "the history is kept");
    assert_eq!(status(&store, ready).await, Some(Status::InFlight));

    // By filter, with a new policy and a fresh attempt count.
    let policy = fixed(90 * SECOND);
    let replayed = store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: None,
                    filter: JobFilter {
                        queue: Some("q".into()),
                        status: Some(Status::Dead),
                        kind: Some("other".into()),
                        ..JobFilter::default()
                    },
                },
                policy: Some(StoredPolicy::new(policy.clone())),
                reset_attempts: true,
            },
            T0 + 6,
        )
        .await
        .expect("replayed");
    assert_eq!(replayed.ids, [ids[1]]);
    assert!(replayed.skipped.is_empty());
    let shown = get(&store, ids[1]).await;
    assert_eq!(
        (
            shown.state.failures,
            shown.state.first_failure_at_ms,
            shown.state.last_delay_ms
        ),
        (0, None, None)
    );
    assert_eq!(shown.spec.policy, Some(StoredPolicy::new(policy.clone())));
    assert_eq!(
        status(&store, ids[2]).await,
        Some(Status::Dead),
        "other queue"
    );

    // The replayed job fails again: the decision sees the new policy and attempt 1, and the
    // new error is added to the history, not written over it.
    let taken = take(&store, &["q"], 10, T0 + 7).await;
    let again = taken.iter().find(|t| t.id == ids[1]).expect("taken");
    assert_eq!(again.attempt, 1);
    let seen = Mutex::new(None);
    store
        .fail_job(ack(again), T0 + 7, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("not poisoned") = ctx.job_policy.cloned();
            dead(T0 + 7, "again")(ctx)
        })
        .await
        .expect("failed");
    assert_eq!(
        seen.into_inner().expect("not poisoned"),
        Some(policy.clone())
    );
    let errors: Vec<(u32, String)> = get(&store, ids[1])
        .await
        .errors
        .into_iter()
        .map(|e| (e.attempt, e.message))
        .collect();
    assert_eq!(errors, [(1, "fatal".to_owned()), (1, "again".to_owned())]);

    let store = reopen(backend, store, T0 + 8).await;
    assert_eq!(
        get(&store, ids[1]).await.spec.policy,
        Some(StoredPolicy::new(policy.clone()))
    );
    close(store).await;
}

/// A replay never makes two unfinished jobs share a unique key: a dead job whose key an
/// unfinished job holds stays dead and is reported; once the key is free it is replayed and
/// holds the key again.
pub(crate) async fn replay_respects_unique_keys(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let old = enqueue(&store, vec![job("q").key("k")], T0).await[0];
    kill(&store, "q", &[old], T0).await;
    let new = enqueue(&store, vec![job("q").key("k")], T0).await[0];
    let by_id = |ids: Vec<JobId>| Replay {
        selection: Selection {
            ids: Some(ids),
            filter: JobFilter {
                status: Some(Status::Dead),
                ..JobFilter::default()
            },
        },
        policy: None,
        reset_attempts: false,
    };
    let replayed = store
        .replay_jobs(&by_id(vec![old]), T0 + 1)
        .await
        .expect("answered");
    assert_eq!(
        replayed,
        Replayed {
            ids: vec![],
            skipped: vec![(
                old,
                NotReplayed::KeyHeld {
                    key: "k".into(),
                    holder: new
                }
            )],
        }
    );
    assert_eq!(status(&store, old).await, Some(Status::Dead));
    // By filter too.
    let all_dead = Replay {
        selection: Selection {
            ids: None,
            filter: JobFilter {
                status: Some(Status::Dead),
                ..JobFilter::default()
            },
        },
        policy: None,
        reset_attempts: false,
    };
    let replayed = store
        .replay_jobs(&all_dead, T0 + 1)
        .await
        .expect("answered");
    assert!(replayed.ids.is_empty());
    assert_eq!(replayed.skipped.len(), 1);
    // Two dead jobs with one key: only the first comes back.
    kill(&store, "q", &[new], T0 + 2).await;
    let replayed = store
        .replay_jobs(&by_id(vec![old, new, JobId(999_999)]), T0 + 3)
        .await
        .expect("answered");
    assert_eq!(replayed.ids, [old]);
    assert_eq!(
        replayed.skipped,
        [
            (
                new,
                NotReplayed::KeyHeld {
                    key: "k".into(),
                    holder: old
                }
            ),
            (JobId(999_999), NotReplayed::NotFound),
        ]
    );
    let refused = insert(&store, vec![job("q").key("k")], OnDuplicate::Refuse, T0 + 3).await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { holder: KeyHolder::Job(h), .. }) if h == old),
        "{refused:?}"
    );
    let store = reopen(backend, store, T0 + 4).await;
    let refused = insert(&store, vec![job("q").key("k")], OnDuplicate::Refuse, T0 + 4).await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { holder: KeyHolder::Job(h), .. }) if h == old),
        "{refused:?}"
    );
    close(store).await;
}

pub(crate) async fn jobs_are_deleted_by_selection(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").key("k"),
            job("q").kind("x"),
            job("q").kind("x"),
            job("r").kind("x"),
            job("q"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[0]]);

    // By id (an in-flight job too), ignoring ids that do not exist.
    let deleted = store
        .delete_jobs(
            &Selection {
                ids: Some(vec![ids[0], JobId(777_777)]),
                filter: JobFilter::default(),
            },
            T0,
        )
        .await
        .expect("deleted");
    assert_eq!(deleted, [ids[0]]);
    assert!(store.get_job(ids[0]).await.expect("readable").is_none());
    let results = store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("commit");
    assert_eq!(results, [Err(StoreError::NotFound(ids[0]))]);
    // Its unique key is free.
    enqueue(&store, vec![job("q").key("k")], T0).await;

    // By filter: queue and type.
    let deleted = store
        .delete_jobs(
            &Selection {
                ids: None,
                filter: JobFilter {
                    queue: Some("q".into()),
                    status: None,
                    kind: Some("x".into()),
                    ..JobFilter::default()
                },
            },
            T0,
        )
        .await
        .expect("deleted");
    assert_eq!(deleted, [ids[1], ids[2]]);
    // Ids narrowed by the filter.
    let deleted = store
        .delete_jobs(
            &Selection {
                ids: Some(vec![ids[3], ids[4]]),
                filter: JobFilter {
                    queue: Some("r".into()),
                    status: Some(Status::Ready),
                    kind: None,
                    ..JobFilter::default()
                },
            },
            T0,
        )
        .await
        .expect("deleted");
    assert_eq!(deleted, [ids[3]]);
    let left = list(&store, JobFilter::default(), None, 100).await;
    assert_eq!(left.len(), 2);
    assert_eq!(left[0], ids[4]);

    let store = reopen(backend, store, T0).await;
    for id in &ids[..4] {
        assert!(
            store.get_job(*id).await.expect("readable").is_none(),
            "job {id}"
        );
    }
    close(store).await;
}

/// Run-now makes scheduled jobs ready at once, and their next run says an operator asked for
/// it; a replayed job's next run says it was replayed. Both survive a restart.
pub(crate) async fn runs_now_and_replays_mark_the_next_run(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").at(T0 + 60 * SECOND),
            job("q").at(T0 + 60 * SECOND),
            job("q"),
        ],
        T0,
    )
    .await;
    let ran = store
        .run_now(&[ids[1], ids[2], JobId(999_999)], T0 + 5)
        .await
        .expect("ran");
    assert_eq!(ran, [ids[1]], "only a scheduled job runs now");
    let shown = get(&store, ids[1]).await;
    assert_eq!(
        (
            shown.state.status,
            shown.state.run_at_ms,
            shown.state.trigger
        ),
        (Status::Ready, T0 + 5, Trigger::Manual)
    );
    assert_eq!(get(&store, ids[0]).await.state.status, Status::Scheduled);
    assert_eq!(get(&store, ids[2]).await.state.trigger, Trigger::Scheduled);

    let store = reopen(backend, store, T0 + 10).await;
    assert_eq!(get(&store, ids[1]).await.state.trigger, Trigger::Manual);
    let taken = take(&store, &["q"], 2, T0 + 10).await;
    let triggers: Vec<(JobId, Trigger)> = taken.iter().map(|t| (t.id, t.trigger)).collect();
    assert_eq!(
        triggers,
        [(ids[1], Trigger::Manual), (ids[2], Trigger::Scheduled)]
    );
    let dead = taken.iter().find(|t| t.id == ids[2]).expect("taken");
    store
        .fail_job(ack(dead), T0 + 10, &dead_now(T0 + 10))
        .await
        .expect("failed");
    store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: Some(vec![ids[2]]),
                    filter: JobFilter::default(),
                },
                policy: None,
                reset_attempts: false,
            },
            T0 + 20,
        )
        .await
        .expect("replayed");
    assert_eq!(get(&store, ids[2]).await.state.trigger, Trigger::Replay);
    let store = reopen(backend, store, T0 + 20).await;
    let taken = take(&store, &["q"], 5, T0 + 20).await;
    let replayed = taken.iter().find(|t| t.id == ids[2]).expect("taken again");
    assert_eq!(replayed.trigger, Trigger::Replay);
    close(store).await;
}

/// A decision: dead at `now_ms`, its state cleared of any trigger as the engine's are.
fn dead_now(now_ms: u64) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
    let kill = dead(now_ms, "fatal");
    move |ctx| {
        let mut transition = kill(ctx);
        transition.state.trigger = Trigger::Scheduled;
        transition
    }
}

/// Peeks show a job's queue and state without its body; a checked delete judges each job as it
/// is under the store's serialisation, and deletes only what the check accepts.
pub(crate) async fn peeks_and_checked_deletes_see_the_current_state(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").expires(T0 + 60 * SECOND),
            job("q"),
            job("q"),
            job("r").at(T0 + 5 * SECOND),
            job("q"),
        ],
        T0,
    )
    .await;
    let claimed = take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(3)), T0).await;
    let plain = take_on(&store, &["q"], 1, 20 * SECOND, None, T0).await;
    assert_eq!(
        taken_ids(&[claimed.clone(), plain.clone()].concat()),
        ids[..2]
    );
    kill(&store, "q", &[ids[2]], T0).await;
    let missing = JobId(999_999);
    let peek = |queue: &str,
                status: Status,
                failures: u32,
                expires: Option<u64>,
                claim: Option<ClaimId>,
                lease: Option<u64>| {
        Some(JobPeek {
            queue: Arc::from(queue),
            status,
            failures,
            expires_at_ms: expires,
            claim,
            lease_expires_at_ms: lease,
        })
    };
    let want = [
        peek(
            "q",
            Status::InFlight,
            0,
            Some(T0 + 60 * SECOND),
            Some(ClaimId(3)),
            Some(T0 + 30 * SECOND),
        ),
        peek("q", Status::InFlight, 0, None, None, Some(T0 + 20 * SECOND)),
        peek("q", Status::Dead, 1, None, None, None),
        peek("r", Status::Scheduled, 0, None, None, None),
        peek("q", Status::Ready, 0, None, None, None),
        None,
    ];
    let peeks = store
        .peek_jobs(&[ids[0], ids[1], ids[2], ids[3], ids[4], missing, ids[0]])
        .await
        .expect("peeks");
    assert_eq!(peeks[..6], want);
    assert_eq!(peeks[6], want[0], "one answer per id, repeats too");
    assert!(store.peek_jobs(&[]).await.expect("peeks").is_empty());

    // Deletes what no lease holds: the check sees each job as it is, and is not asked about a
    // job that does not exist.
    let seen = Mutex::new(Vec::new());
    let checked = store
        .delete_checked(
            &[ids[0], ids[1], ids[2], missing, ids[4]],
            &|peek: &JobPeek| {
                seen.lock().expect("not poisoned").push(peek.status);
                peek.status != Status::InFlight
            },
            T0,
        )
        .await
        .expect("checked");
    let check = |id: JobId, peek: &Option<JobPeek>, deleted: bool| Checked {
        id,
        peek: peek.clone(),
        deleted,
    };
    assert_eq!(
        checked,
        [
            check(ids[0], &want[0], false),
            check(ids[1], &want[1], false),
            check(ids[2], &want[2], true),
            check(missing, &None, false),
            check(ids[4], &want[4], true),
        ]
    );
    assert_eq!(
        *seen.lock().expect("not poisoned"),
        [
            Status::InFlight,
            Status::InFlight,
            Status::Dead,
            Status::Ready
        ]
    );
    assert_eq!(
        store.peek_jobs(&[ids[2], ids[4]]).await.expect("peeks"),
        [None, None]
    );
    // A job held by a claim, deleted under that claim: gone from the claim too.
    let checked = store
        .delete_checked(
            &[ids[0], ids[1]],
            &|peek: &JobPeek| peek.claim == Some(ClaimId(3)),
            T0,
        )
        .await
        .expect("checked");
    assert_eq!(
        checked.iter().map(|c| c.deleted).collect::<Vec<_>>(),
        [true, false]
    );
    assert!(
        store
            .claim(ClaimId(3))
            .await
            .expect("claim")
            .jobs
            .is_empty()
    );
    let results = store
        .complete_plain(&[ack(&claimed[0]), ack(&plain[0])], true, T0)
        .await
        .expect("commit");
    assert_eq!(results, [Err(StoreError::NotFound(ids[0])), Ok(())]);

    let store = reopen(backend, store, T0).await;
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[1], ids[3]]
    );
    close(store).await;
}
