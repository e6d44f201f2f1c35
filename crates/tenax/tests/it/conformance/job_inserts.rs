//! `JobInserts`: adding jobs.
//!
//! | operation     | cases |
//! |---------------|-------|
//! | `insert_jobs` | `enqueue_is_atomic_and_ids_increase`, `unique_keys_refuse_or_return_the_holder`, `deliveries_are_stored_with_their_message_and_subscription`, `concurrent_small_enqueues_keep_their_own_jobs`, `inserts_are_never_made_on_facts_older_than_a_change` |
//! | `queue_facts` | `inserts_are_never_made_on_facts_older_than_a_change`; the subscribers it reads: `subscriptions_are_stored_changed_and_deleted`, `unique_endpoints_are_held_per_queue` (`subscriptions.rs`), `queues_are_deleted_with_their_jobs` (`queues.rs`), `close_keeps_everything_acknowledged` (`lifecycle.rs`) |

use std::sync::Arc;

use serde_json::json;
use tenax_core::model::subscription::{DELIVERY_KIND, delivery_queue};
use tenax_core::model::{
    Enqueued, JobFilter, JobId, KeyHolder, OnDuplicate, QueueConfig, Status, Subscription,
};
use tenax_core::store::{FactsSeen, Insert, Store, StoreError};

use super::support::*;

