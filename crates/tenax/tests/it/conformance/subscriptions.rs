//! `SubscriptionStore`: webhook subscriptions.
//!
//! | operation                       | cases |
//! |---------------------------------|-------|
//! | `insert_subscription`           | `subscriptions_are_stored_changed_and_deleted`, `unique_endpoints_are_held_per_queue` |
//! | `update_subscription`           | `subscriptions_are_stored_changed_and_deleted`, `unique_endpoints_are_held_per_queue` |
//! | `delete_subscription`           | `subscriptions_are_stored_changed_and_deleted`, `deliveries_are_taken_finished_and_logged` (`job_leases.rs`) |
//! | `subscription`, `subscriptions` | `subscriptions_are_stored_changed_and_deleted`; every reopen |
//!
//! Secrets of subscriptions at rest: `secrets.rs`.

use std::sync::Mutex;

use tenax_core::model::Subscription;
use tenax_core::store::StoreError;

use super::support::*;

/// Subscriptions: stored with an assigned id, listed by queue, changed atomically, deleted.
pub(crate) async fn subscriptions_are_stored_changed_and_deleted(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.subscriptions(None).await, Ok(vec![]));
    let insert = async |queue: &str, endpoint: &str| {
        let (stored, created) = store
            .insert_subscription(subscription(queue, endpoint))
            .await
            .expect("stored");
        assert!(created, "{endpoint}");
        stored
    };
    let a = insert("q", "https://a.example/").await;
    let b = insert("r", "https://b.example/").await;
    let c = insert("q", "https://c.example/").await;
    assert!(a.id < b.id && b.id < c.id, "ids increase");
    // Stored as given, with its id.
    let mut given = subscription("q", "https://a.example/");
    given.id = a.id;
    assert_eq!(a, given);
    assert_eq!(store.subscription(a.id).await, Ok(Some(a.clone())));
    assert_eq!(
        store.subscriptions(None).await,
        Ok(vec![a.clone(), b.clone(), c.clone()])
    );
    assert_eq!(
        store.subscriptions(Some("q")).await,
        Ok(vec![a.clone(), c.clone()])
    );
    assert_eq!(store.subscriptions(Some("nobody")).await, Ok(vec![]));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![a.id, c.id]));
    assert_eq!(subscribers(&store, "nobody").await, Ok(vec![]));

    // Changed: the change sees the stored subscription, and what it returns is stored.
    let seen = Mutex::new(Vec::new());
    let changed = store
        .update_subscription(a.id, &|current: &Subscription| {
            seen.lock().expect("not poisoned").push(current.clone());
            let mut next = current.clone();
            next.enabled = false;
            next.disabled_reason = Some("failing for a day".into());
            next.health.failing_since_ms = Some(T0 + 1);
            next.updated_at_ms = T0 + 2;
            Some(next)
        })
        .await
        .expect("changed");
    assert!(
        seen.lock().expect("not poisoned").iter().all(|s| *s == a),
        "the change saw the stored subscription"
    );
    assert_eq!(
        (
            changed.id,
            changed.enabled,
            changed.health.failing_since_ms,
            changed.endpoint.as_str()
        ),
        (a.id, false, Some(T0 + 1), "https://a.example/")
    );
    assert_eq!(store.subscription(a.id).await, Ok(Some(changed.clone())));
    // A change that declines leaves it, and answers with it as stored.
    assert_eq!(
        store.update_subscription(a.id, &|_| None).await,
        Ok(changed.clone())
    );

    // Deleted (with its deliveries: none here); then there is none to change or delete.
    assert_eq!(store.delete_subscription(c.id).await, Ok(0));
    assert_eq!(store.subscription(c.id).await, Ok(None));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![a.id]));
    assert_eq!(
        store.delete_subscription(c.id).await,
        Err(StoreError::NoSubscription(c.id))
    );
    assert_eq!(
        store
            .update_subscription(c.id, &|s: &Subscription| Some(s.clone()))
            .await,
        Err(StoreError::NoSubscription(c.id))
    );

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(changed)));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![a.id]));
    assert_eq!(subscribers(&store, "r").await, Ok(vec![b.id]));
    // Ids are never reused, across restarts too.
    let (d, _) = store
        .insert_subscription(subscription("q", "https://d.example/"))
        .await
        .expect("stored");
    assert!(d.id > c.id);
    close(store).await;
}

