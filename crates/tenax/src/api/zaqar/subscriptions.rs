//! Subscriptions: create, get, list, update, delete, confirm. A Zaqar subscription is a Tenax
//! webhook subscription of the queue's Tenax queue in Zaqar's format: its deliveries POST
//! Zaqar's notification body, and the delivery runtime retries them by the subscription's
//! policy.
//!
//! Invariants:
//! - http(s) subscribers are accepted where the server may deliver to (the same address rules
//!   as native subscriptions); `mailto:` subscribers where the server has an SMTP server
//!   (`--smtp-url`) and their recipients and sender are email addresses. Keystone-trust
//!   subscribers are refused with a 400 that says so.
//! - `options` are kept verbatim, and shown so except `post_headers` values (write-only). `options._retry_policy` is the subscription's policy (unless
//!   it says `ignore_subscription_override`, which in Zaqar hands the subscription to the
//!   queue's policy); `options.post_headers` are sent with every notification.
//! - A subscription's `ttl` is measured from when it was last set (creation, or an update that
//!   names a ttl): `expires_at = updated_at + ttl`, and the delivery runtime deletes it then.
//! - Subscribers are unique per queue (the store keeps them so, atomically): posting one again
//!   answers the existing subscription; changing one to another's subscriber is a 409.
//! - Only subscriptions in Zaqar's format are seen through this API; native ones of the same
//!   queue are not.

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value, json};
use tenax_core::engine::{ChangeError, Conflict, EngineError, Missing};
use tenax_core::model::subscription::REDACTED;
use tenax_core::model::{EnvelopeFormat, StoredPolicy, Subscription, SubscriptionId};

use super::confirmation::{self, Notice};
use super::error::ZaqarError;
use super::metadata::{check_retry_policy, parse_retry_policy, truthy};
use super::names::{Kind, QueueRef, parse_subscription_id};
use super::queues::ensure_created;
use super::request::{Ctx, Params, Query, json_body, json_int};
use super::views::{self, Link, seconds};
use crate::api::AppState;
use crate::delivery::address::{parse_endpoint, vet_endpoint};
use crate::delivery::signing::generate_secret;
use crate::delivery::{headers, mailto};

/// Zaqar's subscription limits and defaults.
const MIN_SUBSCRIPTION_TTL: i64 = 60;
const DEFAULT_SUBSCRIPTION_TTL: i64 = 3_600;
const DEFAULT_SUBSCRIPTIONS_PER_PAGE: usize = 10;
/// The latest expiry Python's datetime can hold (9999-12-31T23:59:59Z), in seconds.
const MAX_EXPIRY_S: i64 = 253_402_300_799;

fn missing(id: &str) -> ZaqarError {
    ZaqarError::not_found(format!("Subscription {id} does not exist"))
}

/// The scheme of a URL as Python's `urlparse` reads it (lowercase; empty if none).
fn scheme(url: &str) -> String {
    match url.split_once(':') {
        Some((scheme, _))
            if scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            scheme.to_ascii_lowercase()
        }
        _ => String::new(),
    }
}

/// The subscriber schemes Tenax delivers to: webhooks, and mail through `--smtp-url`.
const SUBSCRIBER_TYPES: [&str; 3] = ["http", "https", "mailto"];

/// Zaqar's refusal of a subscriber scheme, listing Tenax's.
fn unsupported_type() -> String {
    "The subscriber type of subscription must be supported in the list ['http', 'https', \
     'mailto']."
        .to_owned()
}