pub(crate) async fn enqueue_is_atomic_and_ids_increase(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let first = insert(
        &store,
        vec![
            job("q").payload(json!({"n": 1})),
            job("q").priority(3),
            job("q").at(T0 + SECOND),
        ],
        OnDuplicate::Refuse,
        T0,
    )
    .await
    .expect("enqueued");
    let ids: Vec<JobId> = first.iter().map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert_eq!(
        first
            .iter()
            .map(|e| (e.created, e.status, e.run_at_ms))
            .collect::<Vec<_>>(),
        [
            (true, Status::Ready, T0),
            (true, Status::Ready, T0),
            (true, Status::Scheduled, T0 + SECOND)
        ]
    );
    let shown = get(&store, ids[0]).await;
    assert_eq!(shown.spec.payload.get(), r#"{"n":1}"#);
    assert_eq!(
        (shown.spec.queue.as_str(), shown.spec.kind.as_str()),
        ("q", "work")
    );
    assert_eq!(shown.spec.created_at_ms, T0);
    assert!(shown.errors.is_empty());

    let keyed = enqueue(&store, vec![job("q").key("k")], T0).await;
    // A refused batch stores nothing, not even its valid jobs.
    let refused = insert(
        &store,
        vec![job("q"), job("q").key("k")],
        OnDuplicate::Refuse,
        T0,
    )
    .await;
    assert_eq!(
        refused.expect_err("refused"),
        StoreError::Duplicate {
            index: 1,
            queue: "q".into(),
            key: "k".into(),
            holder: KeyHolder::Job(keyed[0])
        }
    );
    let all = list(&store, JobFilter::default(), None, 100).await;
    assert_eq!(all, [ids.clone(), keyed.clone()].concat());
    let next = enqueue(&store, vec![job("q")], T0).await;
    assert!(next[0] > keyed[0]);

    // The trace context is kept with the job, read back, and handed to its taker.
    const TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut traced = job("traced");
    traced.job.traceparent = Some(TRACE.to_owned());
    let traced = enqueue(&store, vec![traced], T0).await[0];
    assert_eq!(
        get(&store, traced).await.spec.traceparent.as_deref(),
        Some(TRACE)
    );

    let store = reopen(backend, store, T0).await;
    // Ids are never reused, across restarts too.
    let after = enqueue(&store, vec![job("q")], T0).await;
    assert!(after[0] > next[0]);
    assert_eq!(
        get(&store, traced).await.spec.traceparent.as_deref(),
        Some(TRACE)
    );
    let taken = take(&store, &["traced"], 1, T0).await;
    assert_eq!(taken[0].traceparent.as_deref(), Some(TRACE));
    close(store).await;
}

pub(crate) async fn unique_keys_refuse_or_return_the_holder(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let held = enqueue(&store, vec![job("q1").key("k")], T0).await[0];
    // Keys are per queue.
    enqueue(&store, vec![job("q2").key("k")], T0).await;
    let existing = insert(&store, vec![job("q1").key("k")], OnDuplicate::Existing, T0)
        .await
        .expect("answered");
    assert_eq!(
        existing,
        [Enqueued {
            id: held,
            created: false,
            status: Status::Ready,
            run_at_ms: T0
        }]
    );
    // Within one batch, the second holder of a key is the first.
    let batch = insert(
        &store,
        vec![job("q1").key("m"), job("q1").key("m")],
        OnDuplicate::Existing,
        T0,
    )
    .await
    .expect("answered");
    assert_eq!(batch[1].id, batch[0].id);
    assert_eq!((batch[0].created, batch[1].created), (true, false));
    let refused = insert(
        &store,
        vec![job("q1").key("n"), job("q1").key("n")],
        OnDuplicate::Refuse,
        T0,
    )
    .await;
    assert!(
        matches!(
            refused,
            Err(StoreError::Duplicate {
                index: 1,
                holder: KeyHolder::Earlier(0),
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(list(&store, JobFilter::default(), None, 100).await.len(), 3);

    // A finished job (completed or dead) frees its key; an in-flight one holds it.
    let taken = take(&store, &["q1"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [held]);
    let refused = insert(&store, vec![job("q1").key("k")], OnDuplicate::Refuse, T0).await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { holder: KeyHolder::Job(existing), .. }) if existing == held)
    );
    let done = store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("completed");
    assert_eq!(done, [Ok(())]);
    let renewed = enqueue(&store, vec![job("q1").key("k")], T0).await[0];
    assert!(renewed > held);
    kill(&store, "q1", &[batch[0].id], T0).await;
    enqueue(&store, vec![job("q1").key("m")], T0).await;

    let store = reopen(backend, store, T0).await;
    for (queue, key) in [("q1", "k"), ("q1", "m"), ("q2", "k")] {
        let refused = insert(&store, vec![job(queue).key(key)], OnDuplicate::Refuse, T0).await;
        assert!(
            matches!(refused, Err(StoreError::Duplicate { .. })),
            "{queue}/{key} is still held after reopening: {refused:?}"
        );
    }
    close(store).await;
}

/// A delivery is stored only with its message (whose id becomes its parent) and only while its
/// subscription exists; the rest of the insert is stored all the same.
pub(crate) async fn deliveries_are_stored_with_their_message_and_subscription(
    backend: &impl Backend,
) {
    let store = backend.open(T0).await;
    let (sub, _) = store
        .insert_subscription(subscription("q", "https://a.example/"))
        .await
        .expect("stored");
    let (gone, _) = store
        .insert_subscription(subscription("q", "https://gone.example/"))
        .await
        .expect("stored");
    assert_eq!(store.delete_subscription(gone.id).await, Ok(0));
    let results = store
        .insert_jobs(
            vec![
                job("q").key("k"),
                job("q").at(T0 + SECOND),
                delivery(sub.id, 0),
                delivery(gone.id, 0),
                delivery(sub.id, 1).at(T0 + SECOND),
            ],
            OnDuplicate::Refuse,
            current(&store).await,
            T0,
        )
        .await
        .expect("stored");
    assert_eq!(results.len(), 5, "one result per insert");
    assert!(
        results[3].is_none(),
        "no delivery for a deleted subscription"
    );
    let [m0, m1, d0, d1] = [0, 1, 2, 4].map(|i| results[i].clone().expect("stored"));
    assert_eq!(
        [&m0, &m1, &d0, &d1].map(|e| (e.created, e.status)),
        [
            (true, Status::Ready),
            (true, Status::Scheduled),
            (true, Status::Ready),
            (true, Status::Scheduled)
        ]
    );
    for (delivery, message) in [(d0.id, m0.id), (d1.id, m1.id)] {
        let shown = get(&store, delivery).await;
        assert_eq!(
            (shown.spec.parent, shown.spec.queue, shown.spec.kind),
            (
                Some(message),
                delivery_queue(sub.id),
                DELIVERY_KIND.to_owned()
            )
        );
    }
    assert_eq!(get(&store, m0.id).await.spec.parent, None);

    // The child of a message that was not created (its key is held) is not stored either.
    let results = store
        .insert_jobs(
            vec![job("q").key("k"), delivery(sub.id, 0)],
            OnDuplicate::Existing,
            current(&store).await,
            T0,
        )
        .await
        .expect("answered");
    assert_eq!(
        results,
        [
            Some(Enqueued {
                id: m0.id,
                created: false,
                status: Status::Ready,
                run_at_ms: T0
            }),
            None
        ]
    );
    // A refused insert stores nothing, deliveries included.
    let refused = store
        .insert_jobs(
            vec![job("q"), delivery(sub.id, 0), job("q").key("k")],
            OnDuplicate::Refuse,
            current(&store).await,
            T0,
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { index: 2, .. })),
        "{refused:?}"
    );
    let deliveries = JobFilter::queue(delivery_queue(sub.id));
    assert_eq!(store.count_jobs(&deliveries).await, Ok(2));
    assert_eq!(store.count_jobs(&JobFilter::default()).await, Ok(4));

    let store = reopen(backend, store, T0).await;
    assert_eq!(get(&store, d1.id).await.spec.parent, Some(m1.id));
    close(store).await;
}

/// Many small enqueues at once (which a backend may commit together): each is answered with
/// its own jobs, ids increase within each, no id is given twice, and every job is stored with
/// its own payload, byte for byte.
pub(crate) async fn concurrent_small_enqueues_keep_their_own_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let requests: Vec<_> = (0..40u64)
        .map(|r| {
            let store = store.clone();
            tokio::spawn(async move {
                let jobs: Vec<Insert> = (0..=(r % 3))
                    .map(|j| job("q").payload(json!({"r": r, "j": j, "text": "a\u{0}b ✓"})))
                    .collect();
                let ids = enqueue(&store, jobs, T0).await;
                (r, ids)
            })
        })
        .collect();
    let mut all = Vec::new();
    for request in requests {
        let (r, ids) = request.await.expect("a request");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        for (j, id) in ids.iter().enumerate() {
            let shown = get(&store, *id).await;
            assert_eq!(
                shown.spec.payload.get(),
                json!({"r": r, "j": j, "text": "a\u{0}b ✓"}).to_string()
            );
        }
        all.extend(ids);
    }
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "no id given twice");
    assert_eq!(count, (0..40usize).map(|r| r % 3 + 1).sum::<usize>());
    let store = reopen(backend, store, T0).await;
    close(store).await;
}

