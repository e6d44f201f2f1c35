//! Webhook subscriptions: create, list, show, change, enable, disable, delete.
//!
//! Invariants:
//! - A stored subscription passed every rule here: an http(s) endpoint that resolves to allowed
//!   addresses (public ones unless `--allow-private-endpoints`), a valid `whsec_` secret, a policy
//!   in canonical native JSON, headers that are valid and do not touch what Tenax sets itself.
//! - Create and update share one set of rules ([`subscription_change`]); an update changes only
//!   the fields it names, atomically (what the runners store meanwhile is kept), and `null`
//!   resets a nullable field to its default.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::{Extension, Json};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use tenax_core::auth::Principal;
use tenax_core::clock::UnixMs;
use tenax_core::model::{EnvelopeFormat, RetryBudget, StoredPolicy, Subscription, SubscriptionId};
use tenax_policy::parse_policy;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::{JsonBody, JsonOrEmpty};
use super::fields::{Millis, check_queue_name};
use super::openapi::{Missing, Refusals};
use super::subscription_views::{Secrets, SubscriptionView, subscription_view};
use crate::delivery::address::{parse_endpoint, vet_endpoint};
use crate::delivery::headers;
use crate::delivery::signing::{generate_secret, secret_key};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list_of_queue))
        .routes(routes!(list_all))
        .routes(routes!(show, update, delete))
        .routes(routes!(enable))
        .routes(routes!(disable))
        .routes(routes!(rotate_secret))
}

/// The most throttle a subscription may ask for, per second.
const MAX_THROTTLE: u32 = 100_000;
/// The most requests of one subscription at once.
pub const MAX_CONCURRENCY: u32 = 1_000;
/// The most extra headers.
const MAX_HEADERS: usize = 32;
/// A retry budget's window: from a second to a day.
const BUDGET_WINDOW_MS: (u64, u64) = (1_000, 86_400_000);
/// The most retries a retry budget allows in any window whatever the share.
const MAX_MIN_RETRIES: u32 = 1_000_000;
/// Retries a retry budget allows in any window whatever the share, unless it says.
pub(crate) const DEFAULT_MIN_RETRIES: u32 = 10;
/// The longest header value, in bytes.
const MAX_HEADER_VALUE: usize = 4_096;

/// The fields of a create or an update. On an update every field is optional and `null` resets
/// a nullable one (`policy`, `throttle_per_second`, `retryable_statuses`, `max_concurrency`,
/// `auto_disable_after`, `retry_budget`) to its default.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"endpoint": "https://hooks.example.com/orders",
    "policy": {"type": "phased", "min_delay": "5s", "max_delay": "5m", "num_retries": 8,
               "function": "exponential"}}))]
pub struct SubscriptionRequest {
    /// The http or https URL that messages are POSTed to (required on create).
    #[schema(max_length = 2048)]
    pub(crate) endpoint: Option<String>,
    /// The delivery policy, in any spelling; `null` resets it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub(crate) policy: Option<Option<Value>>,
    /// At most this many deliveries start per second (1 to 100 000); `null` resets it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 100_000)]
    pub(crate) throttle_per_second: Option<Option<u32>>,
    /// The request's `Content-Type` (default `application/json`).
    #[schema(max_length = 256)]
    pub(crate) content_type: Option<String>,
    /// The Standard Webhooks signing secret, `whsec_…` (generated when left out).
    pub(crate) secret: Option<String>,
    /// Extra request headers (at most 32).
    pub(crate) headers: Option<BTreeMap<String, String>>,
    pub(crate) enabled: Option<bool>,
    /// Which non-2xx statuses are retried, instead of every 5xx, 408 and 429; `null` resets it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<u16>>)]
    pub(crate) retryable_statuses: Option<Option<Vec<u16>>>,
    /// At most this many requests at once (1 to 1000); `null` resets it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub(crate) max_concurrency: Option<Option<u32>>,
    /// Disable after failing this long without a success; `null` resets it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Millis>)]
    pub(crate) auto_disable_after: Option<Option<Millis>>,
    pub(crate) format: Option<EnvelopeFormat>,
    /// A cap on retries, so that a failing endpoint cannot turn a burst into a storm of
    /// them; `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<RetryBudgetRequest>)]
    pub(crate) retry_budget: Option<Option<RetryBudgetRequest>>,
}

