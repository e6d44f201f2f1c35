//! Secrets at rest: subscriptions' secrets, header values and options are sealed on their way
//! to storage, with the keys a store is opened with.
//!
//! | what                                   | cases |
//! |----------------------------------------|-------|
//! | sealing                                | `secrets_are_sealed_at_rest` |
//! | keys                                   | `a_wrong_secrets_key_is_refused_and_changes_nothing`, `postgres_servers_opening_together_with_different_keys_are_refused_but_one` |
//! | rotation                               | `a_key_rotation_loses_nothing_wherever_it_stops` |
//! | upgrade from secrets kept in clear     | `secrets_kept_in_clear_before_are_sealed_at_open` |
//! | encrypted queues: the sealed mark, the data key | `sealed_payloads_keep_their_mark_and_one_data_key_opens_them` |

use std::sync::Arc;

use serde_json::json;
use tenax_core::model::{Job, Subscription};
use tenax_core::secrets::Keyring;
use tenax_core::secrets::key::Key;
use tenax_core::store::{Insert, Store, StoreError};

use super::support::*;

/// A payload sealed with `store`'s data key, as the engine seals one, and its job.
fn sealed_job(store: &Arc<dyn Store>, queue: &str, text: &str) -> Insert {
    let sealed = store
        .payload_key()
        .seal(b"conformance", text.as_bytes())
        .expect("sealed");
    let mut insert = job(queue).payload(json!(sealed));
    insert.job.payload_sealed = true;
    insert
}

/// The text a sealed payload holds, opened with `store`'s data key.
fn opened(store: &Arc<dyn Store>, payload: &serde_json::value::RawValue) -> String {
    let text: String = serde_json::from_str(payload.get()).expect("a JSON string");
    let plain = store
        .payload_key()
        .open(b"conformance", &text)
        .expect("opens with the store's data key");
    String::from_utf8(plain).expect("UTF-8")
}

/// Whether a payload is sealed is kept with its job wherever the job goes (taken, dead,
/// completed, popped, after a restart), and plain jobs stay plain. The store keeps one data
/// key: the same after a restart, and after a rotation of the secrets key (which seals the data
/// key again and leaves the payloads as they are), opened by the new key alone once the
/// rotation is done.
pub(crate) async fn sealed_payloads_keep_their_mark_and_one_data_key_opens_them(
    backend: &impl Backend,
) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            sealed_job(&store, "q", "\"dead\""),
            sealed_job(&store, "q", "\"done\""),
            job("q").payload(json!("plain")),
            sealed_job(&store, "p", "\"popped\""),
        ],
        T0,
    )
    .await;
    let marks = |jobs: &[Job]| {
        jobs.iter()
            .map(|j| j.spec.payload_sealed)
            .collect::<Vec<_>>()
    };
    let taken = take(&store, &["q"], 3, T0).await;
    assert_eq!(
        taken.iter().map(|t| t.payload_sealed).collect::<Vec<_>>(),
        [true, true, false]
    );
    assert_eq!(opened(&store, &taken[0].payload), "\"dead\"");
    store
        .fail_job(ack(&taken[0]), T0, &dead(T0, "fatal"))
        .await
        .expect("dead");
    store
        .complete_plain(&[ack(&taken[1]), ack(&taken[2])], true, T0)
        .await
        .expect("completed");
    let mut jobs: Vec<Job> = Vec::new();
    for id in &ids[..3] {
        jobs.push(get(&store, *id).await);
    }
    assert_eq!(marks(&jobs), [true, true, false]);
    assert_eq!(jobs[2].spec.payload.get(), "\"plain\"");
    let popped = store
        .pop_jobs(&["p".to_owned()], 1, T0)
        .await
        .expect("popped");
    assert_eq!(marks(&popped), [true]);
    assert_eq!(opened(&store, &popped[0].spec.payload), "\"popped\"");
    close(store).await;

    // The same data key after a restart.
    let store = backend.open(T0).await;
    let dead_job = get(&store, ids[0]).await;
    assert!(dead_job.spec.payload_sealed);
    assert_eq!(opened(&store, &dead_job.spec.payload), "\"dead\"");
    close(store).await;

    // A rotation seals the data key again; the payloads open with the new key alone after it.
    let old = backend.keys();
    let both = Arc::new(old.sealing_with(Key::generate().expect("a key")));
    let store = backend
        .try_open_with(both.clone(), T0)
        .await
        .expect("opens");
    assert_eq!(
        opened(&store, &get(&store, ids[1]).await.spec.payload),
        "\"done\""
    );
    close(store).await;
    let new_alone = Arc::new(both.current_only());
    let store = backend
        .try_open_with(new_alone, T0)
        .await
        .expect("opens with the new key alone");
    assert_eq!(
        opened(&store, &get(&store, ids[0]).await.spec.payload),
        "\"dead\""
    );
    close(store).await;
}

