//! `JobReads`: reading jobs, their attempts and the counts.
//!
//! | operation         | cases |
//! |-------------------|-------|
//! | `get_job`         | most cases, in every file |
//! | `list_jobs`       | `list_filters_and_pages`, `list_filters_for_messages_and_counts_agree`, `listings_page_both_ways_by_queue_type_and_status`; every reopen |
//! | `count_jobs`      | `list_filters_for_messages_and_counts_agree` |
//! | `count_jobs_upto` | `listings_page_both_ways_by_queue_type_and_status` |
//! | `peek_jobs`       | `peeks_and_checked_deletes_see_the_current_state` (`job_curation.rs`) |
//! | `counts`          | `counts_per_queue_and_status`; every reopen |
//! | `queue_counts`    | `list_filters_for_messages_and_counts_agree`, `queues_are_deleted_with_their_jobs` (`queues.rs`) |
//! | `attempts`        | `deliveries_are_taken_finished_and_logged` (`job_leases.rs`); every reopen |
//! | `backlog`         | `backlog_and_lease_facts_are_reported` |
//! | `search_jobs`     | `searches_are_bounded_and_go_on` |
//! | `ready_since`     | `heads_of_queues_tell_how_long_they_waited` |
//!
//! "Every reopen": [`reopen`](crate::conformance::support::reopen), which most cases end with,
//! compares everything these read before closing the store and after opening it again.

use std::sync::{Arc, Mutex};

use serde_json::json;
use tenax_core::model::{
    ClaimId, JobFilter, JobId, Order, Page, QueueCounts, Searched, Selection, Status, TextQuery,
};
use tenax_core::store::{DecideContext, LeaseFacts, Store};

use super::support::*;

pub(crate) async fn list_filters_and_pages(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("a").kind("x"),
            job("b").kind("y"),
            job("a").kind("y").at(T0 + SECOND),
            job("a").kind("x"),
            job("b").kind("x"),
            job("a").kind("x"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["b"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[1]]);
    let filter = |queue: Option<&str>, status: Option<Status>, kind: Option<&str>| JobFilter {
        queue: queue.map(str::to_owned),
        status,
        kind: kind.map(str::to_owned),
        ..JobFilter::default()
    };
    let pick = |indexes: &[usize]| indexes.iter().map(|i| ids[*i]).collect::<Vec<_>>();

    assert_eq!(list(&store, filter(None, None, None), None, 100).await, ids);
    assert_eq!(
        list(&store, filter(Some("a"), None, None), None, 100).await,
        pick(&[0, 2, 3, 5])
    );
    assert_eq!(
        list(
            &store,
            filter(None, Some(Status::Scheduled), None),
            None,
            100
        )
        .await,
        pick(&[2])
    );
    assert_eq!(
        list(
            &store,
            filter(None, Some(Status::InFlight), None),
            None,
            100
        )
        .await,
        pick(&[1])
    );
    assert_eq!(
        list(&store, filter(None, None, Some("x")), None, 100).await,
        pick(&[0, 3, 4, 5])
    );
    assert_eq!(
        list(
            &store,
            filter(Some("a"), Some(Status::Ready), Some("x")),
            None,
            100
        )
        .await,
        pick(&[0, 3, 5])
    );
    assert!(
        list(&store, filter(Some("zzz"), None, None), None, 100)
            .await
            .is_empty()
    );
    // Pages in id order, after a given id; a type filter pages by matching jobs.
    assert_eq!(
        list(&store, filter(None, None, None), None, 2).await,
        pick(&[0, 1])
    );
    assert_eq!(
        list(&store, filter(None, None, None), Some(ids[1]), 2).await,
        pick(&[2, 3])
    );
    assert_eq!(
        list(&store, filter(None, None, None), Some(ids[3]), 2).await,
        pick(&[4, 5])
    );
    assert!(
        list(&store, filter(None, None, None), Some(ids[5]), 2)
            .await
            .is_empty()
    );
    assert_eq!(
        list(&store, filter(None, None, Some("x")), Some(ids[0]), 2).await,
        pick(&[3, 4])
    );

    let store = reopen(backend, store, T0).await;
    let ready = if store.properties().durable_leases {
        pick(&[0, 3, 4, 5])
    } else {
        pick(&[0, 1, 3, 4, 5])
    };
    assert_eq!(
        list(&store, filter(None, Some(Status::Ready), None), None, 100).await,
        ready
    );
    close(store).await;
}