/// A retry budget: within any `window`, the subscription's retries may be at most `percent` %
/// of its attempts (the retries among them), or `min_retries`, whichever allows more. Retries
/// over it wait; they use no attempt.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"percent": 20, "window": "1m", "min_retries": 10}))]
pub(crate) struct RetryBudgetRequest {
    /// 1 to 100.
    #[schema(minimum = 1, maximum = 100)]
    pub(crate) percent: u32,
    /// The sliding window, from 1 s to 1 day.
    #[schema(value_type = Millis)]
    pub(crate) window: Millis,
    /// Retries allowed in any window whatever the share (1 to 1 000 000; default 10).
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub(crate) min_retries: Option<u32>,
}

/// Tells `"field": null` (reset) from an absent field (keep).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Ok(Some(Option::<T>::deserialize(deserializer)?))
}

/// A checked change to a subscription: every field of a request, validated, ready to apply.
/// `None` leaves a field as it is; `Some(None)` resets a nullable one.
#[derive(Debug, Clone, Default)]
pub struct SubscriptionChange {
    /// The endpoint, parsed and normalised; where it leads is checked separately
    /// ([`check_reach`]), since that resolves its host.
    pub(crate) endpoint: Option<url::Url>,
    pub(crate) policy: Option<Option<StoredPolicy>>,
    pub(crate) throttle_per_second: Option<Option<u32>>,
    pub(crate) content_type: Option<String>,
    pub(crate) secret: Option<String>,
    pub(crate) headers: Option<BTreeMap<String, String>>,
    pub(crate) enabled: Option<bool>,
    pub(crate) retryable_statuses: Option<Option<Vec<u16>>>,
    pub(crate) max_concurrency: Option<Option<u32>>,
    pub(crate) auto_disable_after_ms: Option<Option<u64>>,
    pub(crate) format: Option<EnvelopeFormat>,
    pub(crate) retry_budget: Option<Option<RetryBudget>>,
}

/// Checks a create (`creating`) or an update: every rule but where the endpoint leads. Pure, so
/// the fuzz targets run it too.
pub fn subscription_change(
    request: SubscriptionRequest,
    creating: bool,
) -> Result<SubscriptionChange, ApiError> {
    let endpoint = match &request.endpoint {
        Some(text) => {
            Some(parse_endpoint(text).map_err(|e| ApiError::invalid("endpoint", e.to_string()))?)
        }
        None if creating => {
            return Err(ApiError::invalid(
                "endpoint",
                "is required: the http or https URL that messages are POSTed to",
            ));
        }
        None => None,
    };
    let (policy, implied) = match request.policy {
        Some(Some(value)) => {
            let (policy, implied) = subscription_policy(&value)?;
            (Some(Some(policy)), implied)
        }
        Some(None) => (Some(None), Implied::default()),
        None => (None, Implied::default()),
    };
    let throttle_per_second = match request.throttle_per_second {
        Some(Some(rate)) => Some(Some(check_throttle("throttle_per_second", rate)?)),
        Some(None) => Some(None),
        None => implied
            .throttle_per_second
            .map(|rate| check_throttle("policy", rate).map(Some))
            .transpose()?,
    };
    let content_type = match (request.content_type, implied.content_type) {
        (Some(text), _) => Some(check_content_type("content_type", text)?),
        (None, Some(text)) => Some(check_content_type("policy", text)?),
        (None, None) => None,
    };
    if let Some(secret) = &request.secret {
        secret_key(secret).map_err(|rule| ApiError::invalid("secret", rule))?;
    }
    if let Some(headers) = &request.headers {
        check_headers(headers)?;
    }
    let retryable_statuses = request
        .retryable_statuses
        .map(|statuses| statuses.map(check_statuses).transpose())
        .transpose()?;
    let max_concurrency = request
        .max_concurrency
        .map(|max| {
            max.map(|n| in_range("max_concurrency", n, 1, MAX_CONCURRENCY))
                .transpose()
        })
        .transpose()?;
    let retry_budget = request
        .retry_budget
        .map(|budget| budget.map(check_retry_budget).transpose())
        .transpose()?;
    Ok(SubscriptionChange {
        endpoint,
        policy,
        throttle_per_second,
        content_type,
        secret: request.secret,
        headers: request.headers,
        enabled: request.enabled,
        retryable_statuses,
        max_concurrency,
        auto_disable_after_ms: request
            .auto_disable_after
            .map(|after| after.map(|Millis(ms)| ms)),
        format: request.format,
        retry_budget,
    })
}

