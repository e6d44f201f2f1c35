//! What only a pooled deployment promises (`tenax-pools`): queues spread over the pools, ids
//! that name their pool, calls across pools merged, and what one transaction cannot span
//! refused. Plain tests on the [`Pooled`] backend; the conformance cases run on it as well.

use std::sync::Arc;

use tenax_core::model::{After, JobFilter, JobId, OnDuplicate, Page};
use tenax_core::store::{Store, StoreError};

use super::support::*;

/// Enqueues one job into each of `queues`; answers their ids, in order.
async fn one_each(store: &Arc<dyn Store>, queues: &[String]) -> Vec<JobId> {
    let mut ids = Vec::new();
    for queue in queues {
        ids.extend(enqueue(store, vec![job(queue)], T0).await);
    }
    ids
}

/// Two queues of `queues` placed on different pools.
async fn apart(backend: &Pooled, queues: &[String]) -> (String, String) {
    let mut first: Option<(String, u8)> = None;
    for queue in queues {
        let pool = backend.placement(queue).await.expect("placed");
        match &first {
            None => first = Some((queue.clone(), pool)),
            Some((other, at)) if *at != pool => return (other.clone(), queue.clone()),
            Some(_) => {}
        }
    }
    panic!("every queue of {queues:?} is on one pool");
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("q{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_spread_over_the_pools_and_ids_name_their_pool() {
    let backend = Pooled::new().await;
    if backend.missing() {
        return;
    }
    let store = backend.open(T0).await;
    let queues = names(16);
    let ids = one_each(&store, &queues).await;

    // Placed by weight (1 and 1) on the two pools, none on the catalogue.
    let mut on = [0; 3];
    for (queue, id) in queues.iter().zip(&ids) {
        let pool = backend.placement(queue).await.expect("placed");
        on[usize::from(pool)] += 1;
        assert_eq!(
            id.0 % 64,
            u64::from(pool),
            "job {id} of {queue} names pool {pool}"
        );
    }
    assert_eq!(on[0], 0, "the catalogue holds no queue: {on:?}");
    assert!(on[1] > 0 && on[2] > 0, "both pools hold queues: {on:?}");
    assert_eq!(
        (backend.jobs_in(1).await, backend.jobs_in(2).await),
        (i64::from(on[1]), i64::from(on[2]))
    );

    // Every read finds them, wherever they are.
    for id in &ids {
        assert!(store.get_job(*id).await.expect("read").is_some());
    }
    let mut sorted = ids.clone();
    sorted.sort();
    let listed: Vec<JobId> = store
        .list_jobs(&JobFilter::default(), Page::after(None, 100))
        .await
        .expect("listed")
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(listed, sorted, "one listing in id order across the pools");
    let paged: Vec<JobId> = store
        .list_jobs(&JobFilter::default(), Page::after(Some(sorted[5]), 4))
        .await
        .expect("listed")
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(paged, sorted[6..10], "pages follow on across the pools");
    assert_eq!(
        store
            .count_jobs(&JobFilter::default())
            .await
            .expect("counted"),
        16
    );
    let counted: Vec<String> = store
        .counts()
        .await
        .expect("counts")
        .into_iter()
        .map(|c| c.queue)
        .collect();
    let mut by_name = queues.clone();
    by_name.sort();
    assert_eq!(counted, by_name);

    // They stay where they are across a restart.
    close(store).await;
    let store = backend.open(T0).await;
    for (queue, id) in queues.iter().zip(&ids) {
        let job = store.get_job(*id).await.expect("read").expect("kept");
        assert_eq!(&job.spec.queue, queue);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_serves_the_queues_of_every_pool() {
    let backend = Pooled::new().await;
    if backend.missing() {
        return;
    }
    let store = backend.open(T0).await;
    let queues = names(8);
    one_each(&store, &queues).await;
    let (a, b) = apart(&backend, &queues).await;

    let taken = take(&store, &[&a, &b], 10, T0).await;
    let mut from: Vec<&str> = taken.iter().map(|j| j.queue.as_str()).collect();
    from.sort_unstable();
    let mut both = [a.as_str(), b.as_str()];
    both.sort_unstable();
    assert_eq!(from, both, "one job of each pool's queue");

    // A take of at most one, many times, starts at another pool each time: neither pool's
    // queue waits for the other to be empty.
    for queue in [&a, &b] {
        enqueue(&store, vec![job(queue), job(queue)], T0).await;
    }
    let mut seen = Vec::new();
    for _ in 0..2 {
        let one = take(&store, &[&a, &b], 1, T0).await;
        seen.push(one[0].queue.clone());
    }
    seen.sort();
    let mut expected = vec![a.clone(), b.clone()];
    expected.sort();
    assert_eq!(seen, expected, "turns alternate between the pools");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_transaction_cannot_span_is_refused() {
    let backend = Pooled::new().await;
    if backend.missing() {
        return;
    }
    let store = backend.open(T0).await;
    let queues = names(8);
    let ids = one_each(&store, &queues).await;
    let (a, b) = apart(&backend, &queues).await;

    // One insert into queues on two pools.
    let refused = insert(&store, vec![job(&a), job(&b)], OnDuplicate::Refuse, T0).await;
    assert!(
        matches!(&refused, Err(StoreError::AcrossPools(m)) if m.contains("different pools")),
        "{refused:?}"
    );

    // A job waiting for a job of another pool's queue.
    let parent = ids[queues.iter().position(|q| *q == a).expect("a")];
    let mut child = job(&b);
    child.after = vec![After::Job(parent)];
    let refused = insert(&store, vec![child], OnDuplicate::Refuse, T0).await;
    assert!(
        matches!(&refused, Err(StoreError::AcrossPools(m)) if m.contains("different pools")),
        "{refused:?}"
    );

    // A queue used for the first time by a job that waits is placed with what it waits for.
    let mut child = job("new-children");
    child.after = vec![After::Job(parent)];
    insert(&store, vec![child], OnDuplicate::Refuse, T0)
        .await
        .expect("placed with its parent");
    assert_eq!(
        backend.placement("new-children").await,
        backend.placement(&a).await
    );

    // Nothing was stored by the refused inserts.
    assert_eq!(
        store
            .count_jobs(&JobFilter::default())
            .await
            .expect("counted"),
        9
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_are_refused() {
    let backend = Pooled::new().await;
    if backend.missing() {
        return;
    }
    let store = backend.open(T0).await;
    let refused = store.import_jobs(Vec::new()).await;
    assert!(
        matches!(&refused, Err(StoreError::Refused(m)) if m.contains("tenax copy")),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_had_queues_before_its_pools_keeps_them() {
    let backend = Pooled::new().await;
    if backend.missing() {
        return;
    }
    // A single database first: ids 1, 2, 3, … whatever their remainders.
    let single = backend.catalogue.open(T0).await;
    let jobs = (0..70).map(|_| job("old")).collect();
    let old = enqueue(&single, jobs, T0).await;
    let (subscribed, _) = single
        .insert_subscription(subscription("old", "https://a.example/"))
        .await
        .expect("subscribed");
    close(single).await;

    // Then its pools are registered.
    let store = backend.open(T0).await;
    for id in &old {
        let job = store
            .get_job(*id)
            .await
            .expect("read")
            .expect("still there");
        assert_eq!(job.spec.queue, "old", "job {id}");
    }
    assert!(
        store
            .subscription(subscribed.id)
            .await
            .expect("read")
            .is_some()
    );
    let more = enqueue(&store, vec![job("old")], T0).await;
    assert_eq!(
        backend.placement("old").await,
        Some(0),
        "it stays with its jobs"
    );
    assert_eq!(backend.jobs_in(0).await, 71);
    assert_eq!(
        more[0].0 % 64,
        0,
        "the catalogue's new ids name it: {}",
        more[0]
    );
    assert!(more[0] > old[69], "and come after its old ones");

    let fresh = one_each(&store, &names(8)).await;
    assert_eq!(backend.jobs_in(0).await, 71, "new queues go to the pools");
    for id in fresh {
        assert!(store.get_job(id).await.expect("read").is_some());
    }
    let taken = take(&store, &["old"], 100, T0).await;
    assert_eq!(taken.len(), 71);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_starts_empty() {
    let (with_queues, catalogue) = (Pooled::new().await, Pooled::new().await);
    if with_queues.missing() || catalogue.missing() {
        return;
    }
    let single = with_queues.catalogue.open(T0).await;
    enqueue(&single, vec![job("q")], T0).await;
    close(single).await;

    // The same key for both databases, as one deployment's servers hold.
    let keys = with_queues.keys();
    let database = tenax_postgres::Database::new(catalogue.catalogue.url(), None).expect("a URL");
    let options = tenax_postgres::PostgresOptions::new(database, keys);
    let opened =
        tenax_postgres::PostgresStore::open(&options, &tenax_core::clock::Clock::manual(T0))
            .await
            .expect("the catalogue");
    let new = tenax_core::model::pool::PoolSpec {
        name: "full".to_owned(),
        uri: with_queues.catalogue.url().to_owned(),
        weight: 1,
        flavor: None,
        options: serde_json::Map::new(),
    };
    let refused = tenax_pools::admin::register(
        &opened,
        &options,
        new,
        &tenax_core::clock::Clock::manual(T0),
    )
    .await;
    assert!(
        matches!(&refused, Err(StoreError::Pool(e)) if e.to_string().starts_with("uri: the database holds queues")),
        "{refused:?}"
    );
    assert!(opened.pools().await.expect("pools").is_empty());
}