/// Zaqar's checks of a subscription document (`Validator.subscription_patching`), in its order
/// and with its texts, except that Keystone-trust subscribers are not supported.
fn check_document(document: &Map<String, Value>, now_ms: u64) -> Result<(), String> {
    if document.is_empty() {
        return Err("No subscription to create.".into());
    }
    if let Some(subscriber) = document.get("subscriber").filter(|v| truthy(v)) {
        let kind = subscriber.as_str().map(scheme).unwrap_or_default();
        if !SUBSCRIBER_TYPES.contains(&kind.as_str()) {
            let mut rule = unsupported_type();
            if kind.starts_with("trust+") {
                rule.push_str(&format!(
                    " {kind} subscribers (Zaqar's Keystone-trust notifications) are not \
                     supported by Tenax."
                ));
            }
            return Err(rule);
        }
    }
    match document.get("options") {
        Some(Value::Object(options)) => {
            check_retry_policy(options)?;
            tenax_core::model::payload::check_value(&Value::Object(options.clone()))
                .map_err(|rule| format!("Options {rule}."))?;
        }
        Some(options) if truthy(options) => return Err("Options must be a dict.".into()),
        _ => {}
    }
    if let Some(ttl) = document.get("ttl").filter(|v| truthy(v)) {
        let Some(ttl) = json_int(ttl) else {
            return Err("TTL must be an integer.".into());
        };
        check_ttl(ttl, now_ms)?;
    }
    Ok(())
}

fn check_ttl(ttl: i64, now_ms: u64) -> Result<(), String> {
    if ttl < MIN_SUBSCRIPTION_TTL {
        return Err(format!(
            "The TTL for a subscription must be at least {MIN_SUBSCRIPTION_TTL} seconds long."
        ));
    }
    let now_s = i64::try_from(now_ms / 1_000).unwrap_or(i64::MAX);
    if now_s.saturating_add(ttl) > MAX_EXPIRY_S {
        return Err(
            "The TTL seconds for a subscription plus current time must be less than \
                    9999-12-31 23:59:59.999999."
                .into(),
        );
    }
    // Tenax's one rule for every time it stores (`clock::check_time`): at most 100 years ahead.
    let ttl_ms = u64::try_from(ttl).unwrap_or(u64::MAX).saturating_mul(1_000);
    tenax_core::clock::check_time(now_ms.saturating_add(ttl_ms), now_ms).map_err(|_| {
        format!(
            "The TTL for a subscription may be at most 100 years ({} seconds) in Tenax.",
            tenax_core::clock::MAX_AHEAD_MS / 1_000
        )
    })?;
    Ok(())
}

/// The ttl a document names (a truthy integer), if any.
fn ttl_of(document: &Map<String, Value>) -> Option<u64> {
    document
        .get("ttl")
        .and_then(json_int)
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
}

/// The subscriber URL as given (Zaqar compares subscribers as text), once it is known to lead
/// where deliveries may go (or to a name that does not resolve yet, as Zaqar's own tests
/// subscribe `http://fake:8080`): the native API's rule. A `mailto:` subscriber is checked by
/// [`check_mailto`] instead, with its options.
async fn checked_subscriber(state: &AppState, text: &str) -> Result<String, ZaqarError> {
    if mailto::is_mailto(text) {
        return Ok(text.to_owned());
    }
    let invalid = |rule: String| ZaqarError::api(format!("subscriber: {rule}"));
    let url = parse_endpoint(text).map_err(|e| invalid(e.to_string()))?;
    let allow_private = state.deliveries.config.allow_private_endpoints;
    vet_endpoint(&url, allow_private)
        .await
        .map_err(|e| invalid(e.to_string()))?;
    Ok(text.to_owned())
}

/// Whether `subscriber`, if it is a `mailto:` one, can be mailed with `options`: this server
/// has an SMTP server, and the recipients and sender are email addresses.
fn check_mailto(state: &AppState, subscriber: &str, options: &Value) -> Result<(), ZaqarError> {
    if !mailto::is_mailto(subscriber) {
        return Ok(());
    }
    if state.deliveries.config.smtp.is_none() {
        return Err(ZaqarError::api(
            "mailto subscribers are mailed through an SMTP server, and this server has none \
             configured (--smtp-url).",
        ));
    }
    mailto::Mailto::parse(subscriber, Some(options))
        .map(|_| ())
        .map_err(|rule| ZaqarError::api(format!("subscriber: {rule}")))
}