/// What the metrics read: each queue's backlog (unfinished and dead jobs by status) and when the
/// ready job first in line became ready (the heads the dashboard reads too), when a taken job
/// became ready, and what a lease was when it ends, which a shared backend must report (the
/// lease may be another server's).
pub(crate) async fn backlog_and_lease_facts_are_reported(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert!(store.backlog().await.expect("backlog").is_empty());
    enqueue(
        &store,
        vec![
            job("a").kind("mail").at(T0 - 5 * SECOND),
            job("a").kind("mail").at(T0 - 2 * SECOND),
            job("a").priority(5),
            job("a").at(T0 + SECOND),
            job("a"),
            job("b").at(T0 + SECOND),
        ],
        T0,
    )
    .await;
    let by_queue = |store: &Arc<dyn Store>| {
        let store = store.clone();
        async move {
            let mut backlog = store.backlog().await.expect("backlog");
            backlog.sort_by(|x, y| x.queue.cmp(&y.queue));
            backlog
        }
    };
    let backlog = by_queue(&store).await;
    let a = &backlog[0];
    assert_eq!(a.queue, "a");
    assert_eq!((a.scheduled, a.ready, a.in_flight, a.dead), (1, 4, 0, 0));
    let b = &backlog[1];
    assert_eq!((b.queue.as_str(), b.scheduled, b.ready), ("b", 1, 0));
    // First in line is the priority-5 job, ready since its enqueue; b has none ready.
    let queues = ["a".to_owned(), "b".to_owned()];
    let heads = || store.ready_since(&queues);
    assert_eq!(heads().await.expect("heads"), [Some(T0), None]);

    let taken = take(&store, &["a"], 3, T0 + 100).await;
    let ready_at: Vec<u64> = taken.iter().map(|t| t.ready_at_ms).collect();
    assert_eq!(ready_at, [T0, T0 - 5 * SECOND, T0 - 2 * SECOND]);
    let backlog = by_queue(&store).await;
    assert_eq!((backlog[0].ready, backlog[0].in_flight), (1, 3));
    assert_eq!(heads().await.expect("heads"), [Some(T0), None]);

    let done = store
        .complete_jobs(&[ack(&taken[1])], &[], true, T0 + 300)
        .await
        .expect("commit");
    let shared = store.properties().shared;
    match &done[..] {
        [Ok(Some(facts))] => assert_eq!(
            facts,
            &LeaseFacts {
                queue: "a".into(),
                kind: "mail".into(),
                created_at_ms: T0,
                taken_at_ms: T0 + 100,
                traceparent: None,
            }
        ),
        [Ok(None)] => assert!(!shared, "a shared backend must report what a lease was"),
        other => panic!("{other:?}"),
    }
    let seen = Mutex::new(None);
    let dying = dead(T0 + 400, "fatal");
    store
        .fail_job(ack(&taken[2]), T0 + 400, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("lock") = Some(ctx.lease.clone());
            dying(ctx)
        })
        .await
        .expect("dead");
    match seen.into_inner().expect("lock").expect("decided") {
        Some(facts) => {
            assert_eq!((facts.queue.as_str(), facts.kind.as_str()), ("a", "mail"));
            assert_eq!(facts.taken_at_ms, T0 + 100);
        }
        None => assert!(!shared, "a shared backend must report what a lease was"),
    }
    let backlog = by_queue(&store).await;
    let a = &backlog[0];
    assert_eq!((a.scheduled, a.ready, a.in_flight, a.dead), (1, 1, 1, 1));
    close(store).await;
}

