//! `JobUpkeep`: what the maintenance loop does to jobs as time passes.
//!
//! | operation          | cases |
//! |--------------------|-------|
//! | `promote_due`      | `due_jobs_are_promoted` |
//! | `expire_leases`    | `expired_leases_go_to_the_decision`, `claims_are_renewed_ended_and_forgotten` (`claims.rs`) |
//! | `expire_leases_of` | `a_queues_expiry_waits_for_a_lease_being_ended` |
//! | `expire_jobs`      | `expired_jobs_are_deleted_whatever_their_status` |
//! | `purge_finished`   | `finished_jobs_are_purged_after_retention` |
//! | `next_wakeup`      | `due_jobs_are_promoted`, `expired_leases_go_to_the_decision`, `expired_jobs_are_deleted_whatever_their_status`, `schedules_are_stored_changed_and_deleted` (`schedules.rs`) |

use std::sync::Arc;
use std::time::Duration;

use tenax_core::model::{Ack, JobFilter, Status};
use tenax_core::store::{DecideContext, StoreError};
use tokio::sync::Notify;

use super::support::*;

pub(crate) async fn expired_leases_go_to_the_decision(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 3], T0).await;
    let short = take_on(&store, &["q"], 1, 10 * SECOND, None, T0).await;
    let long = take_on(&store, &["q"], 2, 20 * SECOND, None, T0).await;
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + 10 * SECOND)
    );

    let expiry = T0 + 10 * SECOND;
    assert_eq!(
        store
            .expire_leases(expiry - 1, 100, &again(expiry - 1, "lost"))
            .await,
        Ok(0)
    );
    assert_eq!(
        store
            .expire_leases(expiry, 100, &again(expiry, "lost"))
            .await,
        Ok(1)
    );
    let shown = get(&store, short[0].id).await;
    assert_eq!(
        (shown.state.status, shown.state.failures),
        (Status::Ready, 1)
    );
    assert_eq!(shown.errors.len(), 1);
    // Its old lease is gone.
    let results = store
        .complete_plain(&[ack(&short[0])], true, expiry)
        .await
        .expect("commit");
    assert!(matches!(results[0], Err(StoreError::NotInFlight { .. })));

    // A heartbeat moves a lease, never past the longest an attempt may be held (from the
    // take); a stale token cannot.
    const DAY: u64 = 86_400 * SECOND;
    let beat = store
        .extend_lease(ack(&long[0]), 30 * SECOND, DAY, T0 + 15 * SECOND)
        .await;
    assert_eq!(beat.map(|e| e.expires_at_ms), Ok(T0 + 45 * SECOND));
    let capped = store
        .extend_lease(ack(&long[0]), 30 * SECOND, 40 * SECOND, T0 + 16 * SECOND)
        .await;
    assert_eq!(capped.map(|e| e.expires_at_ms), Ok(T0 + 40 * SECOND));
    let stale = Ack {
        id: long[1].id,
        lease: long[0].lease_token,
    };
    assert_eq!(
        store
            .extend_lease(stale, 30 * SECOND, DAY, T0)
            .await
            .map(|e| e.expires_at_ms),
        Err(StoreError::LeaseLost { id: long[1].id })
    );
    let at = T0 + 20 * SECOND;
    assert_eq!(
        store.expire_leases(at, 100, &dead(at, "lease lost")).await,
        Ok(1)
    );
    assert_eq!(status(&store, long[1].id).await, Some(Status::Dead));
    assert_eq!(status(&store, long[0].id).await, Some(Status::InFlight));
    // At most `max` per call.
    let at = T0 + 45 * SECOND;
    assert_eq!(store.expire_leases(at, 0, &again(at, "lost")).await, Ok(0));
    assert_eq!(store.expire_leases(at, 1, &again(at, "lost")).await, Ok(1));
    assert_eq!(store.next_wakeup().await.expect("next wakeup"), None);
    assert_eq!(ids.len(), 3);

    let store = reopen(backend, store, at).await;
    let shown = get(&store, long[1].id).await;
    assert_eq!(
        (shown.state.status, shown.errors.len()),
        (Status::Dead, 1),
        "the dead job and its error survived"
    );
    close(store).await;
}