impl SubscriptionChange {
    /// Sets what the change names on `subscription`, at `now_ms`.
    pub fn apply(&self, subscription: &mut Subscription, now_ms: UnixMs) {
        if let Some(endpoint) = &self.endpoint {
            subscription.endpoint = endpoint.to_string();
        }
        if let Some(policy) = &self.policy {
            subscription.policy.clone_from(policy);
        }
        if let Some(rate) = self.throttle_per_second {
            subscription.throttle_per_second = rate;
        }
        if let Some(content_type) = &self.content_type {
            subscription.content_type.clone_from(content_type);
        }
        if let Some(secret) = &self.secret {
            subscription.secret.clone_from(secret);
        }
        if let Some(headers) = &self.headers {
            subscription.headers.clone_from(headers);
        }
        match self.enabled {
            Some(true) if !subscription.enabled => {
                subscription.enabled = true;
                subscription.disabled_reason = None;
                // The failure period that auto-disabling measures starts again.
                subscription.health.failing_since_ms = None;
            }
            Some(false) => subscription.enabled = false,
            Some(true) | None => {}
        }
        if let Some(statuses) = &self.retryable_statuses {
            subscription.retryable_statuses.clone_from(statuses);
        }
        if let Some(max) = self.max_concurrency {
            subscription.max_concurrency = max;
        }
        if let Some(after) = self.auto_disable_after_ms {
            subscription.auto_disable_after_ms = after;
        }
        if let Some(format) = self.format {
            subscription.format = format;
        }
        if let Some(budget) = self.retry_budget {
            subscription.retry_budget = budget;
        }
        subscription.updated_at_ms = now_ms;
    }
}

/// A freshly generated signing secret.
fn new_secret() -> Result<String, ApiError> {
    generate_secret().map_err(|e| ApiError::internal(&e))
}

/// What an SNS policy says besides the retries, for fields the request leaves out.
#[derive(Debug, Default)]
pub(crate) struct Implied {
    pub(crate) throttle_per_second: Option<u32>,
    pub(crate) content_type: Option<String>,
}

/// A subscription's policy field (any spelling), and what it implies besides.
pub(crate) fn subscription_policy(value: &Value) -> Result<(StoredPolicy, Implied), ApiError> {
    let parsed = parse_policy(value).map_err(|e| ApiError::policy("policy", &e))?;
    if parsed.disable_overrides {
        return Err(ApiError::invalid(
            "policy",
            "must not forbid subscription overrides (disableSubscriptionOverrides, \
             ignore_subscription_override): only a queue's policy can, with \
             PUT /api/queues/{name}",
        ));
    }
    let implied = Implied {
        throttle_per_second: parsed.throttle_per_second,
        content_type: parsed.content_type,
    };
    Ok((StoredPolicy::new(parsed.retry), implied))
}

/// Whether the endpoint leads where deliveries may go (or to a name that does not resolve
/// yet: the connect-time guard judges it when it does). Resolves its host.
pub(crate) async fn check_reach(
    config: &crate::delivery::DeliveryConfig,
    url: &url::Url,
) -> Result<(), ApiError> {
    vet_endpoint(url, config.allow_private_endpoints)
        .await
        .map_err(|e| ApiError::invalid("endpoint", e.to_string()))
}

