//! `JobLeases`: the worker's side of a job, and the per-queue limits that hold takes back.
//!
//! | operation         | cases |
//! |-------------------|-------|
//! | `take_jobs`       | `take_is_by_priority_then_age_and_leases`, `deliveries_are_taken_finished_and_logged`, `racing_operations_on_a_job_are_serialised`, `claims_are_renewed_ended_and_forgotten` (`claims.rs`); limits: `concurrency_limits_hold_takes_back`, `rate_limits_hold_takes_back_across_restarts`, `a_take_with_an_older_clock_counts_the_starts_of_its_period` |
//! | `extend_lease`    | `expired_leases_go_to_the_decision` (`job_upkeep.rs`) |
//! | `complete_jobs`   | `complete_needs_the_current_lease`, `completed_jobs_keep_their_results`, `lease_tokens_are_unpredictable_and_exact`, `racing_operations_on_a_job_are_serialised`, `backlog_and_lease_facts_are_reported` (`job_reads.rs`) |
//! | `fail_job`        | `fail_asks_the_decision_and_records_it`, `acknowledgements_after_a_leases_end_are_refused`, `racing_operations_on_a_job_are_serialised` |
//! | `finish_delivery` | `deliveries_are_taken_finished_and_logged` |
//! | `pop_jobs`        | `pop_takes_and_deletes_ready_jobs`, `takes_and_pops_skip_jobs_past_their_expiry`, `rate_limits_hold_takes_back_across_restarts` |
//!
//! Atomicity, for every family: operations on one job are serialised
//! (`racing_operations_on_a_job_are_serialised`).

use std::sync::{Arc, Mutex};

use serde_json::json;
use tenax_core::model::subscription::{DELIVERY_KIND, delivery_queue};
use tenax_core::model::{
    Ack, AttemptResult, JobFilter, JobId, JobResult, LeaseToken, LimitUse, MAX_EXACT_INTEGER,
    OnDuplicate, Page, QueueConfig, RateLimit, Status, StoredPolicy, Subscription, TakenJob,
};
use tenax_core::store::{
    DecideContext, Finished, Store, StoreError, TakeRequest, Taken, Transition,
};
use tenax_policy::RetryPolicy;

use super::support::*;

pub(crate) async fn take_is_by_priority_then_age_and_leases(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("a"),
            job("b").priority(5),
            job("a").priority(5),
            job("c").priority(9),
            job("b"),
            job("a").priority(-1),
            job("a").priority(9).at(T0 + SECOND),
        ],
        T0,
    )
    .await;
    store
        .update_queue("c", &|_| {
            Some(QueueConfig {
                policy: None,
                paused: true,
                ..QueueConfig::default()
            })
        })
        .await
        .expect("paused");

    let first = take_on(&store, &["a", "b", "c"], 2, 10 * SECOND, None, T0).await;
    assert_eq!(taken_ids(&first), [ids[1], ids[2]]);
    let rest = take_on(
        &store,
        &["a", "b", "c", "nobody"],
        10,
        20 * SECOND,
        None,
        T0 + 5,
    )
    .await;
    assert_eq!(
        taken_ids(&rest),
        [ids[0], ids[4], ids[5]],
        "paused and scheduled jobs stay"
    );
    assert!(take(&store, &["a", "b"], 10, T0).await.is_empty());
    for job in &first {
        assert_eq!(
            (job.attempt, job.lease_expires_at_ms),
            (1, T0 + 10 * SECOND)
        );
    }
    assert!(
        rest.iter()
            .all(|j| j.lease_expires_at_ms == T0 + 5 + 20 * SECOND)
    );
    let mut tokens: Vec<LeaseToken> = first.iter().chain(&rest).map(|j| j.lease_token).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 5, "every lease has its own token");
    let b = &first[0];
    assert_eq!(
        (b.queue.as_str(), b.kind.as_str(), b.priority),
        ("b", "work", 5)
    );
    assert_eq!(status(&store, ids[1]).await, Some(Status::InFlight));
    let counts = store.counts().await.expect("counts");
    assert_eq!(
        counts
            .iter()
            .map(|c| (c.queue.as_str(), c.in_flight))
            .collect::<Vec<_>>(),
        [("a", 3), ("b", 2), ("c", 0)]
    );

    // Reopened without durable leases, the in-flight jobs are ready again, in the same order;
    // with them, they are still held.
    let store = reopen(backend, store, T0 + 10).await;
    let again = take(&store, &["a", "b"], 10, T0 + 10).await;
    if store.properties().durable_leases {
        assert!(again.is_empty(), "{:?}", taken_ids(&again));
    } else {
        assert_eq!(taken_ids(&again), [ids[1], ids[2], ids[0], ids[4], ids[5]]);
        assert!(
            again.iter().all(|j| j.attempt == 1),
            "a restart is not an attempt"
        );
    }
    close(store).await;
}

