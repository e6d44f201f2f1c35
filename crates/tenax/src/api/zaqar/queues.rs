//! Queues: create (PUT), metadata (GET, JSON-patch PATCH), exists (HEAD), delete, list, stats,
//! purge.
//!
//! Invariants:
//! - A queue is created by PUT, or lazily by the first message or subscription posted to it:
//!   either stores its `QueueConfig` (with its metadata, `{}` when none was given). It is listed
//!   while it has a stored config or any job. PUT of a created queue answers 204 and changes
//!   nothing (as Zaqar); metadata changes only through PATCH.
//! - A queue that was never created still answers GET (its defaults), stats (zeros) and
//!   listings (empty), as lazily created queues do in Zaqar.
//! - Deleting a queue deletes its settings and messages; its subscriptions stay (as Zaqar).

use std::time::UNIX_EPOCH;

use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value, json};
use tenax_core::auth::Principal;
use tenax_core::engine::ChangeError;
use tenax_core::model::{
    JobFilter, Order, Page, QueueConfig, Selection, subscription::is_internal_queue,
};

use super::error::ZaqarError;
use super::limits::{Limits, within};
use super::metadata::{self, with_defaults};
use super::names::{Kind, QueueRef};
use super::patch::{self, MEDIA_TYPE};
use super::request::{Ctx, Params, Query, json_body};
use super::subscriptions::purge_subscriptions;
use super::views::{self, Link, seconds};
use crate::api::AppState;

/// Zaqar's page size of queue listings when none is asked for.
const DEFAULT_QUEUES_PER_PAGE: usize = 10;

/// The stored config of a queue, if it was created.
pub async fn config_of(
    state: &AppState,
    queue: &QueueRef,
) -> Result<Option<QueueConfig>, ZaqarError> {
    Ok(state.engine.queue(&queue.tenax).await?)
}

/// Why a queue was not created: it was already.
struct Existed;

/// Creates a queue with `metadata` unless it exists, atomically; true if it was created.
async fn create_with(
    state: &AppState,
    queue: &QueueRef,
    metadata: &Map<String, Value>,
) -> Result<bool, ZaqarError> {
    let result = state
        .engine
        .update_queue(&queue.tenax, |current| {
            if current.is_some() {
                return Err(Ok(Existed));
            }
            let mut config = QueueConfig::default();
            metadata::install(&mut config, &queue.project, metadata.clone()).map_err(Err)?;
            Ok(Some(config))
        })
        .await;
    match result {
        Ok(_) => Ok(true),
        Err(ChangeError::Refused(Ok(Existed))) => Ok(false),
        Err(ChangeError::Refused(Err(rule))) => Err(ZaqarError::api(rule)),
        Err(ChangeError::Failed(error)) => Err(error.into()),
    }
}

/// Creates the queue (with empty metadata) if it was never created.
pub async fn ensure_created(state: &AppState, queue: &QueueRef) -> Result<(), ZaqarError> {
    create_with(state, queue, &Map::new()).await.map(drop)
}

/// `PUT /v2/queues/{name}`: 201 when created, 204 when it existed (its metadata unchanged).
pub async fn create(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let limits = &state.zaqar_limits;
    if metadata_too_large(&body, limits) {
        return Err(ZaqarError::api(format!(
            "Queue metadata is too large. Max size: {}",
            limits.max_queue_metadata
        )));
    }
    let metadata = if body.is_empty() {
        Map::new()
    } else {
        match json_body(&body)? {
            Value::Object(map) => map,
            _ => return Err(ZaqarError::document_type()),
        }
    };
    metadata::check(&metadata, limits).map_err(ZaqarError::api)?;
    let location = queue.href();
    let status = if create_with(&state, &queue, &metadata).await? {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    };
    Ok(views::empty(status, Some(&location)))
}

/// `GET /v2/queues/{name}`: the metadata with the reserved keys' defaults.
pub async fn show(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let config = config_of(&state, &queue).await?;
    // A queue that was never created shows its defaults (it is created lazily); a topic is
    // not found (Zaqar's topic driver).
    if kind == Kind::Topic && config.is_none() {
        return Err(ZaqarError::not_found(queue.missing()));
    }
    let shown = shown(kind, config.as_ref(), &state.zaqar_limits);
    Ok(views::json(StatusCode::OK, &shown))
}

/// A queue's or topic's metadata with its kind's defaults, as Zaqar shows it.
fn shown(kind: Kind, config: Option<&QueueConfig>, limits: &Limits) -> Map<String, Value> {
    let metadata = config.and_then(|c| c.metadata.as_ref());
    match kind {
        Kind::Queue => with_defaults(metadata, limits),
        Kind::Topic => metadata::with_topic_defaults(metadata, limits),
    }
}

/// Whether a metadata document is over Zaqar's `max_queue_metadata`.
fn metadata_too_large(body: &[u8], limits: &Limits) -> bool {
    u64::try_from(body.len()).map_or(true, |len| len > limits.max_queue_metadata)
}