pub(crate) fn in_range(field: &str, n: u32, min: u32, max: u32) -> Result<u32, ApiError> {
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(ApiError::invalid(
            field,
            format!("must be from {min} to {max}, got {n}"),
        ))
    }
}

pub(crate) fn check_throttle(field: &str, rate: u32) -> Result<u32, ApiError> {
    in_range(field, rate, 1, MAX_THROTTLE).map_err(|e| ApiError {
        message: format!("deliveries per second {}", e.message),
        ..e
    })
}

/// A content type: `type/subtype`, optionally with parameters, usable as a header value.
pub(crate) fn check_content_type(field: &str, text: String) -> Result<String, ApiError> {
    let essence = text.split(';').next().unwrap_or_default().trim();
    let valid = text.len() <= 256
        && HeaderValue::from_str(&text).is_ok()
        && essence
            .split_once('/')
            .is_some_and(|(kind, sub)| is_token(kind) && is_token(sub));
    if valid {
        Ok(text)
    } else {
        Err(ApiError::invalid(
            field,
            format!(
                "must be a media type such as \"application/json\" (at most 256 characters), \
                 got {text:?}"
            ),
        ))
    }
}

/// An HTTP token (RFC 9110): what header names and media type parts are made of.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(crate) fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if headers.len() > MAX_HEADERS {
        return Err(ApiError::invalid(
            "headers",
            format!(
                "must hold at most {MAX_HEADERS} headers, got {}",
                headers.len()
            ),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, value) in headers {
        let field = format!("headers.{name}");
        let lower = name.to_ascii_lowercase();
        if !is_token(name) || HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ApiError::invalid(
                field,
                "must be a header name: letters, digits and !#$%&'*+-.^_`|~",
            ));
        }
        if headers::is_reserved(&lower) {
            return Err(ApiError::invalid(field, headers::rule()));
        }
        if !seen.insert(lower) {
            return Err(ApiError::invalid(
                field,
                "is given twice (header names are case-insensitive)",
            ));
        }
        if value.len() > MAX_HEADER_VALUE || HeaderValue::from_str(value).is_err() {
            return Err(ApiError::invalid(
                field,
                format!(
                    "must be a header value: at most {MAX_HEADER_VALUE} bytes of visible ASCII, \
                     spaces and tabs"
                ),
            ));
        }
    }
    Ok(())
}

/// A retry budget within its bounds.
pub(crate) fn check_retry_budget(request: RetryBudgetRequest) -> Result<RetryBudget, ApiError> {
    let percent = in_range("retry_budget.percent", request.percent, 1, 100)?;
    let (shortest, longest) = BUDGET_WINDOW_MS;
    let Millis(window_ms) = request.window;
    if !(shortest..=longest).contains(&window_ms) {
        return Err(ApiError::invalid(
            "retry_budget.window",
            format!("must be from 1s to 1d, got {window_ms} ms"),
        ));
    }
    let min_retries = in_range(
        "retry_budget.min_retries",
        request.min_retries.unwrap_or(DEFAULT_MIN_RETRIES),
        1,
        MAX_MIN_RETRIES,
    )?;
    Ok(RetryBudget {
        percent,
        window_ms,
        min_retries,
    })
}

/// The retryable statuses, sorted and without repeats.
pub(crate) fn check_statuses(mut statuses: Vec<u16>) -> Result<Vec<u16>, ApiError> {
    for (i, status) in statuses.iter().enumerate() {
        let field = format!("retryable_statuses[{i}]");
        if !(100..=599).contains(status) {
            return Err(ApiError::invalid(
                field,
                format!("must be an HTTP status from 100 to 599, got {status}"),
            ));
        }
        if (200..=299).contains(status) {
            return Err(ApiError::invalid(
                field,
                format!("must not be a 2xx status: those are always a success, got {status}"),
            ));
        }
    }
    statuses.sort_unstable();
    statuses.dedup();
    Ok(statuses)
}

pub(super) fn parse_subscription_id(text: &str) -> Result<SubscriptionId, ApiError> {
    text.parse().map_err(|_| {
        ApiError::invalid(
            "id",
            format!("must be a subscription id (a whole number), got {text:?}"),
        )
    })
}