/// A subscription that asks for it holds its endpoint in its queue: another one asking for the
/// same is answered with the holder, and a change onto a held endpoint is refused.
pub(crate) async fn unique_endpoints_are_held_per_queue(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let url = "https://hooks.example/a";
    let insert = async |subscription: Subscription| {
        store
            .insert_subscription(subscription)
            .await
            .expect("answered")
    };
    let (holder, created) = insert(zaqar_subscription("q", url)).await;
    assert!(created);
    let answered = insert(zaqar_subscription("q", url)).await;
    assert_eq!(
        answered,
        (holder.clone(), false),
        "the holder, nothing stored"
    );
    assert_eq!(subscribers(&store, "q").await, Ok(vec![holder.id]));
    // Other queues, and subscriptions that do not ask for it, may have the endpoint too.
    let (elsewhere, created) = insert(zaqar_subscription("r", url)).await;
    assert!(created);
    let (plain, created) = insert(subscription("q", url)).await;
    assert!(created);
    assert_eq!(
        subscribers(&store, "q").await,
        Ok(vec![holder.id, plain.id])
    );

    // A change onto a held endpoint is refused, and changes nothing.
    let (second, _) = insert(zaqar_subscription("q", "https://hooks.example/b")).await;
    let onto = |endpoint: &'static str| {
        move |current: &Subscription| {
            let mut next = current.clone();
            next.endpoint = endpoint.to_owned();
            Some(next)
        }
    };
    let taken = StoreError::EndpointTaken {
        queue: "q".into(),
        endpoint: url.into(),
        holder: holder.id,
    };
    assert_eq!(
        store.update_subscription(second.id, &onto(url)).await,
        Err(taken.clone())
    );
    assert_eq!(
        store.subscription(second.id).await,
        Ok(Some(second.clone()))
    );
    // So is turning a subscription that did not ask for it into one that does.
    let zaqar = |current: &Subscription| {
        let mut next = current.clone();
        next.format = tenax_core::model::EnvelopeFormat::Zaqar;
        Some(next)
    };
    assert_eq!(
        store.update_subscription(plain.id, &zaqar).await,
        Err(taken.clone())
    );
    // The holder keeps its endpoint through a change.
    let disable = |current: &Subscription| {
        let mut next = current.clone();
        next.enabled = false;
        Some(next)
    };
    let kept = store.update_subscription(holder.id, &disable).await;
    assert_eq!(
        kept.map(|s| (s.enabled, s.endpoint)),
        Ok((false, url.to_owned()))
    );
    // A holder that moves frees its endpoint; so does one deleted.
    store
        .update_subscription(holder.id, &onto("https://hooks.example/c"))
        .await
        .expect("moved");
    let (taker, created) = insert(zaqar_subscription("q", url)).await;
    assert!(created, "the endpoint was freed by the move");
    assert_eq!(store.delete_subscription(taker.id).await, Ok(0));
    let (newest, created) = insert(zaqar_subscription("q", url)).await;
    assert!(created, "the endpoint was freed by the delete");
    assert!(newest.id > taker.id);
    assert!(elsewhere.id < newest.id);

    // Held across a restart.
    let store = reopen(backend, store, T0).await;
    let answered = store
        .insert_subscription(zaqar_subscription("q", url))
        .await
        .expect("answered");
    assert_eq!((answered.0.id, answered.1), (newest.id, false));
    assert_eq!(
        store
            .update_subscription(second.id, &onto("https://hooks.example/c"))
            .await,
        Err(StoreError::EndpointTaken {
            queue: "q".into(),
            endpoint: "https://hooks.example/c".into(),
            holder: holder.id,
        })
    );
    close(store).await;
}
