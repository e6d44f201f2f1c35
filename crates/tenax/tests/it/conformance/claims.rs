//! `ClaimStore`: claims, which hold a stream's leases together.
//!
//! | operation       | cases |
//! |-----------------|-------|
//! | `claim`         | `claims_are_renewed_ended_and_forgotten`, `a_closed_stream_releases_its_jobs` |
//! | `extend_claim`  | `claims_are_renewed_ended_and_forgotten` |
//! | `end_claim`     | `claims_are_renewed_ended_and_forgotten` |
//! | `release_claim` | `a_closed_stream_releases_its_jobs` |

use std::sync::Mutex;

use tenax_core::model::{ClaimId, JobId, Status};
use tenax_core::store::{Claim, ClaimRecord, ClaimedJob, DecideContext, StoreError, TakeRequest};

use super::support::*;

pub(crate) async fn a_closed_stream_releases_its_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let seven = take_on(&store, &["q"], 2, 30 * SECOND, Some(ClaimId(7)), T0).await;
    let eight = take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(8)), T0).await;
    let plain = take_on(&store, &["q"], 1, 30 * SECOND, None, T0).await;
    let nine = take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(9)), T0).await;
    assert_eq!(
        (
            store.claim(ClaimId(7)).await.expect("claim").jobs.len(),
            store.claim(ClaimId(8)).await.expect("claim").jobs.len()
        ),
        (2, 1)
    );
    // An acknowledged job no longer counts against its stream.
    store
        .complete_plain(&[ack(&nine[0])], true, T0)
        .await
        .expect("completed");
    assert_eq!(store.claim(ClaimId(9)).await.expect("claim").jobs.len(), 0);

    assert_eq!(store.release_claim(ClaimId(7)).await.expect("release"), 2);
    assert_eq!(store.claim(ClaimId(7)).await.expect("claim").jobs.len(), 0);
    for job in &seven {
        let shown = get(&store, job.id).await;
        assert_eq!(
            (shown.state.status, shown.state.failures, shown.errors.len()),
            (Status::Ready, 0, 0),
            "released without an attempt"
        );
    }
    assert_eq!(status(&store, eight[0].id).await, Some(Status::InFlight));
    assert_eq!(status(&store, plain[0].id).await, Some(Status::InFlight));
    assert_eq!(
        store.release_claim(ClaimId(12_345)).await.expect("release"),
        0
    );
    assert_eq!(
        taken_ids(&take(&store, &["q"], 5, T0).await),
        taken_ids(&seven)
    );
    assert_eq!(ids.len(), 5);

    let store = reopen(backend, store, T0).await;
    let held = usize::from(store.properties().durable_leases);
    assert_eq!(
        store.claim(ClaimId(8)).await.expect("claim").jobs.len(),
        held
    );
    assert_eq!(status(&store, nine[0].id).await, Some(Status::Completed));
    close(store).await;
}