/// What an enqueue reads of a queue (its settings and subscribers) is never older than a
/// change made before the insert: a backend that caches them refuses an insert made on older
/// ones and stores nothing of it (small enqueues committed together included), and reads fresh
/// ones after; a backend that reads them live takes it. Every kind of change counts.
pub(crate) async fn inserts_are_never_made_on_facts_older_than_a_change(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let cached = store.properties().cached_facts;
    let ready = |store: Arc<dyn Store>| async move {
        store.queue_counts("q").await.expect("counted").ready
    };
    // Jobs of the queue stored so far.
    let stored = std::cell::Cell::new(0u64);
    // Inserts made on `old` facts: one alone (a unique key), and several small ones at once.
    let try_old = |old: FactsSeen, round: usize| {
        let store = store.clone();
        async move {
            let alone = store
                .insert_jobs(
                    vec![job("q").key(&format!("k{round}"))],
                    OnDuplicate::Refuse,
                    old,
                    T0,
                )
                .await
                .map(|_| ());
            let small: Vec<_> = (0..6)
                .map(|_| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        store
                            .insert_jobs(vec![job("q")], OnDuplicate::Refuse, old, T0)
                            .await
                            .map(|_| ())
                    })
                })
                .collect();
            let mut results = vec![alone];
            for one in small {
                results.push(one.await.expect("an insert"));
            }
            results
        }
    };
    let check = async |old: FactsSeen, round: usize, what: &str| {
        let results = try_old(old, round).await;
        if cached {
            assert!(
                results.iter().all(|r| *r == Err(StoreError::FactsChanged)),
                "{what}: {results:?}"
            );
        } else {
            assert!(results.iter().all(Result::is_ok), "{what}: {results:?}");
            stored.set(stored.get() + results.len() as u64);
        }
        assert_eq!(
            ready(store.clone()).await,
            stored.get(),
            "{what}: stored only when taken"
        );
        let fresh = store.queue_facts("q").await.expect("facts read");
        // Made on fresh facts, it is taken: several at once, one of them on old facts.
        let current = try_old(fresh.seen, round + 100).await;
        assert!(current.iter().all(Result::is_ok), "{what}: {current:?}");
        stored.set(stored.get() + current.len() as u64);
        fresh
    };

    let first = store.queue_facts("q").await.expect("facts read");
    assert_eq!((&first.config, &first.subscribers), (&None, &vec![]));
    let settings = QueueConfig {
        message_ttl_ms: Some(60 * SECOND),
        ..QueueConfig::default()
    };
    store
        .update_queue("q", &|_| Some(settings.clone()))
        .await
        .expect("settings stored");
    let facts = check(first.seen, 1, "settings changed").await;
    assert_eq!(facts.config, Some(settings.clone()));

    let (sub, _) = store
        .insert_subscription(subscription("q", "https://a.example/"))
        .await
        .expect("subscribed");
    let facts = check(facts.seen, 2, "subscription made").await;
    assert_eq!(facts.subscribers, vec![sub.id]);

    // A subscription moved to another queue leaves this one.
    store
        .update_subscription(sub.id, &|current: &Subscription| {
            let mut moved = current.clone();
            moved.queue = "elsewhere".into();
            Some(moved)
        })
        .await
        .expect("moved");
    let facts = check(facts.seen, 3, "subscription moved").await;
    assert_eq!(facts.subscribers, vec![]);
    assert_eq!(subscribers(&store, "elsewhere").await, Ok(vec![sub.id]));

    let (other, _) = store
        .insert_subscription(subscription("q", "https://b.example/"))
        .await
        .expect("subscribed");
    let facts = store.queue_facts("q").await.expect("facts read");
    store.delete_subscription(other.id).await.expect("deleted");
    let facts = check(facts.seen, 4, "subscription deleted").await;
    assert_eq!(facts.subscribers, vec![]);

    // A change that leaves the queue's subscribers as they are keeps the facts good.
    store
        .update_subscription(sub.id, &|current: &Subscription| {
            let mut off = current.clone();
            off.enabled = false;
            Some(off)
        })
        .await
        .expect("disabled");
    let kept = try_old(facts.seen, 5).await;
    assert!(kept.iter().all(Result::is_ok), "{kept:?}");
    stored.set(stored.get() + kept.len() as u64);
    assert_eq!(ready(store.clone()).await, stored.get());

    // Deleting the queue deletes its settings (and its jobs).
    store.delete_queue("q", T0).await.expect("deleted");
    stored.set(0);
    let facts = check(facts.seen, 6, "queue deleted").await;
    assert_eq!(facts.config, None);
    close(store).await;
}
