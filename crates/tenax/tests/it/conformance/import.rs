//! `StoreImport`: records stored as they are, with their ids (`tenax copy`).
//!
//! | operation             | cases |
//! |-----------------------|-------|
//! | `import_jobs`         | `imported_records_keep_their_ids_and_state`; every reopen |
//! | `import_subscription` | `imported_records_keep_their_ids_and_state` |
//! | `import_token`        | `imported_records_keep_their_ids_and_state` |

use std::sync::Arc;

use serde_json::json;
use tenax_core::auth::Role;
use tenax_core::model::subscription::{DELIVERY_KIND, delivery_queue};
use tenax_core::model::{
    AttemptResult, ErrorEntry, Job, JobId, JobResult, JobState, Status, StoredPolicy,
    SubscriptionId, Trigger,
};
use tenax_core::store::{ImportedJob, Store, StoreError};

use super::support::*;

/// A job as a source store would hand it over.
fn record(id: u64, queue: &str, status: Status) -> Job {
    let mut spec = job(queue).payload(json!({"n": id})).job;
    spec.unique_key = Some(format!("key-{id}"));
    let mut state = JobState::new(T0, T0);
    state.status = status;
    if status.is_finished() {
        state.finished_at_ms = Some(T0 + 7 * SECOND);
    }
    Job {
        id: JobId(id),
        spec,
        state,
        errors: Vec::new(),
        held: None,
    }
}

/// Jobs in every state (errors, a policy, a finish, a delivery's attempts), a subscription
/// and a token keep their ids and read back as they were imported, after a reopen too; ids
/// assigned later are past them; a taken id, or one not past the store's, is refused.
pub(crate) async fn imported_records_keep_their_ids_and_state(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let mut hook = subscription("orders", "https://example.com/hook");
    hook.id = SubscriptionId(40);
    store
        .import_subscription(hook.clone())
        .await
        .expect("imported");
    let refused = store.import_subscription(hook.clone()).await;
    assert!(
        matches!(refused, Err(StoreError::Refused(_))),
        "{refused:?}"
    );
    let mut record_token = token("ci", Role::Worker);
    record_token.id = 12;
    store
        .import_token(record_token.clone())
        .await
        .expect("imported");
    assert!(matches!(
        store.import_token(record_token.clone()).await,
        Err(StoreError::Refused(_))
    ));

    let mut scheduled = record(5, "work", Status::Scheduled);
    scheduled.state.run_at_ms = T0 + 3_600 * SECOND;
    scheduled.state.failures = 2;
    scheduled.state.first_failure_at_ms = Some(T0 - SECOND);
    scheduled.state.last_delay_ms = Some(4 * SECOND);
    scheduled.spec.policy = Some(StoredPolicy::new(fixed(4 * SECOND)));
    scheduled.errors = vec![
        ErrorEntry {
            attempt: 1,
            at_ms: T0 - SECOND,
            message: "timeout".into(),
            detail: None,
        },
        ErrorEntry {
            attempt: 2,
            at_ms: T0,
            message: "refused".into(),
            detail: Some(json!({"code": 7})),
        },
    ];
    let ready = record(9, "work", Status::Ready);
    let mut dead = record(10, "work", Status::Dead);
    dead.state.dead_reason = Some("no retries left".into());
    dead.state.trigger = Trigger::Replay;
    let mut completed = record(11, "done", Status::Completed);
    completed.state.result = Some(JobResult(
        serde_json::value::RawValue::from_string(r#"{"sum": 3.0}"#.into()).expect("JSON"),
    ));
    let mut delivered = record(14, &delivery_queue(hook.id), Status::Completed);
    delivered.spec.kind = DELIVERY_KIND.into();
    delivered.spec.unique_key = None;
    delivered.spec.parent = Some(JobId(11));
    let attempts = vec![
        attempt(1, T0, AttemptResult::Retryable, 500),
        attempt(2, T0 + SECOND, AttemptResult::Delivered, 200),
    ];
    let mut in_flight = record(15, "work", Status::InFlight);
    in_flight.spec.unique_key = None;
    let batch = vec![
        ImportedJob::at_rest(scheduled.clone(), vec![]),
        ImportedJob::at_rest(ready.clone(), vec![]),
        ImportedJob::at_rest(dead.clone(), vec![]),
        ImportedJob::at_rest(completed.clone(), vec![]),
        ImportedJob::at_rest(delivered.clone(), attempts.clone()),
        ImportedJob::at_rest(in_flight.clone(), vec![]),
    ];
    store.import_jobs(batch).await.expect("imported");
    // An id not past every id the store holds.
    let late = store
        .import_jobs(vec![ImportedJob::at_rest(
            record(7, "work", Status::Ready),
            vec![],
        )])
        .await;
    assert!(matches!(late, Err(StoreError::Refused(_))), "{late:?}");
    assert!(matches!(store.get_job(JobId(7)).await, Ok(None)));

    let mut in_flight_at_rest = in_flight.clone();
    in_flight_at_rest.state.status = Status::Ready;
    let expected = [
        scheduled,
        ready,
        dead,
        completed,
        delivered,
        in_flight_at_rest,
    ];
    let check = |store: Arc<dyn Store>| {
        let expected = expected.clone();
        let (hook, record_token, attempts) = (hook.clone(), record_token.clone(), attempts.clone());
        async move {
            for job in &expected {
                assert_eq!(
                    json!(get(&store, job.id).await),
                    json!(job),
                    "job {}",
                    job.id
                );
            }
            assert_eq!(store.attempts(JobId(14)).await, Ok(attempts));
            assert_eq!(store.subscription(hook.id).await, Ok(Some(hook)));
            assert_eq!(store.tokens().await, Ok(vec![record_token]));
            store
        }
    };
    let store = check(store).await;
    let store = check(reopen(backend, store, T0).await).await;

    // Ids assigned later are past every imported one.
    let ids = enqueue(&store, vec![job("work")], T0).await;
    assert!(ids[0] > JobId(15), "{ids:?}");
    let (next, stored) = store
        .insert_subscription(subscription("orders", "https://example.com/other"))
        .await
        .expect("stored");
    assert!(stored && next.id > SubscriptionId(40), "{next:?}");
    let next = store
        .put_token(token("later", Role::Reader))
        .await
        .expect("stored");
    assert!(next.id > 12, "{next:?}");
    close(store).await;
}
