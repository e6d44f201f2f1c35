//! `StoreLifecycle`: the backend as a whole, and opening a store.
//!
//! | operation       | cases |
//! |-----------------|-------|
//! | `properties`    | `leases_across_a_restart_follow_the_declared_property`, every reopen; `embedded_properties`, `postgres_properties` |
//! | `signals`       | `signals_announce_what_may_have_changed` (ready, schedule, subscriptions, released); `endpoint_states_change_atomically_and_are_kept` (`endpoints.rs`) |
//! | `lead`          | `a_lone_server_leads` |
//! | `close`         | `close_keeps_everything_acknowledged`, `embedded_unsynced_close_keeps_everything_acknowledged`, every reopen |
//! | `servers`       | `servers_count_those_sharing_the_store` |
//! | (opening)       | format refusal: `newer_formats_are_refused` |

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tenax_core::auth::Role;
use tenax_core::model::subscription::delivery_queue;
use tenax_core::model::{
    Ack, AttemptResult, ClaimId, JobFilter, JobId, OnDuplicate, QueueConfig, Replay, Selection,
    Status, StoredPolicy, Subscription,
};
use tenax_core::store::{Store, StoreError, StoreProperties, TakeRequest};

use super::support::*;

/// What a restart does to leases is the backend's declared property. Without durable leases,
/// every job in flight is ready again: a restart is not an attempt, the old lease tokens are
/// refused, and claims hold nothing. With them, the jobs are still leased to the same tokens
/// and claims until the same time, and their holders complete them.
pub(crate) async fn leases_across_a_restart_follow_the_declared_property(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let properties = store.properties();
    let ids = enqueue(
        &store,
        vec![
            job("q").priority(2),
            job("q").priority(1),
            job("q"),
            job("q").priority(-1),
        ],
        T0,
    )
    .await;
    let plain = take_on(&store, &["q"], 1, 30 * SECOND, None, T0).await;
    let streamed = take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(5)), T0).await;
    // The third fails once and is taken again: its second attempt is in flight.
    let failing = take(&store, &["q"], 1, T0).await;
    store
        .fail_job(ack(&failing[0]), T0, &retry(T0, 0, "boom"))
        .await
        .expect("failed");
    let retried = take_on(&store, &["q"], 1, 40 * SECOND, None, T0 + 1).await;
    let in_flight = [&plain[0], &streamed[0], &retried[0]];
    assert_eq!(
        in_flight
            .iter()
            .map(|j| (j.id, j.attempt))
            .collect::<Vec<_>>(),
        [(ids[0], 1), (ids[1], 1), (ids[2], 2)]
    );
    let acks: Vec<Ack> = in_flight.iter().map(|j| ack(j)).collect();

    let now = T0 + SECOND;
    let store = reopen(backend, store, now).await;
    let peeks = store.peek_jobs(&ids[..3]).await.expect("peeks");
    if properties.durable_leases {
        for (job, peek) in in_flight.iter().zip(&peeks) {
            let peek = peek.as_ref().expect("the job");
            assert_eq!(
                (peek.status, peek.lease_expires_at_ms),
                (Status::InFlight, Some(job.lease_expires_at_ms)),
                "job {}",
                job.id
            );
        }
        assert_eq!(peeks[1].as_ref().and_then(|p| p.claim), Some(ClaimId(5)));
        let claimed: Vec<JobId> = store
            .claim(ClaimId(5))
            .await
            .expect("claim")
            .jobs
            .iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(claimed, [ids[1]]);
        assert_eq!(taken_ids(&take(&store, &["q"], 10, now).await), [ids[3]]);
        let results = store
            .complete_plain(&acks, true, now)
            .await
            .expect("commit");
        assert_eq!(
            results,
            [Ok(()), Ok(()), Ok(())],
            "the holders still hold them"
        );
    } else {
        let seen: Vec<(Status, u32, Option<ClaimId>, Option<u64>)> = peeks
            .iter()
            .map(|p| {
                let p = p.as_ref().expect("the job");
                (p.status, p.failures, p.claim, p.lease_expires_at_ms)
            })
            .collect();
        assert_eq!(
            seen,
            [
                (Status::Ready, 0, None, None),
                (Status::Ready, 0, None, None),
                (Status::Ready, 1, None, None)
            ],
            "ready again, and a restart is not an attempt"
        );
        assert!(
            store
                .claim(ClaimId(5))
                .await
                .expect("claim")
                .jobs
                .is_empty()
        );
        let results = store
            .complete_plain(&acks, true, now)
            .await
            .expect("commit");
        assert_eq!(
            results,
            ids[..3]
                .iter()
                .map(|id| Err(StoreError::NotInFlight {
                    id: *id,
                    status: Status::Ready
                }))
                .collect::<Vec<_>>(),
            "the old leases are gone"
        );
        let again = take(&store, &["q"], 10, now).await;
        assert_eq!(taken_ids(&again), ids);
        assert_eq!(
            again.iter().map(|j| j.attempt).collect::<Vec<_>>(),
            [1, 1, 2, 1]
        );
        assert!(
            again
                .iter()
                .all(|j| acks.iter().all(|a| a.lease != j.lease_token)),
            "new leases have new tokens"
        );
    }
    close(store).await;
}