/// `HEAD /v2/queues/{name}`: 204 if the queue exists, 404 if not (Zaqar v2 has no HEAD here;
/// its client's `exists()` asks with one).
pub async fn exists(
    ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    let exists = config_of(&state, &queue).await?.is_some() || {
        let counts = state.engine.queue_counts(&queue.tenax).await?;
        [
            counts.scheduled,
            counts.ready,
            counts.in_flight,
            counts.completed,
            counts.dead,
            counts.cancelled,
        ]
        .iter()
        .any(|n| *n > 0)
    };
    if exists {
        Ok(views::empty(StatusCode::NO_CONTENT, None))
    } else {
        Err(ZaqarError::not_found(queue.missing()))
    }
}

/// `DELETE /v2/queues/{name}`: always 204.
pub async fn delete(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    state.engine.delete_queue(&queue.tenax).await?;
    Ok(views::empty(StatusCode::NO_CONTENT, None))
}

/// `PATCH /v2/queues/{name}` with a JSON patch of `/metadata/<key>`: 200 with the metadata.
pub async fn update(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let limits = state.zaqar_limits;
    if metadata_too_large(&body, &limits) {
        return Err(ZaqarError::body(format!(
            "Queue metadata is too large. Max size: {}",
            limits.max_queue_metadata
        )));
    }
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if content_type != Some(MEDIA_TYPE) {
        return Err(ZaqarError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "415 Unsupported Media Type",
            format!("Accepted media type for PATCH: {{'Accept-Patch': '{MEDIA_TYPE}'}}."),
        )
        .with_header(
            axum::http::HeaderName::from_static("accept-patch"),
            HeaderValue::from_static(MEDIA_TYPE),
        ));
    }
    if body.is_empty() {
        return Err(ZaqarError::body(
            "PATCH body could not be empty for update.",
        ));
    }
    let changes = patch::parse(json_body(&body)?)?;
    // The patch applies to the metadata as stored at that moment: atomic, so two patches of
    // different keys both hold.
    let config = state
        .engine
        .update_queue(&queue.tenax, |current| {
            let Some(current) = current else {
                return Err(ZaqarError::not_found(queue.missing()));
            };
            let mut config = current.clone();
            let mut metadata = config.metadata.clone().unwrap_or_default();
            patch::apply(&mut metadata, changes.clone())?;
            metadata::check(&metadata, &limits).map_err(ZaqarError::body)?;
            metadata::install(&mut config, &queue.project, metadata).map_err(ZaqarError::body)?;
            Ok(Some(config))
        })
        .await?;
    let shown = shown(kind, config.as_ref(), &limits);
    Ok(views::json(StatusCode::OK, &shown))
}

#[derive(Debug, Serialize)]
struct QueueItem {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Map<String, Value>>,
    href: String,
}

/// `GET /v2/queues`: the project's queues by name, `limit` (1 to 20, default 10) after
/// `marker`; `detailed` adds metadata, `with_count` the number of the project's queues, `name`
/// keeps names containing it, and any other parameter keeps queues whose metadata has that
/// value.
pub async fn list(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    RawQuery(query): RawQuery,
) -> Result<Response, ZaqarError> {
    let params = Params::parse(query.as_deref());
    let marker = params.str("marker")?.map(str::to_owned);
    let limit = params.int("limit")?;
    let detailed = params.bool("detailed")?;
    let name = params.str("name")?.map(str::to_owned);
    // Zaqar's topic listing has no `with_count` (there it is a metadata filter).
    let with_count = match kind {
        Kind::Queue => params.bool("with_count")?,
        Kind::Topic => None,
    };
    let max = state.zaqar_limits.max_queues_per_page;
    if limit.is_some_and(|l| !within(l, max)) {
        return Err(ZaqarError::api(format!(
            "Limit must be at least 1 and no greater than {max}."
        )));
    }
    let filters = metadata_filters(&params, kind);
    let all: Vec<(String, QueueConfig)> = state
        .engine
        .queues()
        .await?
        .into_iter()
        .filter(|(tenax, _)| !is_internal_queue(tenax) && principal.admits_queue(tenax))
        .filter_map(|(tenax, config)| {
            kind.zaqar_name(&ctx.project, &tenax)
                .map(|name| (name.to_owned(), config))
        })
        .collect();
    let total = all.len();
    let page_size = limit
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_QUEUES_PER_PAGE);
    let queues: Vec<QueueItem> = all
        .into_iter()
        .filter(|(queue, _)| marker.as_ref().is_none_or(|m| queue > m))
        .filter(|(queue, _)| {
            name.as_ref()
                .is_none_or(|n| n.is_empty() || queue.contains(n.as_str()))
        })
        .filter(|(_, config)| {
            filters.iter().all(|(key, want)| {
                config
                    .metadata
                    .as_ref()
                    .and_then(|m| m.get(key))
                    .is_some_and(|have| have == want)
            })
        })
        .take(page_size)
        .map(|(queue, config)| QueueItem {
            href: format!("/v2/{}/{queue}", kind.collection()),
            metadata: detailed
                .unwrap_or(false)
                .then(|| shown(kind, Some(&config), &state.zaqar_limits)),
            name: queue,
        })
        .collect();
    let links = match queues.last() {
        Some(last) => {
            let mut next = Query::default();
            if let Some(marker) = &marker {
                next.set("marker", marker);
            }
            if let Some(limit) = limit {
                next.set("limit", limit);
            }
            if let Some(detailed) = detailed {
                next.set_bool("detailed", detailed);
            }
            if let Some(name) = &name {
                next.set("name", name);
            }
            if let Some(with_count) = with_count {
                next.set_bool("with_count", with_count);
            }
            next.set("marker", &last.name);
            vec![Link::next(format!(
                "/v2/{}{}",
                kind.collection(),
                next.render()
            ))]
        }
        None => Vec::new(),
    };
    let mut listing = json!({ (kind.collection()): queues, "links": links });
    if with_count == Some(true) && total > 0 {
        listing["count"] = json!(total);
    }
    Ok(views::json(StatusCode::OK, &listing))
}