/// A result given at completion is kept with the completed job, byte for byte, shown by a read
/// and a listing, and survives a reopen; a job completed without one, or dead, has none; a job
/// not kept (no retention) keeps nothing.
pub(crate) async fn completed_jobs_keep_their_results(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let taken = take(&store, &["q"], 5, T0).await;
    // Spacing, key order and number spelling are the worker's, and stay.
    let text = r#"{ "z": 1, "a": [1.50, "é"],"n":null }"#;
    let result = |text: &str| {
        Some(JobResult(
            serde_json::value::RawValue::from_string(text.to_owned()).expect("JSON"),
        ))
    };
    let results = store
        .complete_jobs(
            &[ack(&taken[0]), ack(&taken[1]), ack(&taken[2])],
            &[result(text), None, result("\"done\"")],
            true,
            T0 + 5,
        )
        .await
        .expect("one commit");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // The common call: no results at all.
    let plain = store
        .complete_plain(&[ack(&taken[3])], true, T0 + 6)
        .await
        .expect("one commit");
    assert_eq!(plain, [Ok(())]);
    store
        .fail_job(ack(&taken[4]), T0 + 7, &dead(T0 + 7, "fatal"))
        .await
        .expect("failed");

    let check = |store: Arc<dyn Store>| {
        let ids = ids.clone();
        async move {
            let shown = |job: &tenax_core::model::Job| {
                job.state.result.as_ref().map(|r| r.get().to_owned())
            };
            let expected = [Some(text), None, Some("\"done\""), None, None];
            for (id, want) in ids.iter().zip(expected) {
                let job = get(&store, *id).await;
                assert_eq!(shown(&job).as_deref(), want, "job {id} read");
            }
            let listed = store
                .list_jobs(&JobFilter::default(), Page::after(None, 100))
                .await
                .expect("list");
            let listed: Vec<Option<String>> = listed.iter().map(shown).collect();
            assert_eq!(
                listed,
                expected.map(|r| r.map(str::to_owned)),
                "the listing shows them"
            );
            store
        }
    };
    let store = check(store).await;
    let store = check(reopen(backend, store, T0 + 10).await).await;

    // Without retention a completed job is deleted, result and all.
    let more = enqueue(&store, vec![job("q")], T0 + 10).await;
    let taken = take(&store, &["q"], 1, T0 + 10).await;
    let results = store
        .complete_jobs(&[ack(&taken[0])], &[result("1")], false, T0 + 11)
        .await
        .expect("one commit");
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(status(&store, more[0]).await, None);
}

pub(crate) async fn complete_needs_the_current_lease(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let taken = take(&store, &["q"], 5, T0).await;
    let [a, b, c, d, e] = [&taken[0], &taken[1], &taken[2], &taken[3], &taken[4]];
    let wrong = Ack {
        id: b.id,
        lease: c.lease_token,
    };
    let guessed = Ack {
        id: c.id,
        lease: LeaseToken(0),
    };
    let results = store
        .complete_plain(&[ack(a), wrong, guessed, ack(c), ack(d)], true, T0 + 7)
        .await
        .expect("one commit");
    assert_eq!(
        results,
        [
            Ok(()),
            Err(StoreError::LeaseLost { id: b.id }),
            Err(StoreError::LeaseLost { id: c.id }),
            Ok(()),
            Ok(())
        ]
    );
    let shown = get(&store, a.id).await;
    assert_eq!(
        (shown.state.status, shown.state.finished_at_ms),
        (Status::Completed, Some(T0 + 7))
    );
    assert_eq!(status(&store, b.id).await, Some(Status::InFlight));
    let results = store
        .complete_plain(
            &[
                ack(a),
                Ack {
                    id: JobId(999_999),
                    lease: LeaseToken(1),
                },
            ],
            true,
            T0,
        )
        .await
        .expect("one commit");
    assert_eq!(
        results,
        [
            Err(StoreError::NotInFlight {
                id: a.id,
                status: Status::Completed
            }),
            Err(StoreError::NotFound(JobId(999_999)))
        ]
    );
    // Without retention, a completed job is gone.
    let results = store
        .complete_plain(&[ack(b)], false, T0)
        .await
        .expect("one commit");
    assert_eq!(results, [Ok(())]);
    assert!(store.get_job(b.id).await.expect("readable").is_none());
    assert_eq!(ids.len(), 5);

    let store = reopen(backend, store, T0 + 10).await;
    let properties = store.properties();
    for (id, want) in [
        (a.id, Some(Status::Completed)),
        (b.id, None),
        (c.id, Some(Status::Completed)),
        (d.id, Some(Status::Completed)),
        (e.id, Some(after_restart(properties, Status::InFlight))),
    ] {
        assert_eq!(status(&store, id).await, want, "job {id}");
    }
    let again = taken_ids(&take(&store, &["q"], 5, T0 + 10).await);
    if properties.durable_leases {
        assert!(again.is_empty());
    } else {
        assert_eq!(again, [e.id]);
    }
    close(store).await;
}

/// What a decision closure was shown.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    id: JobId,
    queue: String,
    failures: u32,
    job_policy: Option<RetryPolicy>,
    queue_policy: Option<RetryPolicy>,
}