/// The signals announce what may have happened: jobs ready (enqueue, promotion, retry, replay,
/// release, an ended lease or claim, a resumed queue), an earlier schedule, a subscription
/// created, changed or deleted. A waiter registered before the change is woken.
pub(crate) async fn signals_announce_what_may_have_changed(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let signals = store.signals();
    let (ready, schedule) = (&signals.ready, &signals.schedule);
    let now = T0 + SECOND;

    let ids = fires(ready, "a ready job", enqueue(&store, vec![job("q")], T0)).await;
    let later = fires(
        schedule,
        "a scheduled job",
        enqueue(&store, vec![job("q").at(now)], T0),
    )
    .await;
    let promoted = fires(ready, "a promotion", store.promote_due(now, 10)).await;
    assert_eq!(promoted, Ok(1));
    let taken = take(&store, &["q"], 2, now).await;
    assert_eq!(taken_ids(&taken), [ids[0], later[0]]);
    fires(
        schedule,
        "a scheduled retry",
        store.fail_job(ack(&taken[0]), now, &retry(now, 5 * SECOND, "x")),
    )
    .await
    .expect("failed");
    fires(
        ready,
        "a retry due at once",
        store.fail_job(ack(&taken[1]), now, &retry(now, 0, "x")),
    )
    .await
    .expect("failed");
    let moving = later[0];
    take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(6)), now).await;
    let released = fires(ready, "a release", store.release_claim(ClaimId(6))).await;
    assert_eq!(released, Ok(1));
    take_on(&store, &["q"], 1, SECOND, None, now).await;
    let at = now + SECOND;
    let expired = fires(
        ready,
        "an expired lease",
        store.expire_leases(at, 10, &again(at, "lost")),
    )
    .await;
    assert_eq!(expired, Ok(1));
    take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(7)), at).await;
    let ended = fires(
        ready,
        "an ended claim",
        store.end_claim(ClaimId(7), at, &again(at, "deleted")),
    )
    .await;
    assert_eq!(ended, Ok(1));
    kill(&store, "q", &[moving], at).await;
    let replay = Replay {
        selection: Selection {
            ids: Some(vec![moving]),
            filter: JobFilter::default(),
        },
        policy: None,
        reset_attempts: false,
    };
    let replayed = fires(ready, "a replay", store.replay_jobs(&replay, at)).await;
    assert_eq!(replayed.map(|r| r.ids), Ok(vec![moving]));
    let paused = |paused: bool| {
        move |_: Option<&QueueConfig>| {
            Some(QueueConfig {
                paused,
                ..QueueConfig::default()
            })
        }
    };
    store
        .update_queue("q", &paused(true))
        .await
        .expect("paused");
    fires(
        ready,
        "a resumed queue",
        store.update_queue("q", &paused(false)),
    )
    .await
    .expect("resumed");

    // Acknowledgements release room (a full stream waits for them).
    let released = &signals.released;
    enqueue(&store, vec![job("acks"), job("acks")], at).await;
    let held = take(&store, &["acks"], 2, at).await;
    let done = fires(
        released,
        "a completion",
        store.complete_plain(&[ack(&held[0])], true, at),
    )
    .await
    .expect("completed");
    assert_eq!(done, [Ok(())]);
    fires(
        released,
        "a failure",
        store.fail_job(ack(&held[1]), at, &retry(at, 5 * SECOND, "x")),
    )
    .await
    .expect("failed");
    let doomed = enqueue(&store, vec![job("acks")], at).await;
    take(&store, &["acks"], 1, at).await;
    let selection = Selection {
        ids: Some(doomed.clone()),
        filter: JobFilter::default(),
    };
    let deleted = fires(released, "a deletion", store.delete_jobs(&selection, T0)).await;
    assert_eq!(deleted, Ok(doomed));

    let subscriptions = &signals.subscriptions;
    let (sub, _) = fires(
        subscriptions,
        "a new subscription",
        store.insert_subscription(subscription("q", "https://a.example/")),
    )
    .await
    .expect("stored");
    let disable = |current: &Subscription| {
        let mut next = current.clone();
        next.enabled = false;
        Some(next)
    };
    fires(
        subscriptions,
        "a changed subscription",
        store.update_subscription(sub.id, &disable),
    )
    .await
    .expect("changed");
    fires(
        subscriptions,
        "a deleted subscription",
        store.delete_subscription(sub.id),
    )
    .await
    .expect("deleted");
    close(store).await;
}