/// Newest first, by any mix of queue, type and status, with counts that agree: what the
/// dashboard's job pages ask.
pub(crate) async fn listings_page_both_ways_by_queue_type_and_status(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let mut jobs = Vec::new();
    for n in 0..30 {
        let queue = if n % 3 == 0 { "a" } else { "b" };
        let kind = if n % 2 == 0 { "even" } else { "odd" };
        jobs.push(job(queue).kind(kind));
    }
    let ids = enqueue(&store, jobs, T0).await;
    kill(&store, "a", &[ids[0], ids[3]], T0).await;
    let filter = |queue: Option<&str>, status: Option<Status>, kind: Option<&str>| JobFilter {
        queue: queue.map(str::to_owned),
        status,
        kind: kind.map(str::to_owned),
        ..JobFilter::default()
    };
    let newest = |filter: JobFilter, after: Option<JobId>, limit: usize| {
        let store = store.clone();
        async move {
            let page = Page {
                after,
                limit,
                order: Order::Descending,
            };
            let jobs = store.list_jobs(&filter, page).await.expect("list");
            jobs.iter().map(|j| j.id).collect::<Vec<_>>()
        }
    };
    let expected = |keep: &dyn Fn(usize) -> bool| -> Vec<JobId> {
        (0..30).rev().filter(|n| keep(*n)).map(|n| ids[n]).collect()
    };
    let b_odd = expected(&|n| n % 3 != 0 && n % 2 == 1);
    assert_eq!(
        newest(filter(Some("b"), None, Some("odd")), None, 100).await,
        b_odd
    );
    // Page by page from the cursor, newest first.
    let first = newest(filter(Some("b"), None, Some("odd")), None, 4).await;
    assert_eq!(first, b_odd[..4]);
    let second = newest(
        filter(Some("b"), None, Some("odd")),
        first.last().copied(),
        4,
    )
    .await;
    assert_eq!(second, b_odd[4..8]);
    let dead = filter(None, Some(Status::Dead), None);
    assert_eq!(newest(dead.clone(), None, 10).await, [ids[3], ids[0]]);
    let a_even_ready = filter(Some("a"), Some(Status::Ready), Some("even"));
    assert_eq!(
        newest(a_even_ready.clone(), None, 100).await,
        expected(&|n| n % 3 == 0 && n % 2 == 0 && n != 0)
    );
    // Counting up to a bound: the count and whether more match.
    let b_odd_filter = filter(Some("b"), None, Some("odd"));
    let n = b_odd.len() as u64;
    assert_eq!(
        store
            .count_jobs_upto(&b_odd_filter, n)
            .await
            .expect("count"),
        (n, false)
    );
    assert_eq!(
        store
            .count_jobs_upto(&b_odd_filter, 3)
            .await
            .expect("count"),
        (3, true)
    );
    assert_eq!(
        store.count_jobs_upto(&dead, 100).await.expect("count"),
        (2, false)
    );
    assert_eq!(store.count_jobs(&dead).await.expect("count"), 2);
    assert_eq!(
        store
            .count_jobs(&filter(Some("b"), None, Some("odd")))
            .await
            .expect("count"),
        b_odd.len() as u64
    );
    assert_eq!(
        store
            .count_jobs(&filter(None, None, Some("never")))
            .await
            .expect("count"),
        0
    );
    assert!(
        newest(filter(None, None, Some("never")), None, 10)
            .await
            .is_empty()
    );

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.count_jobs(&dead).await.expect("count"), 2);
    assert_eq!(
        store.count_jobs(&a_even_ready).await.expect("count"),
        expected(&|n| n % 3 == 0 && n % 2 == 0 && n != 0).len() as u64
    );
    close(store).await;
}