pub(crate) async fn fail_asks_the_decision_and_records_it(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let queue_policy = fixed(5 * SECOND);
    store
        .update_queue("q", &|_| {
            Some(QueueConfig {
                policy: Some(StoredPolicy::new(queue_policy.clone())),
                paused: false,
                ..QueueConfig::default()
            })
        })
        .await
        .expect("configured");
    let job_policy = fixed(60 * SECOND);
    let ids = enqueue(
        &store,
        vec![job("q").policy(job_policy.clone()), job("q"), job("other")],
        T0,
    )
    .await;
    let taken = take(&store, &["q", "other"], 3, T0).await;
    assert_eq!(taken_ids(&taken), ids);

    let seen = Mutex::new(Vec::new());
    let watch = |inner: &(dyn Fn(&DecideContext<'_>) -> Transition + Send + Sync),
                 ctx: &DecideContext<'_>| {
        seen.lock().expect("not poisoned").push(Seen {
            id: ctx.id,
            queue: ctx.queue.to_owned(),
            failures: ctx.state.failures,
            job_policy: ctx.job_policy.cloned(),
            queue_policy: queue_policy_of(ctx),
        });
        inner(ctx)
    };
    let now = T0 + 100;

    // A retry: scheduled, one failure, one error entry.
    let decide = retry(now, 60 * SECOND, "boom");
    let transition = store
        .fail_job(ack(&taken[0]), now, &|ctx: &DecideContext<'_>| {
            watch(&decide, ctx)
        })
        .await
        .expect("failed");
    assert_eq!(
        (transition.state.status, transition.state.run_at_ms),
        (Status::Scheduled, now + 60 * SECOND)
    );
    let shown = get(&store, ids[0]).await;
    assert_eq!(shown.state, transition.state);
    assert_eq!(shown.errors, [transition.error.clone().expect("an error")]);
    assert_eq!(shown.errors[0].attempt, 1);

    // Dead.
    let decide = dead(now, "fatal");
    store
        .fail_job(ack(&taken[1]), now, &|ctx: &DecideContext<'_>| {
            watch(&decide, ctx)
        })
        .await
        .expect("failed");
    let shown = get(&store, ids[1]).await;
    assert_eq!(
        (
            shown.state.status,
            shown.state.finished_at_ms,
            shown.state.dead_reason.as_deref()
        ),
        (Status::Dead, Some(now), Some("fatal"))
    );

    // A retry that is already due is ready at once, and the answer says so.
    let decide = retry(now, 0, "again");
    let transition = store
        .fail_job(ack(&taken[2]), now, &|ctx: &DecideContext<'_>| {
            watch(&decide, ctx)
        })
        .await
        .expect("failed");
    assert_eq!(transition.state.status, Status::Ready);
    assert_eq!(status(&store, ids[2]).await, Some(Status::Ready));

    assert_eq!(
        *seen.lock().expect("not poisoned"),
        [
            Seen {
                id: ids[0],
                queue: "q".into(),
                failures: 0,
                job_policy: Some(job_policy),
                queue_policy: Some(queue_policy.clone())
            },
            Seen {
                id: ids[1],
                queue: "q".into(),
                failures: 0,
                job_policy: None,
                queue_policy: Some(queue_policy)
            },
            Seen {
                id: ids[2],
                queue: "other".into(),
                failures: 0,
                job_policy: None,
                queue_policy: None
            },
        ]
    );

    // No decision without the lease.
    let calls = seen.lock().expect("not poisoned").len();
    let decide = retry(now, 1, "never");
    let watched = |ctx: &DecideContext<'_>| watch(&decide, ctx);
    let again_taken = take(&store, &["other"], 1, now).await;
    let stale = Ack {
        id: ids[2],
        lease: taken[2].lease_token,
    };
    assert_eq!(
        store.fail_job(stale, now, &watched).await,
        Err(StoreError::LeaseLost { id: ids[2] })
    );
    assert_eq!(
        store.fail_job(ack(&taken[1]), now, &watched).await,
        Err(StoreError::NotInFlight {
            id: ids[1],
            status: Status::Dead
        })
    );
    assert_eq!(
        store
            .fail_job(
                Ack {
                    id: JobId(424_242),
                    lease: LeaseToken(1)
                },
                now,
                &watched
            )
            .await,
        Err(StoreError::NotFound(JobId(424_242)))
    );
    assert_eq!(seen.lock().expect("not poisoned").len(), calls);
    // The errors list grows one entry per failure, oldest first.
    store
        .fail_job(
            ack(&again_taken[0]),
            now + 1,
            &retry(now + 1, 60 * SECOND, "twice"),
        )
        .await
        .expect("failed");
    let messages: Vec<String> = get(&store, ids[2])
        .await
        .errors
        .into_iter()
        .map(|e| format!("{}:{}", e.attempt, e.message))
        .collect();
    assert_eq!(messages, ["1:again", "2:twice"]);

    // Reopened: the schedule, the dead job, the errors, and both policies as decisions see them.
    let store = reopen(backend, store, now + 1).await;
    let due = store
        .promote_due(now + 60 * SECOND, 100)
        .await
        .expect("promote");
    assert_eq!(due, 1, "the first job's retry");
    let retried = take(&store, &["q"], 1, now + 60 * SECOND).await;
    assert_eq!((taken_ids(&retried), retried[0].attempt), (vec![ids[0]], 2));
    let seen = Mutex::new(None);
    store
        .fail_job(ack(&retried[0]), now, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("not poisoned") =
                Some((ctx.job_policy.cloned(), queue_policy_of(ctx)));
            retry(now, 1, "x")(ctx)
        })
        .await
        .expect("failed");
    assert_eq!(
        seen.into_inner().expect("not poisoned"),
        Some((Some(fixed(60 * SECOND)), Some(fixed(5 * SECOND))))
    );
    close(store).await;
}