/// Parameters other than the listing's own filter on metadata: `?team=ops` keeps queues whose
/// metadata has `"team": "ops"` (a value that reads as an integer is compared as one).
fn metadata_filters(params: &Params, kind: Kind) -> Vec<(String, Value)> {
    const OWN: [&str; 5] = ["marker", "limit", "detailed", "name", "with_count"];
    let own = match kind {
        Kind::Queue => &OWN[..],
        Kind::Topic => &OWN[..4],
    };
    let mut filters = Vec::new();
    for name in params.names().filter(|n| !own.contains(n)) {
        let values = params.list(name).unwrap_or_default();
        let value = match values.as_slice() {
            [one] => one
                .parse::<i64>()
                .map_or_else(|_| Value::String(one.clone()), |n| json!(n)),
            many => json!(many),
        };
        filters.push((name.to_owned(), value));
    }
    filters
}

/// `GET /v2/queues/{name}/stats`: free (ready or delayed), claimed and total messages, with the
/// oldest and newest when there are any.
pub async fn stats(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let now = state.engine.now_ms();
    let live = JobFilter {
        live_at_ms: Some(now),
        ..JobFilter::queue(queue.tenax.clone())
    };
    let claimed = state
        .engine
        .count_jobs(&JobFilter {
            claimed_at: Some((true, now)),
            ..live.clone()
        })
        .await?;
    let free = state
        .engine
        .count_jobs(&JobFilter {
            claimed_at: Some((false, now)),
            ..live.clone()
        })
        .await?;
    let mut messages = json!({
        "claimed": claimed,
        "free": free,
        "total": claimed + free,
    });
    for (end, order) in [("oldest", Order::Ascending), ("newest", Order::Descending)] {
        let page = Page {
            after: None,
            limit: 1,
            order,
        };
        if let Some(job) = state.engine.jobs(&live, page).await?.pop() {
            let created = job.spec.created_at_ms;
            messages[end] = json!({
                "age": seconds(created, now),
                "created": iso_seconds(created),
                "href": queue.message_href(job.id, None),
            });
        }
    }
    Ok(views::json(
        StatusCode::OK,
        &json!({ "messages": messages }),
    ))
}

/// `2026-11-21T12:19:12Z`, as Zaqar writes `created`.
fn iso_seconds(ms: u64) -> String {
    let time = UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(time).to_string()
}

/// `POST /v2/queues/{name}/purge`: deletes the queue's messages, subscriptions, or both
/// (`{"resource_types": [...]}`, both by default). The queue itself stays.
pub async fn purge(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let (messages, subscriptions) = if body.is_empty() {
        (true, true)
    } else {
        resource_types(&json_body(&body)?)?
    };
    if messages {
        let selection = Selection {
            ids: None,
            filter: JobFilter::queue(queue.tenax.clone()),
        };
        state.engine.delete_jobs(&selection).await?;
    }
    if subscriptions {
        purge_subscriptions(&state, &queue).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Which of messages and subscriptions a purge document names.
fn resource_types(document: &Value) -> Result<(bool, bool), ZaqarError> {
    let Some(types) = document.get("resource_types") else {
        return Err(ZaqarError::api(
            "Post body must contain key \"resource_types\".",
        ));
    };
    let subset =
        || ZaqarError::api("Resource types must be a sub set of {'subscriptions', 'messages'}.");
    let Value::Array(types) = types else {
        return Err(subset());
    };
    let mut wanted = (false, false);
    for kind in types {
        match kind.as_str() {
            Some("messages") => wanted.0 = true,
            Some("subscriptions") => wanted.1 = true,
            _ => return Err(subset()),
        }
    }
    Ok(wanted)
}
