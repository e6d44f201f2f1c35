//! `EndpointStore`: endpoints' delivery state (pause, circuit breaker).
//!
//! | operation                                  | cases |
//! |--------------------------------------------|-------|
//! | `endpoints`, `endpoint`, `update_endpoint` | `endpoint_states_change_atomically_and_are_kept` |

use tenax_core::model::{BreakerState, EndpointState, Pause, SubscriptionId};

use super::support::*;

/// Endpoint states are made by their first change, changed through a closure that sees the
/// stored state (concurrent changes all hold, the first ones included), listed by origin,
/// announced, and kept across a restart.
pub(crate) async fn endpoint_states_change_atomically_and_are_kept(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (a, b) = ("https://a.example", "http://b.example:8080");
    assert_eq!(store.endpoints().await, Ok(vec![]));
    assert_eq!(store.endpoint(a).await, Ok(None));
    assert_eq!(
        store.update_endpoint(a, &|_| None).await,
        Ok(None),
        "no change"
    );
    // Many servers' first changes at once: each sees what the one before stored.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .update_endpoint(a, &|current| {
                        let mut state = current.cloned().unwrap_or_else(|| EndpointState {
                            origin: String::new(),
                            pause: None,
                            breaker: Default::default(),
                            updated_at_ms: T0,
                        });
                        state.breaker.trips += 1;
                        Some(state)
                    })
                    .await
            })
        })
        .collect();
    for racer in racers {
        racer.await.expect("a racer").expect("stored");
    }
    let stored = store.endpoint(a).await.expect("read").expect("made");
    assert_eq!(stored.breaker.trips, 8, "every change counted once");
    assert_eq!(stored.origin, a, "the store keeps it under its origin");
    let paused = EndpointState {
        origin: b.to_owned(),
        pause: Some(Pause {
            until_ms: T0 + 30 * SECOND,
            status: 429,
            subscription: SubscriptionId(3),
            at_ms: T0,
        }),
        breaker: tenax_core::model::Breaker {
            state: BreakerState::Open,
            until_ms: Some(T0 + 60 * SECOND),
            opened_at_ms: Some(T0),
            trips: 2,
            probe: None,
            reason: Some("the endpoint answered HTTP 502".into()),
            epoch: 4,
        },
        updated_at_ms: T0,
    };
    let changed = fires(
        &store.signals().endpoints,
        "an endpoint's change",
        store.update_endpoint(b, &|_| Some(paused.clone())),
    )
    .await;
    assert_eq!(changed, Ok(Some(paused.clone())));
    assert_eq!(
        store
            .update_endpoint(b, &|current| {
                assert_eq!(current, Some(&paused), "the change sees the stored state");
                None
            })
            .await,
        Ok(Some(paused.clone())),
        "left as it is"
    );
    let listed = store.endpoints().await.expect("listed");
    assert_eq!(
        listed.iter().map(|s| s.origin.as_str()).collect::<Vec<_>>(),
        [b, a],
        "by origin, byte by byte"
    );

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.endpoint(b).await, Ok(Some(paused)));
    assert_eq!(store.endpoints().await, Ok(listed));
    close(store).await;
}