/// Lease tokens are drawn, not counted: a worker cannot tell another's from its own, whether
/// the jobs were taken one by one or together, and every token is exact in a JavaScript
/// client (at most 2^53 - 1).
pub(crate) async fn lease_tokens_are_unpredictable_and_exact(backend: &impl Backend) {
    let store = backend.open(T0).await;
    enqueue(&store, vec![job("q"); 60], T0).await;
    let mut tokens: Vec<u64> = Vec::new();
    for _ in 0..20 {
        tokens.extend(
            take(&store, &["q"], 1, T0)
                .await
                .iter()
                .map(|j| j.lease_token.0),
        );
    }
    let batch = take(&store, &["q"], 40, T0).await;
    tokens.extend(batch.iter().map(|j| j.lease_token.0));
    assert_eq!(tokens.len(), 60);
    assert!(
        tokens.iter().all(|&t| (1..=MAX_EXACT_INTEGER).contains(&t)),
        "{tokens:?}"
    );
    let distinct: std::collections::HashSet<u64> = tokens.iter().copied().collect();
    assert_eq!(distinct.len(), tokens.len(), "{tokens:?}");
    // No token is a small step from another: neither consecutive takes nor jobs of one take
    // (ids in a row) have tokens in a row.
    let mut sorted = tokens.clone();
    sorted.sort_unstable();
    assert!(
        sorted.windows(2).all(|w| w[1] - w[0] > 1_000),
        "tokens close together: {sorted:?}"
    );
    // A neighbour's token is refused.
    let (a, b) = (&batch[0], &batch[1]);
    let guessed = Ack {
        id: b.id,
        lease: LeaseToken(a.lease_token.0 + 1),
    };
    let results = store
        .complete_plain(&[guessed], true, T0)
        .await
        .expect("complete");
    assert!(
        matches!(results[0], Err(StoreError::LeaseLost { .. })),
        "{results:?}"
    );
    close(store).await;
}

/// A lease ends at its expiry by the server's time, whether or not the maintenance loop has
/// ended it yet: from then on its worker's heartbeat, completion and failure are refused as
/// those of a lease taken over, and the job stays in flight for the expiry to decide.
pub(crate) async fn acknowledgements_after_a_leases_end_are_refused(backend: &impl Backend) {
    const DAY: u64 = 86_400 * SECOND;
    let store = backend.open(T0).await;
    enqueue(&store, vec![job("q"); 4], T0).await;
    let taken = take(&store, &["q"], 4, T0).await;
    let end = taken[0].lease_expires_at_ms;
    assert_eq!(end, T0 + 30 * SECOND);
    // Just before the end: a heartbeat holds the first a while longer.
    let extended = store
        .extend_lease(ack(&taken[0]), 30 * SECOND, DAY, end - 1)
        .await
        .expect("in time");
    assert_eq!(extended.expires_at_ms, end - 1 + 30 * SECOND);
    assert!(
        !extended.cancel_requested,
        "a lease is not marked cancelled until cancelled"
    );
    // At the end and after it, each of the others is refused.
    let lost = |job: &TakenJob| StoreError::LeaseLost { id: job.id };
    assert_eq!(
        store
            .extend_lease(ack(&taken[1]), 30 * SECOND, DAY, end)
            .await
            .map(|e| e.expires_at_ms),
        Err(lost(&taken[1]))
    );
    let results = store
        .complete_plain(&[ack(&taken[2]), ack(&taken[0])], true, end + 1)
        .await
        .expect("one commit");
    assert_eq!(results, [Err(lost(&taken[2])), Ok(())]);
    assert_eq!(
        store
            .fail_job(ack(&taken[3]), end, &retry(end, SECOND, "late"))
            .await
            .map(drop),
        Err(lost(&taken[3]))
    );
    for job in &taken[1..] {
        assert_eq!(status(&store, job.id).await, Some(Status::InFlight));
    }
    close(store).await;
}