/// A claim: leases taken together under one id, with a record of their terms. Renewed, its
/// leases move and its jobs live at least as long as asked; ended, each job goes by the
/// decision; over, its record is forgotten by the upkeep that expires leases.
pub(crate) async fn claims_are_renewed_ended_and_forgotten(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").expires(T0 + 12 * SECOND),
            job("q"),
            job("q"),
            job("q"),
        ],
        T0,
    )
    .await;
    let queues = vec!["q".to_owned()];
    let record = ClaimRecord {
        queue: "q".into(),
        lease_ms: 10 * SECOND,
        grace_ms: 5 * SECOND,
        renewed_at_ms: T0,
    };
    let claim = ClaimId(41);
    let request = TakeRequest {
        claim: Some(claim),
        record: Some(record.clone()),
        keep_until_ms: Some(T0 + 15 * SECOND),
        ..TakeRequest::new(&queues, 2, 10 * SECOND)
    };
    let taken = store.take_jobs(&request, T0).await.expect("taken").jobs;
    assert_eq!(taken_ids(&taken), ids[..2]);
    // A job with an expiry lives at least as long as the claim keeps it; one without has none.
    assert_eq!(
        taken.iter().map(|j| j.expires_at_ms).collect::<Vec<_>>(),
        [Some(T0 + 15 * SECOND), None]
    );
    let held = |id: JobId, until: u64, failures: u32| ClaimedJob {
        id,
        lease_expires_at_ms: until,
        failures,
    };
    assert_eq!(
        store.claim(claim).await,
        Ok(Claim {
            record: Some(record.clone()),
            jobs: vec![
                held(ids[0], T0 + 10 * SECOND, 0),
                held(ids[1], T0 + 10 * SECOND, 0)
            ],
        })
    );
    // A claim that takes nothing records nothing.
    let nobody = vec!["nobody".to_owned()];
    let empty = TakeRequest {
        claim: Some(ClaimId(42)),
        record: Some(record.clone()),
        ..TakeRequest::new(&nobody, 5, 10 * SECOND)
    };
    assert!(
        store
            .take_jobs(&empty, T0)
            .await
            .expect("take")
            .jobs
            .is_empty()
    );
    assert_eq!(store.claim(ClaimId(42)).await, Ok(Claim::default()));

    // Renewed: every lease moves, the jobs live at least until asked, the record is replaced.
    let renewed = ClaimRecord {
        lease_ms: 20 * SECOND,
        grace_ms: 10 * SECOND,
        renewed_at_ms: T0 + 5 * SECOND,
        ..record.clone()
    };
    let extended = store
        .extend_claim(
            claim,
            20 * SECOND,
            Some(T0 + 40 * SECOND),
            Some(renewed.clone()),
            T0 + 5 * SECOND,
        )
        .await;
    assert_eq!(extended, Ok(2));
    assert_eq!(
        store.claim(claim).await,
        Ok(Claim {
            record: Some(renewed.clone()),
            jobs: vec![
                held(ids[0], T0 + 25 * SECOND, 0),
                held(ids[1], T0 + 25 * SECOND, 0)
            ],
        })
    );
    let peeks = store.peek_jobs(&ids[..2]).await.expect("peeks");
    assert_eq!(
        peeks
            .iter()
            .map(|p| p.as_ref().map(|p| (p.expires_at_ms, p.claim)))
            .collect::<Vec<_>>(),
        [
            Some((Some(T0 + 40 * SECOND), Some(claim))),
            Some((None, Some(claim)))
        ]
    );
    // The old end of the leases has no effect any more.
    let at = T0 + 10 * SECOND;
    assert_eq!(
        store.expire_leases(at, 100, &again(at, "lost")).await,
        Ok(0)
    );
    assert_eq!(
        store
            .extend_claim(ClaimId(43), 20 * SECOND, None, None, T0)
            .await,
        Ok(0),
        "a claim that holds nothing renews nothing"
    );

    // A job completed under the claim leaves it.
    let done = store
        .complete_plain(&[ack(&taken[1])], true, T0 + 6 * SECOND)
        .await
        .expect("commit");
    assert_eq!(done, [Ok(())]);
    assert_eq!(
        store.claim(claim).await.expect("claim").jobs,
        [held(ids[0], T0 + 25 * SECOND, 0)]
    );

    // Ended: each job it holds goes by the decision, as if its lease had expired now; the record
    // goes.
    let now = T0 + 7 * SECOND;
    let seen = Mutex::new(Vec::new());
    let ended = store
        .end_claim(claim, now, &|ctx: &DecideContext<'_>| {
            seen.lock().expect("not poisoned").push(ctx.id);
            again(now, "claim deleted")(ctx)
        })
        .await;
    assert_eq!(ended, Ok(1));
    assert_eq!(*seen.lock().expect("not poisoned"), [ids[0]]);
    let shown = get(&store, ids[0]).await;
    assert_eq!(
        (shown.state.status, shown.state.failures, shown.errors.len()),
        (Status::Ready, 1, 1)
    );
    assert_eq!(shown.errors[0].message, "claim deleted");
    assert_eq!(store.claim(claim).await, Ok(Claim::default()));
    let stale = store
        .complete_plain(&[ack(&taken[0])], true, now)
        .await
        .expect("commit");
    assert_eq!(
        stale,
        [Err(StoreError::NotInFlight {
            id: ids[0],
            status: Status::Ready
        })]
    );
    let calls = Mutex::new(0);
    let ended = store
        .end_claim(ClaimId(44), now, &|ctx: &DecideContext<'_>| {
            *calls.lock().expect("not poisoned") += 1;
            dead(now, "never")(ctx)
        })
        .await;
    assert_eq!(ended, Ok(0));
    assert_eq!(*calls.lock().expect("not poisoned"), 0);

    // A claim's record stays while its lease and grace last, even once it holds no job, and is
    // forgotten after, by the upkeep that expires leases.
    let brief = ClaimRecord {
        lease_ms: SECOND,
        grace_ms: SECOND,
        renewed_at_ms: now,
        ..record.clone()
    };
    let short = TakeRequest {
        claim: Some(ClaimId(45)),
        record: Some(brief.clone()),
        ..TakeRequest::new(&queues, 1, SECOND)
    };
    let briefly = store.take_jobs(&short, now).await.expect("taken").jobs;
    assert_eq!(taken_ids(&briefly), [ids[0]]);
    store
        .complete_plain(&[ack(&briefly[0])], true, now)
        .await
        .expect("commit");
    let over = now + 2 * SECOND;
    assert_eq!(
        store
            .expire_leases(over - 1, 100, &again(over - 1, "lost"))
            .await,
        Ok(0)
    );
    assert_eq!(
        store.claim(ClaimId(45)).await,
        Ok(Claim {
            record: Some(brief),
            jobs: vec![]
        })
    );
    let later = over + SECOND;
    assert_eq!(
        store.expire_leases(later, 100, &again(later, "lost")).await,
        Ok(0)
    );
    assert_eq!(store.claim(ClaimId(45)).await, Ok(Claim::default()));

    // A claim in flight across a restart: kept only by a backend whose leases are durable.
    let lasting = ClaimRecord {
        lease_ms: 60 * SECOND,
        grace_ms: 0,
        renewed_at_ms: later,
        ..record.clone()
    };
    let request = TakeRequest {
        claim: Some(ClaimId(46)),
        record: Some(lasting.clone()),
        ..TakeRequest::new(&queues, 1, 60 * SECOND)
    };
    let kept = store.take_jobs(&request, later).await.expect("taken").jobs;
    assert_eq!(taken_ids(&kept), [ids[2]]);
    // The time a claim kept a job alive to is part of the claim, so it lasts as claims do.
    // (Closed and opened by hand: `reopen` cannot know a job's expiry before its claim.)
    let durable = store.properties().durable_leases;
    close(store).await;
    let store = backend.open(later).await;
    let (want, expiry) = if durable {
        let claim = Claim {
            record: Some(lasting),
            jobs: vec![held(ids[2], later + 60 * SECOND, 0)],
        };
        (claim, T0 + 40 * SECOND)
    } else {
        (Claim::default(), T0 + 12 * SECOND)
    };
    assert_eq!(store.claim(ClaimId(46)).await, Ok(want));
    let shown = get(&store, ids[0]).await;
    assert_eq!(
        (shown.state.status, shown.spec.expires_at_ms),
        (Status::Completed, Some(expiry))
    );
    close(store).await;
}