/// The stored subscription `id`, or the 404.
pub(super) async fn existing(
    state: &AppState,
    id: SubscriptionId,
) -> Result<Subscription, ApiError> {
    state
        .engine
        .subscription(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("subscription {id} does not exist")))
}

/// Applies `change` to subscription `id` atomically: only the fields it names change, so what
/// the runners store meanwhile (health marks, an automatic disable) is kept.
async fn change_subscription(
    state: &AppState,
    id: SubscriptionId,
    change: &SubscriptionChange,
) -> Result<SubscriptionView, ApiError> {
    if let Some(url) = &change.endpoint {
        check_reach(&state.deliveries.config, url).await?;
    }
    let now = state.engine.now_ms();
    let stored = state
        .engine
        .update_subscription(id, |current| {
            let mut subscription = current.clone();
            change.apply(&mut subscription, now);
            Ok::<_, ApiError>(Some(subscription))
        })
        .await?;
    subscription_view(state, stored, Secrets::Redact).await
}

/// Subscribes an endpoint to a queue.
#[utoipa::path(post, path = "/queues/{name}/subscriptions", operation_id = "create_subscription", tag = "subscriptions",
    params(("name" = String, Path, description = "The queue")),
    request_body = SubscriptionRequest,
    responses((status = 201, body = SubscriptionView, links(
            ("get_subscription" = (operation_id = "get_subscription", parameters(("id" = "$response.body#/id")))),
            ("update_subscription" = (operation_id = "update_subscription", parameters(("id" = "$response.body#/id")))),
            ("delete_subscription" = (operation_id = "delete_subscription", parameters(("id" = "$response.body#/id")))),
            ("enable_subscription" = (operation_id = "enable_subscription", parameters(("id" = "$response.body#/id")))),
            ("disable_subscription" = (operation_id = "disable_subscription", parameters(("id" = "$response.body#/id")))),
            ("list_deliveries" = (operation_id = "list_deliveries", parameters(("id" = "$response.body#/id")))),
            ("list_subscription_attempts" = (operation_id = "list_subscription_attempts", parameters(("id" = "$response.body#/id")))),
            ("replay_subscription_deliveries" = (operation_id = "replay_subscription_deliveries", parameters(("id" = "$response.body#/id")))),
        )), Refusals))]
async fn create(
    State(state): State<AppState>,
    Path(queue): Path<String>,
    JsonBody(request): JsonBody<SubscriptionRequest>,
) -> Result<(StatusCode, Json<SubscriptionView>), ApiError> {
    check_queue_name("queue", &queue)?;
    let mut change = subscription_change(request, true)?;
    if let Some(url) = &change.endpoint {
        check_reach(&state.deliveries.config, url).await?;
    }
    if change.secret.is_none() {
        change.secret = Some(new_secret()?);
    }
    let now = state.engine.now_ms();
    let mut subscription = Subscription::new(queue, now);
    change.apply(&mut subscription, now);
    let (stored, _) = state.engine.create_subscription(subscription).await?;
    let view = subscription_view(&state, stored, Secrets::Reveal).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// Subscriptions, in id order.
#[derive(Debug, Serialize, ToSchema)]
struct SubscriptionList {
    subscriptions: Vec<SubscriptionView>,
}

async fn views(
    state: &AppState,
    queue: Option<&str>,
    principal: &Principal,
) -> Result<Json<SubscriptionList>, ApiError> {
    let mut subscriptions = Vec::new();
    for subscription in state.engine.subscriptions(queue).await? {
        if !principal.admits_queue(&subscription.queue) {
            continue;
        }
        subscriptions.push(subscription_view(state, subscription, Secrets::Redact).await?);
    }
    Ok(Json(SubscriptionList { subscriptions }))
}

/// A queue's subscriptions.
#[utoipa::path(get, path = "/queues/{name}/subscriptions", operation_id = "list_queue_subscriptions", tag = "subscriptions",
    params(("name" = String, Path, description = "The queue")),
    responses((status = 200, body = SubscriptionList), Refusals))]