/// The 409 of a subscriber another subscription of the queue has.
fn taken() -> ZaqarError {
    ZaqarError::conflict(
        "Such subscription already exists. Subscriptions are unique by project + queue + \
         subscriber URI.",
    )
}

/// What a subscription's `options` set: its policy, content type and extra headers.
struct FromOptions {
    policy: Option<StoredPolicy>,
    content_type: String,
    headers: BTreeMap<String, String>,
}

fn from_options(options: &Value) -> Result<FromOptions, ZaqarError> {
    let empty = Map::new();
    let options = options.as_object().unwrap_or(&empty);
    let parsed = parse_retry_policy(options).map_err(ZaqarError::api)?;
    let policy = parsed
        .filter(|p| !p.disable_overrides)
        .map(|p| StoredPolicy::new(p.retry));
    // The body template is read where it is sent (`Subscription::body_template`); Zaqar's
    // webhook task calls `str.replace` on it, so it must be text.
    if options.get("post_data").is_some_and(|t| !t.is_string()) {
        return Err(ZaqarError::api(
            "options.post_data must be a string: the body's template, in which \"$zaqar_message$\" \
             stands for the message",
        ));
    }
    let mut content_type = "application/json".to_owned();
    let mut headers = BTreeMap::new();
    match options.get("post_headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(given)) => {
            for (name, value) in given {
                let field = format!("options.post_headers.{name}");
                let Some(value) = value.as_str() else {
                    return Err(ZaqarError::api(format!("{field} must be a string")));
                };
                let lower = name.to_ascii_lowercase();
                if HeaderName::from_bytes(name.as_bytes()).is_err()
                    || HeaderValue::from_str(value).is_err()
                {
                    return Err(ZaqarError::api(format!(
                        "{field} must be a valid header name with a value of visible ASCII"
                    )));
                }
                if lower == "content-type" {
                    value.clone_into(&mut content_type);
                } else if headers::is_reserved(&lower) {
                    return Err(ZaqarError::api(format!("{field} {}", headers::rule())));
                } else {
                    headers.insert(name.clone(), value.to_owned());
                }
            }
        }
        Some(_) => {
            return Err(ZaqarError::api(
                "options.post_headers must be an object of header names to string values",
            ));
        }
    }
    Ok(FromOptions {
        policy,
        content_type,
        headers,
    })
}

fn applied(subscription: &mut Subscription, from: &FromOptions) {
    subscription.policy.clone_from(&from.policy);
    subscription.content_type.clone_from(&from.content_type);
    subscription.headers.clone_from(&from.headers);
}

/// The Zaqar subscriptions of `queue`, in id order.
async fn of_queue(state: &AppState, queue: &QueueRef) -> Result<Vec<Subscription>, ZaqarError> {
    Ok(state
        .engine
        .subscriptions(Some(&queue.tenax))
        .await?
        .into_iter()
        .filter(|s| s.format == EnvelopeFormat::Zaqar)
        .collect())
}

/// Whether `subscription` is a live Zaqar subscription of `queue` at `now_ms`.
fn belongs(subscription: &Subscription, queue: &QueueRef, now_ms: u64) -> bool {
    subscription.queue == queue.tenax
        && subscription.format == EnvelopeFormat::Zaqar
        && subscription.expires_at_ms.is_none_or(|at| at > now_ms)
}

/// Subscription `text` of `queue`, if it is one of its live Zaqar subscriptions.
async fn find(
    state: &AppState,
    queue: &QueueRef,
    text: &str,
) -> Result<Option<Subscription>, ZaqarError> {
    let Some(id) = parse_subscription_id(text) else {
        return Ok(None);
    };
    let now = state.engine.now_ms();
    Ok(state
        .engine
        .subscription(id)
        .await?
        .filter(|s| belongs(s, queue, now)))
}

