//! `QueueStore`: queues' settings, and what their limits have used.
//!
//! | operation           | cases |
//! |---------------------|-------|
//! | `queue`, `queues`   | `queue_configs_are_kept`, `queues_are_deleted_with_their_jobs`, `queues_are_listed_once_from_every_job`; every reopen |
//! | `update_queue`      | `queue_configs_are_kept`, `queues_are_deleted_with_their_jobs` |
//! | `delete_queue`      | `queues_are_deleted_with_their_jobs`, `rate_limits_hold_takes_back_across_restarts` (`job_leases.rs`) |
//! | `limit_use`         | `rate_limits_hold_takes_back_across_restarts` (`job_leases.rs`) |

use std::sync::Mutex;

use serde_json::json;
use tenax_core::model::{
    DeadLetter, JobFilter, QueueConfig, QueueCounts, RateLimit, Status, StoredPolicy,
};
use tenax_core::store::{DecideContext, StoreError};

use super::support::*;

/// `queues` names every queue once, whether its jobs are unfinished, finished or both, or it
/// has settings and jobs, in name order.
pub(crate) async fn queues_are_listed_once_from_every_job(backend: &impl Backend) {
    let store = backend.open(T0).await;
    // "both": one job finished, one waiting; "done": finished only; "live": waiting only.
    enqueue(
        &store,
        vec![job("both"), job("both"), job("done"), job("live")],
        T0,
    )
    .await;
    let taken = take(&store, &["both", "done"], 2, T0).await;
    assert_eq!(taken.len(), 2);
    let acks: Vec<_> = taken.iter().map(ack).collect();
    let completed = store
        .complete_plain(&acks, true, T0 + 1)
        .await
        .expect("completed");
    assert!(completed.iter().all(Result::is_ok), "{completed:?}");
    let paused = QueueConfig {
        paused: true,
        ..QueueConfig::default()
    };
    for queue in ["both", "settings"] {
        store
            .update_queue(queue, &|_| Some(paused.clone()))
            .await
            .expect("put");
    }
    let names: Vec<(String, bool)> = store
        .queues()
        .await
        .expect("queues")
        .into_iter()
        .map(|(name, config)| (name, config.paused))
        .collect();
    assert_eq!(
        names,
        [
            ("both".to_owned(), true),
            ("done".to_owned(), false),
            ("live".to_owned(), false),
            ("settings".to_owned(), true),
        ]
    );
}

pub(crate) async fn queue_configs_are_kept(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.queue("x").await.expect("queue"), None);
    assert!(store.queues().await.expect("queues").is_empty());
    let paused = QueueConfig {
        policy: None,
        paused: true,
        ..QueueConfig::default()
    };
    store
        .update_queue("x", &|_| Some(paused.clone()))
        .await
        .expect("put");
    assert_eq!(store.queue("x").await.expect("queue"), Some(paused.clone()));
    enqueue(&store, vec![job("jobs-only")], T0).await;
    // Queues with settings, and queues that only have jobs (with default settings).
    assert_eq!(
        store.queues().await.expect("queues"),
        [
            ("jobs-only".to_owned(), QueueConfig::default()),
            ("x".to_owned(), paused)
        ]
    );
    let policy = fixed(7 * SECOND);
    let configured = QueueConfig {
        policy: Some(StoredPolicy::new(policy.clone())),
        paused: false,
        ..QueueConfig::default()
    };
    store
        .update_queue("x", &|_| Some(configured.clone()))
        .await
        .expect("put");
    assert_eq!(
        store.queue("x").await.expect("queue"),
        Some(configured.clone())
    );
    store
        .update_queue("y", &|_| Some(QueueConfig::default()))
        .await
        .expect("put");

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.queue("x").await.expect("queue"), Some(configured));
    assert_eq!(
        store.queue("y").await.expect("queue"),
        Some(QueueConfig::default())
    );
    // The queue policy reaches decisions after a reopen.
    let id = enqueue(&store, vec![job("x")], T0).await[0];
    let taken = take(&store, &["x"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [id]);
    let seen = Mutex::new(None);
    store
        .fail_job(ack(&taken[0]), T0, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("not poisoned") = queue_policy_of(ctx);
            dead(T0, "x")(ctx)
        })
        .await
        .expect("failed");
    assert_eq!(seen.into_inner().expect("not poisoned"), Some(policy));
    close(store).await;
}