/// A queue's own expiry (a Zaqar claim's or pop's, which must see a message free as soon as
/// its claim's time is up) ends only that queue's leases; and a lease another task is ending
/// at that moment is waited for, not skipped and not ended twice, so the take right after
/// finds the job ready.
pub(crate) async fn a_queues_expiry_waits_for_a_lease_being_ended(backend: &impl Backend) {
    let store = backend.open(T0).await;
    enqueue(&store, vec![job("q"), job("r")], T0).await;
    let q = take_on(&store, &["q"], 1, 10 * SECOND, None, T0).await;
    let r = take_on(&store, &["r"], 1, 10 * SECOND, None, T0).await;
    let at = T0 + 10 * SECOND;
    let lost = again(at, "lost");
    assert_eq!(store.expire_leases_of("q", at - 1, &lost).await, Ok(0));
    assert_eq!(store.expire_leases_of("none", at, &lost).await, Ok(0));
    assert_eq!(store.expire_leases_of("q", at, &lost).await, Ok(1));
    assert_eq!(status(&store, q[0].id).await, Some(Status::Ready));
    assert_eq!(status(&store, r[0].id).await, Some(Status::InFlight));

    // The maintenance loop ends r's lease, slowly: its decision takes 300 ms, during which it
    // holds the job (a row lock; the index lock).
    // (A notification, not a poll of a flag with a timer: the timer's driver may be the
    // runtime thread the decision blocks.)
    let deciding = Arc::new(Notify::new());
    let slow = tokio::spawn({
        let (store, deciding) = (store.clone(), deciding.clone());
        async move {
            let lost = again(at, "lost");
            let slow = move |ctx: &DecideContext<'_>| {
                deciding.notify_one();
                std::thread::sleep(Duration::from_millis(300));
                lost(ctx)
            };
            store.expire_leases(at, 100, &slow).await
        }
    });
    deciding.notified().await;
    assert_eq!(
        store.expire_leases_of("r", at, &lost).await,
        Ok(0),
        "the lease being ended is ended once, by the one ending it"
    );
    let shown = get(&store, r[0].id).await;
    assert_eq!(
        (shown.state.status, shown.state.failures),
        (Status::Ready, 1),
        "once the queue's expiry returns, the job is ready, the attempt counted once"
    );
    assert_eq!(slow.await.expect("the slow expiry"), Ok(1));
    let again_taken = take_on(&store, &["r"], 1, 10 * SECOND, None, at).await;
    assert_eq!(again_taken[0].id, r[0].id);
    close(store).await;
}

pub(crate) async fn due_jobs_are_promoted(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").at(T0 + SECOND),
            job("q").at(T0 + 2 * SECOND),
            job("q").at(T0 + 2 * SECOND),
            job("q").at(T0 + 3 * SECOND),
        ],
        T0,
    )
    .await;
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + SECOND)
    );
    assert_eq!(
        store
            .promote_due(T0 + SECOND - 1, 100)
            .await
            .expect("promote"),
        0
    );
    assert!(take(&store, &["q"], 10, T0 + SECOND - 1).await.is_empty());
    assert_eq!(
        store.promote_due(T0 + SECOND, 100).await.expect("promote"),
        1
    );
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + 2 * SECOND)
    );
    assert_eq!(status(&store, ids[0]).await, Some(Status::Ready));
    // At most `max` at a time.
    assert_eq!(
        store
            .promote_due(T0 + 2 * SECOND, 1)
            .await
            .expect("promote"),
        1
    );
    assert_eq!(
        store
            .promote_due(T0 + 2 * SECOND, 1)
            .await
            .expect("promote"),
        1
    );
    assert_eq!(
        store
            .promote_due(T0 + 2 * SECOND, 1)
            .await
            .expect("promote"),
        0
    );
    let counts = store.counts().await.expect("counts");
    assert_eq!((counts[0].ready, counts[0].scheduled), (3, 1));

    // Reopened before the last one is due: it waits; after, it is ready.
    let store = reopen(backend, store, T0 + 2 * SECOND).await;
    assert_eq!(status(&store, ids[3]).await, Some(Status::Scheduled));
    close(store).await;
    let store = backend.open(T0 + 3 * SECOND).await;
    assert_eq!(status(&store, ids[3]).await, Some(Status::Ready));
    assert_eq!(
        taken_ids(&take(&store, &["q"], 10, T0 + 3 * SECOND).await),
        ids
    );
    close(store).await;
}