#[derive(Debug, Serialize)]
struct SubscriptionView {
    id: String,
    source: String,
    subscriber: String,
    ttl: u64,
    age: u64,
    options: Value,
    confirmed: bool,
}

fn view(queue: &QueueRef, subscription: &Subscription, now_ms: u64) -> SubscriptionView {
    SubscriptionView {
        id: subscription.id.to_string(),
        source: queue.name.clone(),
        subscriber: subscription.endpoint.clone(),
        ttl: subscription
            .expires_at_ms
            .map_or(0, |at| seconds(subscription.updated_at_ms, at)),
        age: seconds(subscription.created_at_ms, now_ms),
        options: redacted(subscription.options.as_ref()),
        confirmed: subscription.confirmed,
    }
}

/// A subscription's options as shown: verbatim but for `post_headers`, whose values are
/// write-only (they often carry credentials) and shown as `[redacted]`.
fn redacted(options: Option<&Value>) -> Value {
    let mut shown = options.cloned().unwrap_or_else(|| json!({}));
    if let Some(Value::Object(headers)) = shown.get_mut("post_headers") {
        for value in headers.values_mut() {
            *value = Value::String(REDACTED.to_owned());
        }
    }
    shown
}

/// New options in which a `post_headers` value still `[redacted]` (as a client read it back)
/// keeps the stored value of that header.
fn unredacted(mut options: Value, stored: &Value) -> Value {
    if let Some(Value::Object(headers)) = options.get_mut("post_headers") {
        for (name, value) in headers.iter_mut() {
            if value.as_str() == Some(REDACTED) {
                if let Some(old) = stored.get("post_headers").and_then(|h| h.get(name)) {
                    value.clone_from(old);
                }
            }
        }
    }
    options
}

fn document_of(body: &[u8]) -> Result<Map<String, Value>, ZaqarError> {
    if body.is_empty() {
        return Ok(Map::new());
    }
    match json_body(body)? {
        Value::Object(document) => Ok(document),
        _ => Err(ZaqarError::api("Subscriptions must be a dict.")),
    }
}

/// `POST /v2/queues/{name}/subscriptions` `{"subscriber", "ttl", "options"}`: 201 with the
/// subscription's id (an existing one's for a subscriber already subscribed).
pub async fn create(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let document = document_of(&body)?;
    if !document.contains_key("subscriber") {
        return Err(ZaqarError::api("Missing parameter subscriber in body."));
    }
    let now = state.engine.now_ms();
    check_document(&document, now).map_err(ZaqarError::api)?;
    let Some(subscriber) = document.get("subscriber").and_then(Value::as_str) else {
        return Err(ZaqarError::api(unsupported_type()));
    };
    let location = format!("{}/subscriptions", queue.href());
    let ttl_s = ttl_of(&document)
        .unwrap_or_else(|| u64::try_from(DEFAULT_SUBSCRIPTION_TTL).unwrap_or(3_600));
    // A subscriber already subscribed is answered at once, without resolving it again; the
    // store makes the same answer atomically below, for one subscribed meanwhile.
    if let Some(existing) = of_queue(&state, &queue)
        .await?
        .into_iter()
        .find(|s| s.endpoint == subscriber)
    {
        return subscribed_again(&state, &queue, &existing, ttl_s, &location).await;
    }
    let endpoint = checked_subscriber(&state, subscriber).await?;
    let options = document
        .get("options")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let from = from_options(&options)?;
    check_mailto(&state, &endpoint, &options)?;
    let secret = generate_secret().map_err(|e| {
        tracing::error!(error = %e, "cannot generate a signing secret");
        ZaqarError::unavailable("Subscription could not be created.")
    })?;
    ensure_created(&state, &queue).await?;
    let require_confirmation = state.zaqar_require_confirmation;
    let mut subscription = Subscription {
        endpoint,
        content_type: String::new(),
        secret,
        format: EnvelopeFormat::Zaqar,
        options: Some(options),
        confirmed: !require_confirmation,
        expires_at_ms: Some(now.saturating_add(ttl_s.saturating_mul(1_000))),
        ..Subscription::new(queue.tenax.clone(), now)
    };
    applied(&mut subscription, &from);
    let (stored, created) = state.engine.create_subscription(subscription).await?;
    if !created {
        return subscribed_again(&state, &queue, &stored, ttl_s, &location).await;
    }
    if require_confirmation {
        confirmation::send(&state, &queue, stored.id, Notice::Subscribe, ttl_s).await?;
    }
    Ok(created_answer(stored.id, &location))
}