async fn list_of_queue(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(queue): Path<String>,
) -> Result<Json<SubscriptionList>, ApiError> {
    check_queue_name("queue", &queue)?;
    views(&state, Some(&queue), &principal).await
}

/// Every subscription (of the queues the token may touch).
#[utoipa::path(get, path = "/subscriptions", operation_id = "list_subscriptions", tag = "subscriptions",
    responses((status = 200, body = SubscriptionList), Refusals))]
async fn list_all(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<SubscriptionList>, ApiError> {
    views(&state, None, &principal).await
}

/// One subscription, with its effective policy, health and delivery counts.
#[utoipa::path(get, path = "/subscriptions/{id}", operation_id = "get_subscription", tag = "subscriptions",
    params(("id" = u64, Path, description = "The subscription's id")),
    responses((status = 200, body = SubscriptionView), Missing, Refusals))]
async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SubscriptionView>, ApiError> {
    let subscription = existing(&state, parse_subscription_id(&id)?).await?;
    Ok(Json(
        subscription_view(&state, subscription, Secrets::Redact).await?,
    ))
}

/// Changes the fields the body names; `null` resets a nullable field.
#[utoipa::path(patch, path = "/subscriptions/{id}", operation_id = "update_subscription", tag = "subscriptions",
    params(("id" = u64, Path, description = "The subscription's id")),
    request_body = SubscriptionRequest,
    responses((status = 200, body = SubscriptionView), Missing, Refusals))]
async fn update(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<SubscriptionRequest>,
) -> Result<Json<SubscriptionView>, ApiError> {
    if request.secret.is_some() {
        return Err(ApiError::invalid(
            "secret",
            "is changed by POST /api/subscriptions/{id}/rotate-secret, which keeps the old secret \
             signing for an overlap so that receivers can switch over",
        ));
    }
    let id = existing(&state, parse_subscription_id(&id)?).await?.id;
    let change = subscription_change(request, false)?;
    Ok(Json(change_subscription(&state, id, &change).await?))
}

async fn set_enabled(
    state: AppState,
    id: String,
    enabled: bool,
) -> Result<Json<SubscriptionView>, ApiError> {
    let id = parse_subscription_id(&id)?;
    let change = SubscriptionChange {
        enabled: Some(enabled),
        ..SubscriptionChange::default()
    };
    Ok(Json(change_subscription(&state, id, &change).await?))
}

/// Enables a subscription: its pending deliveries resume, and a new failure period starts.
#[utoipa::path(post, path = "/subscriptions/{id}/enable", operation_id = "enable_subscription", tag = "subscriptions",
    params(("id" = u64, Path, description = "The subscription's id")),
    responses((status = 200, body = SubscriptionView), Missing, Refusals))]
async fn enable(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SubscriptionView>, ApiError> {
    set_enabled(state, id, true).await
}

/// Disables a subscription: its deliveries wait.
#[utoipa::path(post, path = "/subscriptions/{id}/disable", operation_id = "disable_subscription", tag = "subscriptions",
    params(("id" = u64, Path, description = "The subscription's id")),
    responses((status = 200, body = SubscriptionView), Missing, Refusals))]
async fn disable(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SubscriptionView>, ApiError> {
    set_enabled(state, id, false).await
}

/// How long the old secret keeps signing after a rotation when the request does not say.
const DEFAULT_OVERLAP_MS: u64 = 24 * 3_600_000;

/// A new signing secret.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RotateSecret {
    /// The new secret, `whsec_…` (generated when left out).
    secret: Option<String>,
    /// How long the old secret keeps signing beside the new one (default 24 h; 0 ends it now).
    overlap: Option<Millis>,
}

/// Replaces the signing secret. Until the overlap ends, deliveries carry signatures by both the
/// new and the old secret, so a receiver can move to the new one without missing a delivery.
/// The answer shows the new secret; no later answer does.
#[utoipa::path(post, path = "/subscriptions/{id}/rotate-secret", operation_id = "rotate_subscription_secret", tag = "subscriptions",
    params(("id" = u64, Path, description = "The subscription's id")),
    request_body(content = Option<RotateSecret>, description = "May be left out"),
    responses((status = 200, body = SubscriptionView), Missing, Refusals))]