/// What a subscription must never show at rest: its secrets, header values and options.
const AT_REST: [&str; 6] = [
    "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0",
    "whsec_b2xkc2VjcmV0b2xkc2VjcmV0b2xkc2VjcmV0",
    "Bearer hunter2",
    "billing",
    "zaqar-option-key",
    "second-header-value",
];

/// A subscription holding every kind of secret.
fn secret_subscription(endpoint: &str) -> Subscription {
    let mut s = subscription("q", endpoint);
    s.previous_secret = Some("whsec_b2xkc2VjcmV0b2xkc2VjcmV0b2xkc2VjcmV0".into());
    s.previous_secret_until_ms = Some(T0 + 60 * SECOND);
    s.headers
        .insert("Authorization".into(), "Bearer hunter2".into());
    s.options = Some(json!({"post_headers": {"X-Api-Key": "zaqar-option-key"}}));
    s
}

/// Which of [`AT_REST`] `dump` holds.
fn revealed(dump: &[u8]) -> Vec<&'static str> {
    AT_REST
        .into_iter()
        .filter(|secret| {
            dump.windows(secret.len())
                .any(|window| window == secret.as_bytes())
        })
        .collect()
}

/// The key a stored subscription names as the one that sealed it.
fn sealed_with(raw: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(raw).expect("stored JSON");
    value["sealed"]["key"].as_str().map(str::to_owned)
}

/// Secrets, previous secrets, header values and Zaqar options are sealed on their way to
/// storage: a copy of the files or a dump of the database holds none of them in clear, while
/// what the backend indexes (queue, endpoint) stays readable. They come back whole.
pub(crate) async fn secrets_are_sealed_at_rest(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (a, _) = store
        .insert_subscription(secret_subscription("https://a.example/"))
        .await
        .expect("stored");
    let changed = store
        .update_subscription(a.id, &|current| {
            let mut changed = current.clone();
            changed
                .headers
                .insert("X-Second".into(), "second-header-value".into());
            Some(changed)
        })
        .await
        .expect("changed");
    assert_eq!(changed.headers["X-Second"], "second-header-value");
    let (zaqar, _) = store
        .insert_subscription({
            let mut s = secret_subscription("https://z.example/");
            s.format = tenax_core::model::EnvelopeFormat::Zaqar;
            s
        })
        .await
        .expect("stored");
    close(store).await;
    let dump = backend.dump().await;
    assert_eq!(revealed(&dump), Vec::<&str>::new());
    let shows = |text: &str| dump.windows(text.len()).any(|w| w == text.as_bytes());
    assert!(shows("https://a.example/") && shows("https://z.example/"));
    let current = backend.keys().current().id().to_string();
    assert_eq!(
        sealed_with(&backend.raw_subscription(a.id).await),
        Some(current)
    );

    let store = backend.open(T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(changed)));
    let read = store
        .subscription(zaqar.id)
        .await
        .expect("read")
        .expect("there");
    assert_eq!(read.secret, zaqar.secret);
    assert_eq!(read.options, zaqar.options);
    // The one the unique endpoint is held by.
    let (holder, created) = store
        .insert_subscription({
            let mut s = subscription("q", "https://z.example/");
            s.format = tenax_core::model::EnvelopeFormat::Zaqar;
            s
        })
        .await
        .expect("answered");
    assert!(!created);
    assert_eq!(holder, read);
    close(store).await;
}

/// A store is opened only with the key it is sealed with, even while it holds no
/// subscription: another key is refused by name, before anything is read with it, and the
/// refusal changes nothing.
pub(crate) async fn a_wrong_secrets_key_is_refused_and_changes_nothing(backend: &impl Backend) {
    close(backend.open(T0).await).await;
    let right = backend.keys();
    let wrong = Arc::new(Keyring::generate("/etc/tenax/wrong.key").expect("a key"));
    let refused = |error: StoreError| {
        let StoreError::Secrets(message) = &error else {
            panic!("refused for its key: {error:?}");
        };
        assert!(
            message.contains(&right.current().id().to_string())
                && message.contains("/etc/tenax/wrong.key")
                && message.contains(&wrong.current().id().to_string()),
            "{message}"
        );
        assert!(error.is_internal());
    };
    refused(
        backend
            .try_open_with(wrong.clone(), T0)
            .await
            .expect_err("an empty store sealed with another key"),
    );

    let store = backend.open(T0).await;
    let (a, _) = store
        .insert_subscription(secret_subscription("https://a.example/"))
        .await
        .expect("stored");
    close(store).await;
    let raw = backend.raw_subscription(a.id).await;
    refused(
        backend
            .try_open_with(wrong.clone(), T0)
            .await
            .expect_err("a store sealed with another key"),
    );
    assert_eq!(backend.raw_subscription(a.id).await, raw, "left as it was");
    let store = backend.open(T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(a)));
    close(store).await;
}