/// The answer to a subscription POST: 201, its id, the collection as `Location`.
fn created_answer(id: SubscriptionId, location: &str) -> Response {
    let response = views::json(
        StatusCode::CREATED,
        &json!({ "subscription_id": id.to_string() }),
    );
    views::located(response, location)
}

/// The answer to a POST of a subscriber `existing` already has. As Zaqar: where confirmation
/// is required, a confirmed one is a 409 and an unconfirmed one is sent its confirmation
/// notice again; otherwise it is the existing subscription's 201.
async fn subscribed_again(
    state: &AppState,
    queue: &QueueRef,
    existing: &Subscription,
    ttl_s: u64,
    location: &str,
) -> Result<Response, ZaqarError> {
    if state.zaqar_require_confirmation {
        if existing.confirmed {
            return Err(ZaqarError::conflict(
                "Such subscription already exists.Subscriptions are unique by project + queue \
                 + subscriber URI.",
            ));
        }
        confirmation::send(state, queue, existing.id, Notice::Subscribe, ttl_s).await?;
    }
    Ok(created_answer(existing.id, location))
}

/// `GET /v2/queues/{name}/subscriptions/{id}`.
pub async fn show(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let subscription = find(&state, &queue, &id)
        .await?
        .ok_or_else(|| missing(&id))?;
    let now = state.engine.now_ms();
    Ok(views::json(
        StatusCode::OK,
        &view(&queue, &subscription, now),
    ))
}

#[derive(Debug, Serialize)]
struct SubscriptionList {
    subscriptions: Vec<SubscriptionView>,
    links: Vec<Link>,
}

/// `GET /v2/queues/{name}/subscriptions`: by id as a string, `limit` (1 to 20, default 10) after
/// `marker`.
pub async fn list(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let params = Params::parse(query.as_deref());
    let marker = params.str("marker")?.map(str::to_owned);
    let limit = params.int("limit")?;
    let max = state.zaqar_limits.max_subscriptions_per_page;
    if limit.is_some_and(|l| !super::limits::within(l, max)) {
        return Err(ZaqarError::api(format!(
            "Limit must be at least 1 and may not be greater than {max}."
        )));
    }
    let page_size = limit
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_SUBSCRIPTIONS_PER_PAGE);
    let now = state.engine.now_ms();
    let mut live: Vec<(String, Subscription)> = of_queue(&state, &queue)
        .await?
        .into_iter()
        .filter(|s| s.expires_at_ms.is_none_or(|at| at > now))
        .map(|s| (s.id.to_string(), s))
        .collect();
    // Zaqar's ids are strings, listed and paged in string order: "10" comes before "9", and
    // any text is a marker (the ids after it as strings).
    live.sort_by(|a, b| a.0.cmp(&b.0));
    let subscriptions: Vec<SubscriptionView> = live
        .iter()
        .filter(|(id, _)| marker.as_deref().is_none_or(|m| id.as_str() > m))
        .take(page_size)
        .map(|(_, s)| view(&queue, s, now))
        .collect();
    let links = match subscriptions.last() {
        Some(last) => {
            let mut next = Query::default();
            if let Some(marker) = &marker {
                next.set("marker", marker);
            }
            if let Some(limit) = limit {
                next.set("limit", limit);
            }
            next.set("marker", &last.id);
            vec![Link::next(format!(
                "{}/subscriptions{}",
                queue.href(),
                next.render()
            ))]
        }
        None => Vec::new(),
    };
    Ok(views::json(
        StatusCode::OK,
        &SubscriptionList {
            subscriptions,
            links,
        },
    ))
}