async fn rotate_secret(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonOrEmpty(request): JsonOrEmpty<RotateSecret>,
) -> Result<Json<SubscriptionView>, ApiError> {
    let id = parse_subscription_id(&id)?;
    let new = match request.secret {
        Some(secret) => {
            secret_key(&secret).map_err(|rule| ApiError::invalid("secret", rule))?;
            secret
        }
        None => new_secret()?,
    };
    let overlap = request.overlap.map_or(DEFAULT_OVERLAP_MS, |Millis(ms)| ms);
    let now = state.engine.now_ms();
    let rotated = state
        .engine
        .update_subscription(id, |current| {
            let mut s = current.clone();
            let old = std::mem::replace(&mut s.secret, new.clone());
            if overlap > 0 && old != s.secret {
                s.previous_secret = Some(old);
                s.previous_secret_until_ms = Some(now.saturating_add(overlap));
            } else {
                s.previous_secret = None;
                s.previous_secret_until_ms = None;
            }
            s.updated_at_ms = now;
            Ok::<_, ApiError>(Some(s))
        })
        .await?;
    Ok(Json(
        subscription_view(&state, rotated, Secrets::Reveal).await?,
    ))
}

/// What a deletion removed.
#[derive(Debug, Serialize, ToSchema)]
struct DeletedSubscription {
    deleted: SubscriptionId,
    deliveries_deleted: usize,
}

/// Deletes a subscription and its deliveries.
#[utoipa::path(delete, path = "/subscriptions/{id}", operation_id = "delete_subscription", tag = "subscriptions",
    params(("id" = u64, Path, description = "The subscription's id")),
    responses((status = 200, body = DeletedSubscription), Missing, Refusals))]
async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<DeletedSubscription>, ApiError> {
    let id = parse_subscription_id(&id)?;
    let deliveries_deleted = state.engine.delete_subscription(id).await?;
    Ok(Json(DeletedSubscription {
        deleted: id,
        deliveries_deleted,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_checked_sorted_and_deduplicated() {
        assert_eq!(check_statuses(vec![503, 409, 503]).unwrap(), vec![409, 503]);
        let error = check_statuses(vec![500, 600]).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("retryable_statuses[1]"));
        let error = check_statuses(vec![204]).unwrap_err();
        assert!(error.message.contains("2xx"), "{}", error.message);
    }

    #[test]
    fn reserved_and_malformed_headers_are_refused_by_name() {
        let headers = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert!(
            check_headers(&headers(&[
                ("X-Team", "billing"),
                ("Authorization", "Bearer t")
            ]))
            .is_ok()
        );
        for name in [
            "Host",
            "content-TYPE",
            "Webhook-Signature",
            "Connection",
            "tenax-attempt",
        ] {
            let error = check_headers(&headers(&[(name, "x")])).unwrap_err();
            assert_eq!(error.field, Some(format!("headers.{name}")));
        }
        let error = check_headers(&headers(&[("Bad Name", "x")])).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("headers.Bad Name"));
        let error = check_headers(&headers(&[("X-A", "line\nbreak")])).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("headers.X-A"));
        let error = check_headers(&headers(&[("X-A", "1"), ("x-a", "2")])).unwrap_err();
        assert!(error.message.contains("twice"), "{}", error.message);
        let many: BTreeMap<String, String> = (0..33)
            .map(|i| (format!("X-{i}"), "v".to_owned()))
            .collect();
        assert_eq!(
            check_headers(&many).unwrap_err().field.as_deref(),
            Some("headers")
        );
    }

    #[test]
    fn content_types_are_media_types() {
        assert!(check_content_type("content_type", "application/json".into()).is_ok());
        assert!(check_content_type("c", "text/plain; charset=utf-8".into()).is_ok());
        for bad in ["", "json", "application/", "a/b\r\nX: y"] {
            assert!(check_content_type("c", bad.into()).is_err(), "{bad:?}");
        }
    }
}