/// A rotation holds both keys while it seals everything again with the new one: wherever it
/// stops (some subscriptions sealed with each key), both keys open everything and finish it;
/// the new key alone opens the store only once nothing is sealed with the old one, and the old
/// key alone never again.
pub(crate) async fn a_key_rotation_loses_nothing_wherever_it_stops(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (a, _) = store
        .insert_subscription(secret_subscription("https://a.example/"))
        .await
        .expect("stored");
    let (b, _) = store
        .insert_subscription(subscription("q", "https://b.example/"))
        .await
        .expect("stored");
    close(store).await;
    let old = backend.keys();
    let b_sealed_with_old = backend.raw_subscription(b.id).await;

    let new = Key::generate().expect("a key");
    let new_id = new.id().to_string();
    let both = Arc::new(old.sealing_with(new));
    let new_alone = Arc::new(both.current_only().named("/etc/tenax/new.key"));
    let store = backend
        .try_open_with(both.clone(), T0)
        .await
        .expect("opens");
    assert_eq!(store.subscription(a.id).await, Ok(Some(a.clone())));
    close(store).await;
    for id in [a.id, b.id] {
        assert_eq!(
            sealed_with(&backend.raw_subscription(id).await).as_deref(),
            Some(new_id.as_str())
        );
    }

    // Stopped half-way: b still sealed with the old key.
    backend.set_raw_subscription(b.id, &b_sealed_with_old).await;
    let error = backend
        .try_open_with(new_alone.clone(), T0)
        .await
        .expect_err("b does not open with the new key alone");
    assert!(
        matches!(&error, StoreError::Secrets(m)
            if m.contains(&format!("subscription {}", b.id))
                && m.contains(&old.current().id().to_string())),
        "{error:?}"
    );
    let store = backend.try_open_with(both, T0).await.expect("opens");
    assert_eq!(store.subscription(b.id).await, Ok(Some(b.clone())));
    close(store).await;

    let store = backend
        .try_open_with(new_alone, T0)
        .await
        .expect("the new key alone opens it now");
    assert_eq!(store.subscription(a.id).await, Ok(Some(a)));
    assert_eq!(store.subscription(b.id).await, Ok(Some(b)));
    close(store).await;
    let error = backend
        .try_open_with(old.clone(), T0)
        .await
        .expect_err("the old key alone");
    assert!(matches!(error, StoreError::Secrets(_)), "{error:?}");
}

/// Subscriptions an earlier release kept in clear (with no key recorded) read as they were,
/// and are sealed at the first open; afterwards neither the files nor a dump show them, not
/// even where old copies of records linger.
pub(crate) async fn secrets_kept_in_clear_before_are_sealed_at_open(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (a, _) = store
        .insert_subscription(secret_subscription("https://a.example/"))
        .await
        .expect("stored");
    let (b, _) = store
        .insert_subscription(subscription("r", "https://b.example/"))
        .await
        .expect("stored");
    close(store).await;
    let clear = |s: &Subscription| serde_json::to_string(s).expect("JSON");
    backend.set_raw_subscription(a.id, &clear(&a)).await;
    backend.set_raw_subscription(b.id, &clear(&b)).await;
    backend.as_before_sealing(clear(&a).as_bytes()).await;
    assert_eq!(revealed(&backend.dump().await), AT_REST[..5].to_vec());

    let store = backend.open(T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(a.clone())));
    assert_eq!(store.subscriptions(Some("r")).await, Ok(vec![b.clone()]));
    close(store).await;
    assert_eq!(revealed(&backend.dump().await), Vec::<&str>::new());
    let key = backend.keys().current().id().to_string();
    for id in [a.id, b.id] {
        assert_eq!(
            sealed_with(&backend.raw_subscription(id).await).as_deref(),
            Some(key.as_str())
        );
    }
    // The files are as this version writes them: it opens them again as they are.
    let store = backend.open(T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(a)));
    close(store).await;
}

// --- what only one backend promises ----------------------------------------------------------

/// Servers given different keys that open an empty database at the same moment cannot both
/// record theirs: they take turns, and the second is refused before it seals anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_servers_opening_together_with_different_keys_are_refused_but_one() {
    let backend = Postgres::new().await;
    if backend.missing() {
        return;
    }
    let other = Arc::new(Keyring::generate("other.key").expect("a key"));
    let (one, two) = tokio::join!(
        backend.try_open_with(backend.keys(), T0),
        backend.try_open_with(other, T0)
    );
    let (opened, refused) = match (one, two) {
        (Ok(store), Err(error)) | (Err(error), Ok(store)) => (store, error),
        (one, two) => panic!("one opens, one is refused: {one:?} {two:?}"),
    };
    assert!(matches!(refused, StoreError::Secrets(_)), "{refused:?}");
    close(opened).await;
}