pub(crate) async fn finished_jobs_are_purged_after_retention(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let taken = take(&store, &["q"], 5, T0).await;
    store
        .complete_plain(&[ack(&taken[0])], true, T0 + 1_000)
        .await
        .expect("done");
    store
        .complete_plain(&[ack(&taken[1])], true, T0 + 5_000)
        .await
        .expect("done");
    store
        .fail_job(ack(&taken[2]), T0 + 1_000, &dead(T0 + 1_000, "x"))
        .await
        .expect("dead");
    store
        .fail_job(ack(&taken[3]), T0 + 5_000, &dead(T0 + 5_000, "x"))
        .await
        .expect("dead");

    // Completed and dead jobs have their own cut-offs; unfinished jobs are never purged.
    assert_eq!(store.purge_finished(T0 + 999, T0 + 999, 100).await, Ok(0));
    assert_eq!(store.purge_finished(T0 + 2_000, T0, 100).await, Ok(1));
    assert_eq!(status(&store, ids[0]).await, None);
    assert_eq!(status(&store, ids[2]).await, Some(Status::Dead));
    assert_eq!(
        store.purge_finished(T0 + 2_000, T0 + 2_000, 100).await,
        Ok(1)
    );
    assert_eq!(status(&store, ids[2]).await, None);
    // At most `max` at a time.
    assert_eq!(store.purge_finished(u64::MAX, u64::MAX, 1).await, Ok(1));
    let store = reopen(backend, store, T0).await;
    assert_eq!(store.purge_finished(u64::MAX, u64::MAX, 1).await, Ok(1));
    assert_eq!(store.purge_finished(u64::MAX, u64::MAX, 100).await, Ok(0));
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[4]]
    );
    assert_eq!(
        status(&store, ids[4]).await,
        Some(after_restart(store.properties(), Status::InFlight))
    );
    let store = reopen(backend, store, T0).await;
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[4]]
    );
    close(store).await;
}

/// Jobs past their expiry are deleted whatever their status, at most `max` at a time, and the
/// next expiry is when upkeep next has work.
pub(crate) async fn expired_jobs_are_deleted_whatever_their_status(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.next_wakeup().await, Ok(None), "nothing to do");
    let at = T0 + 5 * SECOND;
    let completed = enqueue(&store, vec![job("q").expires(at)], T0).await[0];
    let taken = take(&store, &["q"], 1, T0).await;
    store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("completed");
    let died = enqueue(&store, vec![job("q").expires(at)], T0).await[0];
    kill(&store, "q", &[died], T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").expires(at).key("k"),
            job("q").expires(at).at(T0 + 60 * SECOND),
            job("q").expires(at).priority(1),
            job("q"),
            job("q").expires(at + SECOND),
        ],
        T0,
    )
    .await;
    let flying = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&flying), [ids[2]]);
    // The earliest of a scheduled job (T0 + 60 s), a lease (T0 + 30 s) and an expiry (T0 + 5 s).
    assert_eq!(store.next_wakeup().await, Ok(Some(at)));

    assert_eq!(store.expire_jobs(at - 1, 100).await, Ok(0));
    assert_eq!(store.expire_jobs(at, 2).await, Ok(2), "at most `max`");
    assert_eq!(store.expire_jobs(at, 100).await, Ok(3));
    assert_eq!(store.expire_jobs(at, 100).await, Ok(0));
    for id in [completed, died, ids[0], ids[1], ids[2]] {
        assert!(
            store.get_job(id).await.expect("readable").is_none(),
            "job {id}"
        );
    }
    let results = store
        .complete_plain(&[ack(&flying[0])], true, at)
        .await
        .expect("commit");
    assert_eq!(results, [Err(StoreError::NotFound(ids[2]))]);
    // Its key is free; the lease went with the job.
    let keyed = enqueue(&store, vec![job("q").key("k")], at).await[0];
    assert_eq!(store.next_wakeup().await, Ok(Some(at + SECOND)));

    let store = reopen(backend, store, at).await;
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[3], ids[4], keyed]
    );
    assert_eq!(store.next_wakeup().await, Ok(Some(at + SECOND)));
    assert_eq!(store.expire_jobs(at + SECOND, 100).await, Ok(1));
    assert_eq!(store.next_wakeup().await, Ok(None));
    close(store).await;
}