/// A server alone on the backend is granted the lead for upkeep, and keeps it.
pub(crate) async fn a_lone_server_leads(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.lead().await, Ok(true));
    assert_eq!(store.lead().await, Ok(true), "and keeps it");
    let store = reopen(backend, store, T0).await;
    assert_eq!(store.lead().await, Ok(true), "after a restart too");
    close(store).await;
}

/// A store counts the servers using it now: a lone one counts itself; on a shared store a
/// second server is counted by both, and one that closed is not counted any more.
pub(crate) async fn servers_count_those_sharing_the_store(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.servers(), 1, "a lone server counts itself");
    if store.properties().shared {
        let other = backend.open(T0).await;
        wait_for_count(&store, 2).await;
        wait_for_count(&other, 2).await;
        close(other).await;
        wait_for_count(&store, 1).await;
    }
    close(store).await;
}

/// Waits until `store` counts `servers`, as it does within seconds of a change (each server
/// writes its row every second); fails after far longer.
async fn wait_for_count(store: &Arc<dyn Store>, servers: usize) {
    let started = Instant::now();
    while store.servers() != servers {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the store counts {} servers, not {servers}",
            store.servers()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Everything acknowledged before `close` is there when the data is opened again, written just
/// before closing too: jobs in every state with their errors and policies, queue settings,
/// subscriptions, a delivery's attempts and tokens (`reopen` compares them all).
pub(crate) async fn close_keeps_everything_acknowledged(backend: &impl Backend) {
    let store = backend.open(T0).await;
    store
        .update_queue("q", &|_| {
            Some(QueueConfig {
                policy: Some(StoredPolicy::new(fixed(SECOND))),
                ..QueueConfig::default()
            })
        })
        .await
        .expect("configured");
    let (sub, _) = store
        .insert_subscription(subscription("q", "https://a.example/"))
        .await
        .expect("stored");
    let results = store
        .insert_jobs(
            vec![
                job("q").priority(9).policy(fixed(7 * SECOND)),
                job("q").priority(8),
                job("q").priority(7),
                job("q").at(T0 + 60 * SECOND),
                job("r").key("k").payload(json!({"x": [1, 2]})),
                delivery(sub.id, 0),
            ],
            OnDuplicate::Refuse,
            current(&store).await,
            T0,
        )
        .await
        .expect("stored");
    let ids: Vec<JobId> = results
        .iter()
        .map(|r| r.as_ref().expect("stored").id)
        .collect();
    let taken = take(&store, &["q"], 3, T0).await;
    assert_eq!(taken_ids(&taken), ids[..3]);
    store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("completed");
    store
        .fail_job(ack(&taken[1]), T0, &retry(T0, 30 * SECOND, "boom"))
        .await
        .expect("failed");
    store
        .fail_job(ack(&taken[2]), T0, &dead(T0, "fatal"))
        .await
        .expect("dead");
    let queues = vec![delivery_queue(sub.id)];
    let request = TakeRequest {
        subscription: Some(sub.id),
        ..TakeRequest::new(&queues, 1, 30 * SECOND)
    };
    let delivering = store.take_jobs(&request, T0).await.expect("take").jobs;
    let logged = attempt(1, T0, AttemptResult::Retryable, 500);
    store
        .finish_delivery(
            ack(&delivering[0]),
            &logged,
            true,
            T0,
            &retry(T0, 10 * SECOND, "HTTP 500"),
        )
        .await
        .expect("finished");
    let record = store
        .put_token(token("ci", Role::Producer))
        .await
        .expect("stored");
    let store = reopen(backend, store, T0).await;
    let statuses: Vec<Option<Status>> = {
        let mut all = Vec::new();
        for id in &ids {
            all.push(status(&store, *id).await);
        }
        all
    };
    assert_eq!(
        statuses,
        [
            Some(Status::Completed),
            Some(Status::Scheduled),
            Some(Status::Dead),
            Some(Status::Scheduled),
            Some(Status::Ready),
            Some(Status::Scheduled)
        ]
    );
    assert_eq!(get(&store, ids[1]).await.errors.len(), 1);
    assert_eq!(store.attempts(ids[5]).await, Ok(vec![logged]));
    assert_eq!(store.tokens().await, Ok(vec![record]));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![sub.id]));
    let next = enqueue(&store, vec![job("q")], T0).await[0];
    assert!(next > ids[5], "ids are never reused");
    close(store).await;
}