/// `PATCH /v2/queues/{name}/subscriptions/{id}` with any of `subscriber`, `ttl`, `options`:
/// 204. `options` replace the old ones; a `ttl` counts from now.
pub async fn update(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let document = document_of(&body)?;
    let now = state.engine.now_ms();
    check_document(&document, now).map_err(ZaqarError::api)?;
    let current = find(&state, &queue, &id)
        .await?
        .ok_or_else(|| missing(&id))?;
    let given = |key: &str| document.get(key).filter(|v| !v.is_null());
    let (subscriber, ttl, options) = (given("subscriber"), given("ttl"), given("options"));
    if subscriber.is_none() && ttl.is_none() && options.is_none() {
        return Err(ZaqarError::new(
            StatusCode::BAD_REQUEST,
            "Unable to update subscription",
            format!("Subscription {id} could not be updated."),
        ));
    }
    // Resolving a new subscriber takes time: done before the change, which is atomic and so
    // keeps what the runners store meanwhile (health marks, an automatic disable).
    let endpoint = match subscriber.and_then(Value::as_str) {
        Some(subscriber) if subscriber != current.endpoint => {
            Some(checked_subscriber(&state, subscriber).await?)
        }
        _ => None,
    };
    let expires_at_ms = ttl_of(&document).map(|s| now.saturating_add(s.saturating_mul(1_000)));
    let result = state
        .engine
        .update_subscription(current.id, |stored| {
            if !belongs(stored, &queue, now) {
                return Err(missing(&id));
            }
            let mut subscription = stored.clone();
            if let Some(endpoint) = &endpoint {
                subscription.endpoint.clone_from(endpoint);
            }
            let kept = subscription.options.clone().unwrap_or_else(|| json!({}));
            let options = match options {
                Some(given) => unredacted(given.clone(), &kept),
                None => kept,
            };
            let from = from_options(&options)?;
            check_mailto(&state, &subscription.endpoint, &options)?;
            applied(&mut subscription, &from);
            subscription.options = Some(options);
            if let Some(at) = expires_at_ms {
                subscription.expires_at_ms = Some(at);
                subscription.updated_at_ms = now;
            }
            Ok(Some(subscription))
        })
        .await;
    match result {
        Ok(_) => {}
        Err(ChangeError::Failed(EngineError::Conflict(Conflict::EndpointTaken { .. }))) => {
            return Err(taken());
        }
        Err(ChangeError::Failed(EngineError::NotFound(Missing::Subscription(_)))) => {
            return Err(missing(&id));
        }
        Err(error) => return Err(error.into()),
    }
    let location = format!("{}/subscriptions/{id}", queue.href());
    Ok(views::empty(StatusCode::NO_CONTENT, Some(&location)))
}

/// `DELETE /v2/queues/{name}/subscriptions/{id}`: 204, also for a missing one.
pub async fn delete(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    if let Some(subscription) = find(&state, &queue, &id).await? {
        remove(&state, subscription.id).await?;
    }
    Ok(views::empty(StatusCode::NO_CONTENT, None))
}