/// Queue settings are changed through a closure that sees the stored ones; a queue is deleted
/// with its settings and every job in it, and keeps its subscriptions.
pub(crate) async fn queues_are_deleted_with_their_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let mut metadata = serde_json::Map::new();
    metadata.insert("team".into(), json!("billing"));
    let config = QueueConfig {
        policy: Some(StoredPolicy::new(fixed(3 * SECOND))),
        paused: false,
        disable_overrides: true,
        message_ttl_ms: Some(60 * SECOND),
        metadata: Some(metadata),
        dead_letter: Some(DeadLetter {
            queue: "q-dead".into(),
            max_claims: 3,
            ttl_ms: Some(90 * SECOND),
        }),
        concurrency: Some(7),
        rate: Some(RateLimit {
            limit: 100,
            period_ms: 60 * SECOND,
        }),
        encrypt_payloads: true,
        // A flavor is a pooled deployment's, which checks it: tests/it/conformance/pools.rs.
        flavor: None,
    };
    // A change that declines stores nothing.
    assert_eq!(store.update_queue("q", &|_| None).await, Ok(None));
    assert_eq!(store.queue("q").await, Ok(None));
    let seen = Mutex::new(Vec::new());
    let put = |current: Option<&QueueConfig>| {
        seen.lock().expect("not poisoned").push(current.cloned());
        Some(config.clone())
    };
    assert_eq!(
        store.update_queue("q", &put).await,
        Ok(Some(config.clone()))
    );
    assert_eq!(
        store.update_queue("q", &put).await,
        Ok(Some(config.clone()))
    );
    let seen = seen.into_inner().expect("not poisoned");
    assert_eq!(seen.first(), Some(&None));
    assert_eq!(seen.last(), Some(&Some(config.clone())));
    assert_eq!(
        store.update_queue("q", &|_| None).await,
        Ok(Some(config.clone())),
        "a change that declines answers with the stored settings"
    );

    let ids = enqueue(
        &store,
        vec![
            job("q").key("k"),
            job("q").at(T0 + SECOND),
            job("q"),
            job("r"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[0]]);
    let (sub, _) = store
        .insert_subscription(subscription("q", "https://a.example/"))
        .await
        .expect("stored");
    let counts =
        |queue: &str, [scheduled, ready, in_flight, completed, dead]: [u64; 5]| QueueCounts {
            queue: queue.to_owned(),
            scheduled,
            ready,
            in_flight,
            completed,
            dead,
            cancelled: 0,
            waiting: 0,
        };
    assert_eq!(
        store.queue_counts("q").await,
        Ok(counts("q", [1, 1, 1, 0, 0]))
    );

    assert_eq!(store.delete_queue("q", T0).await, Ok(3));
    assert_eq!(store.queue("q").await, Ok(None));
    assert_eq!(store.queue_counts("q").await, Ok(counts("q", [0; 5])));
    assert_eq!(
        store.queues().await,
        Ok(vec![("r".to_owned(), QueueConfig::default())])
    );
    for id in &ids[..3] {
        assert!(
            store.get_job(*id).await.expect("readable").is_none(),
            "job {id}"
        );
    }
    assert_eq!(status(&store, ids[3]).await, Some(Status::Ready));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![sub.id]));
    let results = store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("commit");
    assert_eq!(results, [Err(StoreError::NotFound(ids[0]))]);
    assert_eq!(store.delete_queue("nothing", T0).await, Ok(0));
    // Its keys are free; a new job makes the queue exist again, with default settings.
    let keyed = enqueue(&store, vec![job("q").key("k")], T0).await[0];

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.queue("q").await, Ok(None));
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[3], keyed]
    );
    assert_eq!(subscribers(&store, "q").await, Ok(vec![sub.id]));
    close(store).await;
}