/// Data written by a newer Tenax, in a newer format, is refused rather than misread; refusing
/// it changes nothing.
pub(crate) async fn newer_formats_are_refused(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let id = enqueue(&store, vec![job("q")], T0).await[0];
    close(store).await;
    let current = backend.format().await;
    backend.stamp_format(current + 1).await;
    let refused = backend
        .try_open(T0)
        .await
        .expect_err("a newer format is refused");
    assert_eq!(
        refused,
        StoreError::NewerFormat {
            found: current + 1,
            supported: current
        }
    );
    assert!(refused.is_internal());
    assert_eq!(backend.format().await, current + 1, "left as it was");
    // Stamped back, it opens with its data.
    backend.stamp_format(current).await;
    let store = backend.open(T0).await;
    assert_eq!(status(&store, id).await, Some(Status::Ready));
    close(store).await;
}

// --- what only one backend promises ----------------------------------------------------------

/// The embedded store keeps leases in memory, one process uses it, and enqueues read their
/// queue's facts live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_properties() {
    let backend = Embedded::new();
    let store = backend.open(T0).await;
    assert_eq!(
        store.properties(),
        StoreProperties {
            durable_leases: false,
            shared: false,
            cached_facts: false,
            durable_activity: false,
        }
    );
    close(store).await;
}

/// PostgreSQL keeps leases in the database, any number of servers share it, and each caches
/// what enqueues need of queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_properties() {
    let backend = Postgres::new().await;
    if backend.missing() {
        return;
    }
    let store = backend.open(T0).await;
    assert_eq!(
        store.properties(),
        StoreProperties {
            durable_leases: true,
            shared: true,
            cached_facts: true,
            durable_activity: true,
        }
    );
    close(store).await;
}

/// Without a sync per commit, `close` still writes out everything acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_unsynced_close_keeps_everything_acknowledged() {
    close_keeps_everything_acknowledged(&Embedded::unsynced()).await;
}
