//! `TokenStore`: API tokens.
//!
//! | operation                             | cases |
//! |---------------------------------------|-------|
//! | `put_token`, `delete_token`, `tokens` | `tokens_are_stored_by_id`; every reopen |

use tenax_core::auth::{Role, TokenRecord};

use super::support::*;

/// API tokens: stored with an assigned id, replaced by id, deleted once.
pub(crate) async fn tokens_are_stored_by_id(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.tokens().await, Ok(vec![]));
    let first = store
        .put_token(token("ci", Role::Worker))
        .await
        .expect("stored");
    let second = store
        .put_token(token("admin", Role::Admin))
        .await
        .expect("stored");
    assert!(first.id > 0 && first.id < second.id, "{first:?} {second:?}");
    assert_eq!(
        first,
        TokenRecord {
            id: first.id,
            ..token("ci", Role::Worker)
        }
    );
    assert_eq!(
        store.tokens().await,
        Ok(vec![first.clone(), second.clone()])
    );
    let used = TokenRecord {
        last_used_at_ms: Some(T0 + 5),
        ..first.clone()
    };
    assert_eq!(store.put_token(used.clone()).await, Ok(used.clone()));
    assert_eq!(store.tokens().await, Ok(vec![used.clone(), second.clone()]));
    assert_eq!(store.delete_token(second.id).await, Ok(true));
    assert_eq!(store.delete_token(second.id).await, Ok(false));
    assert_eq!(store.delete_token(987_654).await, Ok(false));
    assert_eq!(store.tokens().await, Ok(vec![used.clone()]));
    // A late write of the revoked token (its last use) does not bring it back.
    let late = TokenRecord {
        last_used_at_ms: Some(T0 + 9),
        ..second.clone()
    };
    store.put_token(late).await.expect("a late write");
    assert_eq!(store.tokens().await, Ok(vec![used.clone()]));

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.tokens().await, Ok(vec![used]));
    let third = store
        .put_token(token("later", Role::Reader))
        .await
        .expect("stored");
    assert!(third.id > second.id, "ids are never reused");
    close(store).await;
}