/// A job past its expiry is gone, for a take or a pop as for a read, even before the
/// maintenance loop has deleted it.
pub(crate) async fn takes_and_pops_skip_jobs_past_their_expiry(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let at = T0 + 5 * SECOND;
    let ids = enqueue(
        &store,
        vec![
            job("q").expires(at).priority(9),
            job("q"),
            job("q").expires(at + SECOND).priority(5),
            job("r").expires(at).priority(9),
            job("r"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["q"], 10, at).await;
    assert_eq!(taken_ids(&taken), [ids[2], ids[1]]);
    let queues = ["r".to_owned()];
    let popped = store.pop_jobs(&queues, 10, at).await.expect("pop");
    assert_eq!(popped.iter().map(|j| j.id).collect::<Vec<_>>(), [ids[4]]);
    // Limited queues take their own (counted) path: it skips them too.
    store
        .update_queue("q", &|_| {
            Some(QueueConfig {
                concurrency: Some(10),
                ..QueueConfig::default()
            })
        })
        .await
        .expect("limited");
    let late = enqueue(&store, vec![job("q").expires(at + SECOND)], T0).await[0];
    assert!(take(&store, &["q"], 10, at + SECOND).await.is_empty());
    assert_eq!(store.expire_jobs(at + SECOND, 100).await, Ok(4));
    assert_eq!(status(&store, late).await, None);
    close(store).await;
}

/// Pop: the ready jobs a take would lease, deleted instead and returned as they were.
pub(crate) async fn pop_takes_and_deletes_ready_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    store
        .update_queue("paused", &|_| {
            Some(QueueConfig {
                paused: true,
                ..QueueConfig::default()
            })
        })
        .await
        .expect("paused");
    let flying = enqueue(&store, vec![job("q").priority(20)], T0).await[0];
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [flying]);
    let ids = enqueue(
        &store,
        vec![
            job("q").payload(json!({"n": 0})),
            job("q").priority(5).key("k").payload(json!({"n": 1})),
            job("q").at(T0 + SECOND).priority(9),
            job("r").priority(1),
            job("paused").priority(9),
            job("q"),
        ],
        T0,
    )
    .await;
    let queues: Vec<String> = ["q", "r", "paused"].map(str::to_owned).to_vec();
    assert!(
        store
            .pop_jobs(&queues, 0, T0)
            .await
            .expect("pop")
            .is_empty()
    );
    let popped = store.pop_jobs(&queues, 2, T0).await.expect("pop");
    assert_eq!(
        popped.iter().map(|j| j.id).collect::<Vec<_>>(),
        [ids[1], ids[3]],
        "by priority, then age"
    );
    let first = &popped[0];
    assert_eq!(
        (
            first.spec.queue.as_str(),
            first.spec.payload.get(),
            first.spec.unique_key.as_deref(),
            first.state.status
        ),
        ("q", r#"{"n":1}"#, Some("k"), Status::Ready),
        "as it was"
    );
    assert!(store.get_job(ids[1]).await.expect("readable").is_none());
    assert!(store.get_job(ids[3]).await.expect("readable").is_none());
    // Its unique key is free.
    let keyed = enqueue(&store, vec![job("q").key("k")], T0).await[0];
    // Never a scheduled, in-flight or paused job.
    let rest = store.pop_jobs(&queues, 10, T0).await.expect("pop");
    assert_eq!(
        rest.iter().map(|j| j.id).collect::<Vec<_>>(),
        [ids[0], ids[5], keyed]
    );
    assert!(
        store
            .pop_jobs(&queues, 10, T0)
            .await
            .expect("pop")
            .is_empty()
    );
    assert_eq!(status(&store, flying).await, Some(Status::InFlight));
    assert_eq!(status(&store, ids[2]).await, Some(Status::Scheduled));
    assert_eq!(status(&store, ids[4]).await, Some(Status::Ready));

    let store = reopen(backend, store, T0).await;
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [flying, ids[2], ids[4]]
    );
    close(store).await;
}