async fn remove(state: &AppState, id: SubscriptionId) -> Result<(), ZaqarError> {
    match state.engine.delete_subscription(id).await {
        Ok(_) | Err(EngineError::NotFound(Missing::Subscription(_))) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Deletes every Zaqar subscription of `queue` (a purge).
pub async fn purge_subscriptions(state: &AppState, queue: &QueueRef) -> Result<(), ZaqarError> {
    for subscription in of_queue(state, queue).await? {
        remove(state, subscription.id).await?;
    }
    Ok(())
}

/// `PUT /v2/queues/{name}/subscriptions/{id}/confirm` `{"confirmed": bool}`: 204. Where
/// confirmation is required, stores the subscriber's answer (`false` stops its messages and is
/// answered with Zaqar's unsubscribe notice); otherwise every subscription is confirmed
/// already and this only checks its input.
pub async fn confirm(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let document = document_of(&body)?;
    let Some(confirmed) = document.get("confirmed").and_then(Value::as_bool) else {
        return Err(ZaqarError::api("The 'confirmed' should be boolean."));
    };
    let current = find(&state, &queue, &id)
        .await?
        .ok_or_else(|| missing(&id))?;
    if state.zaqar_require_confirmation {
        let now = state.engine.now_ms();
        let result = state
            .engine
            .update_subscription(current.id, |stored| {
                if !belongs(stored, &queue, now) {
                    return Err(missing(&id));
                }
                Ok((stored.confirmed != confirmed).then(|| Subscription {
                    confirmed,
                    ..stored.clone()
                }))
            })
            .await;
        match result {
            Ok(_) => {}
            Err(ChangeError::Failed(EngineError::NotFound(Missing::Subscription(_)))) => {
                return Err(missing(&id));
            }
            Err(error) => return Err(error.into()),
        }
        if !confirmed {
            confirmation::send(&state, &queue, current.id, Notice::Unsubscribe, 0).await?;
        }
    }
    let location = format!("{}/subscriptions/{id}/confirm", queue.href());
    Ok(views::empty(StatusCode::NO_CONTENT, Some(&location)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: Value) -> Result<(), String> {
        check_document(value.as_object().unwrap(), 1_800_000_000_000)
    }

    #[test]
    fn documents_are_checked_in_zaqars_words() {
        assert_eq!(check(json!({})).unwrap_err(), "No subscription to create.");
        assert!(
            check(json!({"subscriber": "ftp://x"}))
                .unwrap_err()
                .starts_with("The subscriber type of subscription must be supported in the list")
        );
        assert!(check(json!({"subscriber": "mailto:a@example.com"})).is_ok());
        assert!(
            check(json!({"subscriber": "trust+https://x/y"}))
                .unwrap_err()
                .contains("trust+https")
        );
        assert_eq!(
            check(json!({"subscriber": "http://x/", "options": "x"})).unwrap_err(),
            "Options must be a dict."
        );
        assert_eq!(
            check(json!({"subscriber": "http://x/", "ttl": "3600"})).unwrap_err(),
            "TTL must be an integer."
        );
        assert!(check(json!({"subscriber": "http://x/", "ttl": 59})).is_err());
        assert!(check(json!({"subscriber": "HTTPS://x/", "ttl": 60, "options": []})).is_ok());
    }

    #[test]
    fn options_give_policy_and_headers() {
        let from = from_options(&json!({
            "_retry_policy": {"retries_with_no_delay": 1, "minimum_delay": 1,
                              "maximum_delay": 11},
            "post_headers": {"X-Custom": "1", "Content-Type": "text/plain"},
        }))
        .unwrap();
        assert!(from.policy.is_some());
        assert_eq!(from.content_type, "text/plain");
        assert_eq!(from.headers.get("X-Custom").map(String::as_str), Some("1"));
        let ignored = from_options(&json!({"_retry_policy": {
            "ignore_subscription_override": true}}))
        .unwrap();
        assert!(ignored.policy.is_none());
        assert!(from_options(&json!({"post_headers": {"Host": "x"}})).is_err());
        assert!(from_options(&json!({"post_headers": ["x"]})).is_err());
        assert!(from_options(&json!({"post_data": "{\"m\": \"$zaqar_message$\"}"})).is_ok());
        assert!(from_options(&json!({"post_data": {"m": 1}})).is_err());
    }
}