/// A search looks at no more than its budget, says where it stopped, and goes on from there;
/// it finds text in payloads and in errors, whatever the case.
pub(crate) async fn searches_are_bounded_and_go_on(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let mut jobs = Vec::new();
    for n in 0..20 {
        let payload = if n % 5 == 0 {
            json!({"customer": format!("ACME-{n}")})
        } else {
            json!({"customer": format!("other-{n}")})
        };
        jobs.push(job(if n < 10 { "q" } else { "r" }).payload(payload));
    }
    let ids = enqueue(&store, jobs, T0).await;
    // A failure whose message holds the text: found by its error.
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[0]]);
    store
        .fail_job(
            ack(&taken[0]),
            T0,
            &retry(T0, SECOND, "Gateway said \"acme down\""),
        )
        .await
        .expect("failed");
    let text = TextQuery::new("acme");
    let newest = |after: Option<JobId>| Page {
        after,
        limit: 100,
        order: Order::Descending,
    };
    let found = |s: &Searched| s.jobs.iter().map(|j| j.id).collect::<Vec<_>>();

    // Everything at once.
    let all = store
        .search_jobs(&JobFilter::default(), &text, newest(None), 1_000)
        .await
        .expect("searched");
    assert_eq!(found(&all), [ids[15], ids[10], ids[5], ids[0]]);
    assert!(all.exhausted);
    assert_eq!(all.looked_at, 20);

    // A budget of 7: looks at ids 19..=13, finds 15, and says where it stopped.
    let part = store
        .search_jobs(&JobFilter::default(), &text, newest(None), 7)
        .await
        .expect("searched");
    assert_eq!(found(&part), [ids[15]]);
    assert_eq!(
        (part.looked_at, part.looked_to, part.exhausted),
        (7, Some(ids[13]), false)
    );
    let rest = store
        .search_jobs(&JobFilter::default(), &text, newest(part.looked_to), 7)
        .await
        .expect("searched");
    assert_eq!(found(&rest), [ids[10]]);
    assert_eq!(rest.looked_to, Some(ids[6]));
    let last = store
        .search_jobs(&JobFilter::default(), &text, newest(rest.looked_to), 7)
        .await
        .expect("searched");
    assert_eq!(found(&last), [ids[5], ids[0]]);
    assert!(last.exhausted);

    // A full page stops the search at its last match.
    let page = Page {
        after: None,
        limit: 2,
        order: Order::Descending,
    };
    let two = store
        .search_jobs(&JobFilter::default(), &text, page, 1_000)
        .await
        .expect("searched");
    assert_eq!(found(&two), [ids[15], ids[10]]);
    assert_eq!((two.looked_to, two.exhausted), (Some(ids[10]), false));

    // With a filter; and text only in an error (its message, quotes and all).
    let in_q = store
        .search_jobs(&JobFilter::queue("q"), &text, newest(None), 1_000)
        .await
        .expect("searched");
    assert_eq!(found(&in_q), [ids[5], ids[0]]);
    let quoted = store
        .search_jobs(
            &JobFilter::default(),
            &TextQuery::new("\"ACME DOWN\""),
            newest(None),
            1_000,
        )
        .await
        .expect("searched");
    assert_eq!(found(&quoted), [ids[0]]);
    let none = store
        .search_jobs(
            &JobFilter::default(),
            &TextQuery::new("customer\"x"),
            newest(None),
            1_000,
        )
        .await
        .expect("searched");
    assert!(none.jobs.is_empty() && none.exhausted);
    close(store).await;
}

/// The head of each queue (the job a take hands out next) and when it became ready.
pub(crate) async fn heads_of_queues_tell_how_long_they_waited(backend: &impl Backend) {
    let store = backend.open(T0).await;
    enqueue(&store, vec![job("q")], T0).await;
    let later = job("q").priority(5).at(T0 + 100);
    enqueue(&store, vec![later, job("r").at(T0 + SECOND)], T0 + 100).await;
    let queues = ["q".to_owned(), "r".to_owned(), "none".to_owned()];
    // The head is the high-priority job, ready since T0 + 100; r has nothing ready.
    assert_eq!(
        store.ready_since(&queues).await.expect("heads"),
        [Some(T0 + 100), None, None]
    );
    assert!(store.ready_since(&[]).await.expect("heads").is_empty());
    close(store).await;
}