/// Deliveries: taken for their subscription while it is enabled; each attempt ends them and is
/// logged in the same commit, a delivered one completing, a failed one going by the decision
/// (which sees the subscription and its queue's settings); deleted with their subscription,
/// attempts and all.
pub(crate) async fn deliveries_are_taken_finished_and_logged(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let queue_policy = fixed(9 * SECOND);
    store
        .update_queue("q", &|_| {
            Some(QueueConfig {
                policy: Some(StoredPolicy::new(queue_policy.clone())),
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
                job("q"),
                job("q"),
                job("q"),
                delivery(sub.id, 0),
                delivery(sub.id, 1),
                delivery(sub.id, 2),
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
    let (messages, deliveries) = ids.split_at(3);
    let queues = vec![delivery_queue(sub.id)];
    let for_sub = |max: usize| TakeRequest {
        subscription: Some(sub.id),
        ..TakeRequest::new(&queues, max, 30 * SECOND)
    };
    let enabled = |on: bool| {
        move |current: &Subscription| {
            let mut next = current.clone();
            next.enabled = on;
            Some(next)
        }
    };

    // Nothing while the subscription is disabled.
    store
        .update_subscription(sub.id, &enabled(false))
        .await
        .expect("disabled");
    assert!(
        store
            .take_jobs(&for_sub(10), T0)
            .await
            .expect("take")
            .jobs
            .is_empty()
    );
    store
        .update_subscription(sub.id, &enabled(true))
        .await
        .expect("enabled");
    let taken = store.take_jobs(&for_sub(10), T0).await.expect("take").jobs;
    assert_eq!(taken_ids(&taken), deliveries);
    assert_eq!(
        (taken[0].parent, taken[0].kind.as_str()),
        (Some(messages[0]), DELIVERY_KIND)
    );

    // Delivered: completed, without a decision, and the attempt logged.
    let calls = Mutex::new(0);
    let never = |ctx: &DecideContext<'_>| {
        *calls.lock().expect("not poisoned") += 1;
        dead(T0, "never")(ctx)
    };
    let delivered = attempt(1, T0 + 1, AttemptResult::Delivered, 200);
    assert_eq!(
        store
            .finish_delivery(ack(&taken[0]), &delivered, true, T0 + 1, &never)
            .await,
        Ok(Finished::Delivered)
    );
    let shown = get(&store, deliveries[0]).await;
    assert_eq!(
        (shown.state.status, shown.state.finished_at_ms),
        (Status::Completed, Some(T0 + 1))
    );
    assert_eq!(
        store.attempts(deliveries[0]).await,
        Ok(vec![delivered.clone()])
    );

    // Failed: the decision sees the subscription and its queue's settings.
    let failed = attempt(1, T0 + 2, AttemptResult::Retryable, 503);
    let seen = Mutex::new(None);
    let finished = store
        .finish_delivery(
            ack(&taken[1]),
            &failed,
            true,
            T0 + 2,
            &|ctx: &DecideContext<'_>| {
                *seen.lock().expect("not poisoned") = ctx.owner.map(|(s, q)| {
                    let policy = q.and_then(|q| q.policy.as_ref());
                    (s.id, policy.map(|p| (**p.policy()).clone()))
                });
                retry(T0 + 2, 5 * SECOND, "HTTP 503")(ctx)
            },
        )
        .await
        .expect("finished");
    let Finished::Failed(transition) = finished else {
        panic!("a failed attempt fails: {finished:?}");
    };
    assert_eq!(
        (transition.state.status, transition.state.run_at_ms),
        (Status::Scheduled, T0 + 2 + 5 * SECOND)
    );
    assert_eq!(
        seen.into_inner().expect("not poisoned"),
        Some((sub.id, Some(queue_policy)))
    );
    let shown = get(&store, deliveries[1]).await;
    assert_eq!(shown.state, transition.state);
    assert_eq!(shown.errors, [transition.error.clone().expect("an error")]);
    assert_eq!(
        store.attempts(deliveries[1]).await,
        Ok(vec![failed.clone()])
    );

    // Permanent: dead by the decision.
    let permanent = attempt(1, T0 + 3, AttemptResult::Permanent, 404);
    let finished = store
        .finish_delivery(
            ack(&taken[2]),
            &permanent,
            true,
            T0 + 3,
            &dead(T0 + 3, "HTTP 404"),
        )
        .await
        .expect("finished");
    assert!(
        matches!(&finished, Finished::Failed(t) if t.state.status == Status::Dead),
        "{finished:?}"
    );
    assert_eq!(status(&store, deliveries[2]).await, Some(Status::Dead));

    // Without the lease: refused, and nothing logged.
    assert_eq!(
        store
            .finish_delivery(ack(&taken[0]), &delivered, true, T0 + 4, &never)
            .await,
        Err(StoreError::NotInFlight {
            id: deliveries[0],
            status: Status::Completed
        })
    );
    assert_eq!(store.attempts(deliveries[0]).await.map(|a| a.len()), Ok(1));
    assert_eq!(*calls.lock().expect("not poisoned"), 0);

    // Retried: the next attempt is added after the first.
    let due = T0 + 2 + 5 * SECOND;
    assert_eq!(store.promote_due(due, 10).await, Ok(1));
    let again = store.take_jobs(&for_sub(10), due).await.expect("take").jobs;
    assert_eq!(
        (taken_ids(&again), again[0].attempt),
        (vec![deliveries[1]], 2)
    );
    let second = attempt(2, due, AttemptResult::Retryable, 500);
    store
        .finish_delivery(
            ack(&again[0]),
            &second,
            true,
            due,
            &retry(due, 0, "HTTP 500"),
        )
        .await
        .expect("finished");
    assert_eq!(
        store.attempts(deliveries[1]).await,
        Ok(vec![failed, second])
    );
    assert_eq!(store.attempts(messages[0]).await, Ok(vec![]));

    let store = reopen(backend, store, due).await;
    assert_eq!(store.attempts(deliveries[1]).await.map(|a| a.len()), Ok(2));
    // Deleting the subscription deletes its deliveries with their attempts; messages stay.
    assert_eq!(store.delete_subscription(sub.id).await, Ok(3));
    for id in deliveries {
        assert!(
            store.get_job(*id).await.expect("readable").is_none(),
            "job {id}"
        );
        assert_eq!(store.attempts(*id).await, Ok(vec![]), "job {id}");
    }
    for id in messages {
        assert_eq!(status(&store, *id).await, Some(Status::Ready));
    }
    assert!(
        store
            .take_jobs(&for_sub(10), due)
            .await
            .expect("take")
            .jobs
            .is_empty()
    );
    let orphan = store
        .insert_jobs(
            vec![job("q"), delivery(sub.id, 0)],
            OnDuplicate::Refuse,
            current(&store).await,
            due,
        )
        .await
        .expect("stored");
    assert!(orphan[0].is_some() && orphan[1].is_none());
    let store = reopen(backend, store, due).await;
    assert_eq!(store.count_jobs(&JobFilter::queue(&queues[0])).await, Ok(0));
    close(store).await;
}

/// Operations on one job are serialised: takes racing each other lease every job exactly
/// once, and of acks racing on one lease exactly one wins.
pub(crate) async fn racing_operations_on_a_job_are_serialised(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 120], T0).await;
    let takers: Vec<_> = (0..6)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let taken = take(&store, &["q"], 7, T0).await;
                    if taken.is_empty() {
                        break mine;
                    }
                    mine.extend(taken);
                }
            })
        })
        .collect();
    let mut all: Vec<TakenJob> = Vec::new();
    for taker in takers {
        all.extend(taker.await.expect("a taker"));
    }
    let mut leased = taken_ids(&all);
    leased.sort_unstable();
    assert_eq!(leased, ids, "every job leased exactly once");

    let contested = &all[0];
    let racers: Vec<_> = (0..6)
        .map(|i| {
            let (store, ack) = (store.clone(), ack(contested));
            tokio::spawn(async move {
                if i % 2 == 0 {
                    let mut results = store
                        .complete_plain(&[ack], true, T0)
                        .await
                        .expect("commit");
                    (Status::Completed, results.remove(0))
                } else {
                    let failed = store.fail_job(ack, T0, &dead(T0, "fatal")).await;
                    (Status::Dead, failed.map(drop))
                }
            })
        })
        .collect();
    let mut winners = Vec::new();
    for racer in racers {
        match racer.await.expect("a racer") {
            (status, Ok(())) => winners.push(status),
            (_, Err(StoreError::NotInFlight { id, status })) => {
                assert_eq!(id, contested.id);
                assert!(status.is_finished(), "{status:?}");
            }
            (_, Err(error)) => panic!("unexpected: {error:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one ack wins: {winners:?}");
    let shown = get(&store, contested.id).await;
    assert_eq!(shown.state.status, winners[0]);
    assert_eq!(shown.errors.len(), usize::from(winners[0] == Status::Dead));
    let store = reopen(backend, store, T0).await;
    close(store).await;
}

// --- per-queue limits ------------------------------------------------------------------------

async fn limit_queue(
    store: &Arc<dyn Store>,
    queue: &str,
    concurrency: Option<u32>,
    rate: Option<RateLimit>,
) {
    store
        .update_queue(queue, &|current| {
            let mut config = current.cloned().unwrap_or_default();
            config.concurrency = concurrency;
            config.rate = rate;
            Some(config)
        })
        .await
        .expect("limited");
}

async fn take_held(store: &Arc<dyn Store>, queues: &[&str], max: usize, now_ms: u64) -> Taken {
    let queues: Vec<String> = queues.iter().map(|q| (*q).to_owned()).collect();
    store
        .take_jobs(&TakeRequest::new(&queues, max, 30 * SECOND), now_ms)
        .await
        .expect("take")
}

/// A concurrency limit counts the queue's jobs in flight: a take hands out no more than the
/// room left, in the usual order, says it was held back, and room comes back as jobs leave
/// flight (completed, failed, lease expired). Other queues of the same take are not held.
pub(crate) async fn concurrency_limits_hold_takes_back(backend: &impl Backend) {
    let store = backend.open(T0).await;
    limit_queue(&store, "lim", Some(2), None).await;
    let limited = enqueue(&store, (0..5).map(|i| job("lim").priority(i)).collect(), T0).await;
    let free = enqueue(&store, vec![job("free"), job("free")], T0).await;
    let first = take(&store, &["lim", "free"], 10, T0).await;
    assert_eq!(
        taken_ids(&first),
        [limited[4], limited[3], free[0], free[1]],
        "two of the limited queue, the best two, and the rest"
    );
    let held = take_held(&store, &["lim"], 10, T0).await;
    assert!(held.jobs.is_empty());
    assert!(held.held.in_flight, "{:?}", held.held);
    assert_eq!(held.held.until_ms, None);
    // Completing one makes room for one.
    store
        .complete_jobs(&[ack(&first[0])], &[], true, T0)
        .await
        .expect("completed");
    let second = take(&store, &["lim"], 10, T0).await;
    assert_eq!(taken_ids(&second), [limited[2]]);
    // A failure makes room too.
    store
        .fail_job(ack(&first[1]), T0, &retry(T0, 60 * SECOND, "later"))
        .await
        .expect("failed");
    let third = take(&store, &["lim"], 10, T0).await;
    assert_eq!(taken_ids(&third), [limited[1]]);
    assert!(take(&store, &["lim"], 10, T0).await.is_empty());
    // So does a lease that ran out.
    let expired = T0 + 31 * SECOND;
    store
        .expire_leases(expired, 100, &again(expired, "lost"))
        .await
        .expect("expired");
    let fourth = take(&store, &["lim"], 1, expired).await;
    assert_eq!(fourth.len(), 1);
    // A limit removed holds nothing.
    limit_queue(&store, "lim", None, None).await;
    let rest = take(&store, &["lim"], 10, expired).await;
    assert!(!rest.is_empty());
    let store = reopen(backend, store, expired).await;
    close(store).await;
}

/// Takes of a rate-limited queue are serialised (by the index lock, or on PostgreSQL by a lock
/// of the queue's row), but each read its clock before it waited: a take whose clock is older
/// than the last one's still counts every start of its own period, so the take before it must
/// not have forgotten them.
pub(crate) async fn a_take_with_an_older_clock_counts_the_starts_of_its_period(
    backend: &impl Backend,
) {
    let store = backend.open(T0).await;
    let rate = RateLimit {
        limit: 3,
        period_ms: SECOND,
    };
    limit_queue(&store, "rated", None, Some(rate)).await;
    enqueue(&store, (0..10).map(|_| job("rated")).collect(), T0).await;
    assert_eq!(take(&store, &["rated"], 2, T0).await.len(), 2);
    // At 1.5 s the two starts at 0 are more than a period old: room for 2 more, 1 taken.
    assert_eq!(take(&store, &["rated"], 1, T0 + 1_500).await.len(), 1);
    // A take whose clock read 0.9 s: its period, (-0.1 s, 0.9 s], holds the two starts at 0,
    // and it counts the one at 1.5 s as well: no room.
    assert!(take(&store, &["rated"], 10, T0 + 900).await.is_empty());
    close(store).await;
}

/// A rate limit counts starts in buckets of a sixtieth of its period: a take hands out no more
/// than the period leaves, says until when it is held, and the starts survive a restart.
pub(crate) async fn rate_limits_hold_takes_back_across_restarts(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let rate = RateLimit {
        limit: 3,
        period_ms: 60 * SECOND,
    };
    limit_queue(&store, "rated", None, Some(rate)).await;
    let ids = enqueue(&store, (0..10).map(|_| job("rated")).collect(), T0).await;
    assert_eq!(taken_ids(&take(&store, &["rated"], 10, T0).await), ids[..3]);
    assert_eq!(
        store.limit_use("rated", T0).await,
        Ok(LimitUse { started: 3 })
    );
    let held = take_held(&store, &["rated"], 10, T0 + SECOND).await;
    assert!(held.jobs.is_empty());
    // The bucket [T0, T0 + 1 s) counts until its end is a period old.
    assert_eq!(held.held.until_ms, Some(T0 + 61 * SECOND));
    assert!(!held.held.in_flight);
    assert!(
        take(&store, &["rated"], 10, T0 + 61 * SECOND - 1)
            .await
            .is_empty()
    );
    // Pops count as starts too.
    let later = T0 + 61 * SECOND;
    let popped = store
        .pop_jobs(&["rated".to_owned()], 1, later)
        .await
        .expect("pop");
    assert_eq!(popped.len(), 1);
    assert_eq!(take(&store, &["rated"], 10, later).await.len(), 2);
    assert_eq!(
        store.limit_use("rated", later).await,
        Ok(LimitUse { started: 3 })
    );

    // The starts survive: still none to hand out after a restart.
    let store = reopen(backend, store, later).await;
    assert!(
        take(&store, &["rated"], 10, later + SECOND)
            .await
            .is_empty()
    );
    assert_eq!(
        store.limit_use("rated", later + SECOND).await,
        Ok(LimitUse { started: 3 })
    );
    let next = later + 61 * SECOND;
    assert_eq!(take(&store, &["rated"], 10, next).await.len(), 3);
    // Concurrency and rate together: the smaller room holds.
    limit_queue(&store, "both", Some(1), Some(rate)).await;
    enqueue(&store, (0..3).map(|_| job("both")).collect(), next).await;
    assert_eq!(take(&store, &["both"], 10, next).await.len(), 1);
    let held = take_held(&store, &["both"], 10, next).await;
    assert!(held.held.in_flight && held.jobs.is_empty());
    // A deleted queue forgets its starts.
    store.delete_queue("rated", T0).await.expect("deleted");
    assert_eq!(
        store.limit_use("rated", next).await,
        Ok(LimitUse::default())
    );
    close(store).await;
}