pub(crate) async fn counts_per_queue_and_status(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert!(store.counts().await.expect("counts").is_empty());
    let ids = enqueue(
        &store,
        vec![
            job("b"),
            job("a").at(T0 + SECOND),
            job("a"),
            job("a"),
            job("a"),
            job("c"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["a"], 3, T0).await;
    store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("done");
    store
        .fail_job(ack(&taken[1]), T0, &dead(T0, "x"))
        .await
        .expect("dead");
    store
        .delete_jobs(
            &Selection {
                ids: Some(vec![ids[5]]),
                filter: JobFilter::default(),
            },
            T0,
        )
        .await
        .expect("deleted");
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
    // Sorted by queue; a queue with no jobs left is not listed.
    assert_eq!(
        store.counts().await.expect("counts"),
        [counts("a", [1, 0, 1, 1, 1]), counts("b", [0, 1, 0, 0, 0])]
    );

    // The scheduled job is due by now; the one in flight is ready unless leases are durable.
    let store = reopen(backend, store, T0 + SECOND).await;
    let a = if store.properties().durable_leases {
        counts("a", [0, 1, 1, 1, 1])
    } else {
        counts("a", [0, 2, 0, 1, 1])
    };
    assert_eq!(
        store.counts().await.expect("counts"),
        [a, counts("b", [0, 1, 0, 0, 0])]
    );
    close(store).await;
}

/// The conditions messages are listed by (finished since, live, not scheduled, claimed or
/// free, not one's own), newest first too; and counts agree with listings.
pub(crate) async fn list_filters_for_messages_and_counts_agree(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let completed = enqueue(&store, vec![job("q")], T0).await[0];
    let taken = take(&store, &["q"], 1, T0).await;
    store
        .complete_plain(&[ack(&taken[0])], true, T0 + SECOND)
        .await
        .expect("completed");
    let died = enqueue(&store, vec![job("q")], T0).await[0];
    kill(&store, "q", &[died], T0 + 2 * SECOND).await;
    let claimed = enqueue(&store, vec![job("q")], T0).await[0];
    take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(9)), T0).await;
    let leased = enqueue(&store, vec![job("q")], T0).await[0];
    take(&store, &["q"], 1, T0).await;
    let rest = enqueue(
        &store,
        vec![
            job("q").origin("c1"),
            job("q").origin("c2").expires(T0 + 5 * SECOND),
            job("q").at(T0 + 10 * SECOND),
            job("r"),
        ],
        T0,
    )
    .await;
    let [own, expiring, scheduled, other] = [rest[0], rest[1], rest[2], rest[3]];
    let all = [
        completed, died, claimed, leased, own, expiring, scheduled, other,
    ];
    let now = T0 + 3 * SECOND;

    let check = async |filter: JobFilter, want: &[JobId]| {
        assert_eq!(
            list(&store, filter.clone(), None, 100).await,
            want,
            "{filter:?}"
        );
        assert_eq!(
            store.count_jobs(&filter).await,
            Ok(want.len() as u64),
            "{filter:?}"
        );
    };
    check(JobFilter::default(), &all).await;
    let since = |at: u64| JobFilter {
        finished_since_ms: Some(at),
        ..JobFilter::default()
    };
    check(since(T0 + SECOND), &[completed, died]).await;
    check(since(T0 + SECOND + 1), &[died]).await;
    let live = |at: u64| JobFilter {
        live_at_ms: Some(at),
        ..JobFilter::default()
    };
    check(
        live(now),
        &[claimed, leased, own, expiring, scheduled, other],
    )
    .await;
    check(
        live(T0 + 5 * SECOND),
        &[claimed, leased, own, scheduled, other],
    )
    .await;
    let not_scheduled = JobFilter {
        not_scheduled: true,
        ..JobFilter::default()
    };
    check(
        not_scheduled,
        &[completed, died, claimed, leased, own, expiring, other],
    )
    .await;
    let claimed_at = |held: bool, at: u64| JobFilter {
        claimed_at: Some((held, at)),
        ..JobFilter::default()
    };
    check(claimed_at(true, now), &[claimed]).await;
    check(
        claimed_at(false, now),
        &[completed, died, leased, own, expiring, scheduled, other],
    )
    .await;
    check(claimed_at(true, T0 + 30 * SECOND), &[]).await;
    let not_mine = JobFilter {
        not_origin: Some("c1".into()),
        ..JobFilter::default()
    };
    check(
        not_mine,
        &[completed, died, claimed, leased, expiring, scheduled, other],
    )
    .await;
    // Zaqar's free messages of a queue that are not one's own: every condition at once.
    let free = JobFilter {
        queue: Some("q".into()),
        live_at_ms: Some(now),
        not_scheduled: true,
        claimed_at: Some((false, now)),
        not_origin: Some("c1".into()),
        ..JobFilter::default()
    };
    check(free, &[leased, expiring]).await;

    // Newest first, paged backwards.
    let newest = |after: Option<JobId>, limit: usize| Page {
        after,
        limit,
        order: Order::Descending,
    };
    let page = store
        .list_jobs(&JobFilter::default(), newest(None, 3))
        .await
        .expect("list");
    assert_eq!(
        page.iter().map(|j| j.id).collect::<Vec<_>>(),
        [other, scheduled, expiring]
    );
    let page = store
        .list_jobs(&JobFilter::queue("q"), newest(Some(expiring), 2))
        .await
        .expect("list");
    assert_eq!(page.iter().map(|j| j.id).collect::<Vec<_>>(), [own, leased]);

    // One queue's counts, and a queue without jobs (zeros, under its name).
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
        Ok(counts("q", [1, 2, 2, 1, 1]))
    );
    assert_eq!(
        store.queue_counts("r").await,
        Ok(counts("r", [0, 1, 0, 0, 0]))
    );
    assert_eq!(
        store.queue_counts("nobody").await,
        Ok(counts("nobody", [0; 5]))
    );
    assert_eq!(
        store.counts().await,
        Ok(vec![
            counts("q", [1, 2, 2, 1, 1]),
            counts("r", [0, 1, 0, 0, 0])
        ])
    );
    let store = reopen(backend, store, now).await;
    assert_eq!(
        store.count_jobs(&JobFilter::default()).await,
        Ok(all.len() as u64)
    );
    close(store).await;
}
