//! Messages: post a batch, list, get one or several, delete one or several, pop.
//!
//! A message is a job of kind [`MESSAGE_KIND`] in the queue's Tenax queue: its payload is the
//! message body verbatim, its origin the poster's `Client-ID`, its expiry `now + ttl` and its
//! run time `now + delay` (as in Zaqar, `delay` is read only on a queue with a
//! `_default_message_delay`, which is also its default). Checks follow Zaqar's order and texts (`messages.py`,
//! `validation.py`); see `docs/zaqar.md` for where Tenax differs.
//!
//! Invariants:
//! - Only live messages are ever shown or counted ([`JobPeek::is_live`]); deleting a message
//!   deletes its job whatever its state, so a claimed message deleted with its claim is
//!   finished.
//! - A claimed message is deleted only with its claim's id (403 otherwise), judged and done in
//!   one step by the engine; a message that is not in the caller's queue is never touched (204,
//!   as for a missing one).
//!
//! [`JobPeek::is_live`]: tenax_core::model::JobPeek::is_live

use std::collections::HashMap;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use tenax_core::engine::{Enqueue, MessageDelete};
use tenax_core::model::{ClaimId, Job, JobFilter, JobId, NewJob, OnDuplicate, Page, Selection};

use super::error::ZaqarError;
use super::limits::{Limits, fits, within};
use super::metadata::{MAX_MESSAGE_DELAY, MIN_MESSAGE_TTL, MessageSettings};
use super::names::{Kind, QueueRef, parse_claim_id, parse_message_id, python_list};
use super::queues::{config_of, ensure_created};
use super::request::{Ctx, Params, Query};
use super::views::{self, Facts, Link, MessageView, Messages, PoppedView, seconds, ttl};
use crate::api::AppState;

/// The job kind of every Zaqar message.
pub const MESSAGE_KIND: &str = "zaqar.message";

/// Zaqar's page size when none is asked for.
const DEFAULT_MESSAGES_PER_PAGE: usize = 10;

fn limit_error(limits: &Limits) -> ZaqarError {
    ZaqarError::api(format!(
        "Limit must be at least 1 and may not be greater than {}.",
        limits.max_messages_per_page
    ))
}

/// A message of a post, checked.
#[derive(Debug)]
pub struct Posted<'a> {
    pub ttl_s: u64,
    pub delay_s: u64,
    pub body: &'a RawValue,
}

/// An integer written in JSON (not a float, not a boolean); past `i64` it saturates.
fn raw_int(raw: &RawValue) -> Option<i64> {
    let text = raw.get();
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.parse::<i64>().unwrap_or(i64::MAX);
    Some(if text.starts_with('-') {
        -magnitude
    } else {
        magnitude
    })
}

/// Reads a post's messages in Zaqar's order: the document, `messages`, then each message's
/// `ttl`, `body` and `delay`, then the ranges.
pub fn read_post<'a>(
    body: &'a [u8],
    settings: MessageSettings,
    limits: &Limits,
) -> Result<Vec<Posted<'a>>, ZaqarError> {
    let max_ttl = limits.max_message_ttl;
    let top: &RawValue = serde_json::from_slice(body).map_err(|_| ZaqarError::unparsable())?;
    let document: HashMap<String, &RawValue> = match top.get().as_bytes().first() {
        Some(b'{') => serde_json::from_str(top.get()).map_err(|_| ZaqarError::unparsable())?,
        Some(b'[') => HashMap::new(),
        _ => return Err(ZaqarError::unparsable()),
    };
    let Some(messages) = document.get("messages") else {
        return Err(ZaqarError::api(
            "No messages were found in the request body.",
        ));
    };
    if !messages.get().starts_with('[') {
        return Err(ZaqarError::document_type());
    }
    let items: Vec<&RawValue> =
        serde_json::from_str(messages.get()).map_err(|_| ZaqarError::document_type())?;
    let mut posted = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        if !item.get().starts_with('{') {
            return Err(ZaqarError::document_type());
        }
        let fields: HashMap<String, &RawValue> =
            serde_json::from_str(item.get()).map_err(|_| ZaqarError::document_type())?;
        let int = |name: &str, default: u64| -> Result<i64, ZaqarError> {
            match fields.get(name) {
                None => Ok(i64::try_from(default).unwrap_or(i64::MAX)),
                Some(raw) => raw_int(raw).ok_or_else(|| {
                    ZaqarError::body(format!("The value of the \"{name}\" field must be a int."))
                }),
            }
        };
        let ttl = int("ttl", settings.default_ttl_s)?;
        let Some(body) = fields.get("body") else {
            return Err(ZaqarError::body("Missing \"body\" field."));
        };
        tenax_core::model::payload::check_text(body.get())
            .map_err(|rule| ZaqarError::body(format!("messages[{i}].body {rule}.")))?;
        // As Zaqar: `delay` is read only on a queue with a default delay.
        let delay = match settings.default_delay_s {
            Some(default) => int("delay", default)?,
            None => 0,
        };
        posted.push((ttl, delay, *body));
    }
    if posted.is_empty() {
        return Err(ZaqarError::api("No messages to enqueu."));
    }
    posted
        .into_iter()
        .map(|(ttl, delay, body)| {
            let ttl_s = u64::try_from(ttl)
                .ok()
                .filter(|t| (MIN_MESSAGE_TTL..=max_ttl).contains(t))
                .ok_or_else(|| {
                    ZaqarError::api(format!(
                        "The TTL for a message may not exceed {max_ttl} seconds, and \
                         must be at least {MIN_MESSAGE_TTL} seconds long."
                    ))
                })?;
            let delay_s = u64::try_from(delay)
                .ok()
                .filter(|d| *d <= MAX_MESSAGE_DELAY)
                .ok_or_else(|| {
                    ZaqarError::api(format!(
                        "The Delay TTL for a message may not exceed {MAX_MESSAGE_DELAY} \
                         seconds,and must be at least 0 seconds long."
                    ))
                })?;
            Ok(Posted {
                ttl_s,
                delay_s,
                body,
            })
        })
        .collect()
}

#[derive(Debug, Serialize)]
struct Resources {
    resources: Vec<String>,
}

/// `POST /v2/queues/{name}/messages`: 201 with the new messages' hrefs.
pub async fn post(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let config = config_of(&state, &queue).await?;
    let settings = MessageSettings::of(config.as_ref().and_then(|c| c.metadata.as_ref()));
    let size = u64::try_from(body.len()).unwrap_or(u64::MAX);
    let config_max = state.zaqar_limits.max_messages_post_size;
    if let Some(queue_max) = settings.max_post_bytes {
        let max = queue_max.min(config_max);
        if size > max {
            return Err(ZaqarError::api(format!(
                "Message collection size is too large. The max size for current queue is {max}. \
                 It is calculated by max size = min(max_messages_post_size_config: \
                 {config_max}, max_messages_post_size_queue: {queue_max})."
            )));
        }
    }
    if size > config_max {
        return Err(ZaqarError::api(format!(
            "Message collection size is too large. Max size {config_max}"
        )));
    }
    let posted = read_post(&body, settings, &state.zaqar_limits)?;
    if config.is_none() {
        ensure_created(&state, &queue).await?;
    }
    let now = state.engine.now_ms();
    let inserts: Vec<Enqueue> = posted
        .into_iter()
        .map(|message| {
            Enqueue::from(NewJob {
                queue: queue.tenax.clone(),
                kind: MESSAGE_KIND.to_owned(),
                payload: message.body.to_owned(),
                priority: 0,
                run_at_ms: now.saturating_add(message.delay_s.saturating_mul(1_000)),
                policy: None,
                unique_key: None,
                created_at_ms: now,
                expires_at_ms: Some(now.saturating_add(message.ttl_s.saturating_mul(1_000))),
                origin: Some(ctx.client.clone()),
                parent: None,
                traceparent: None,
                payload_sealed: false,
                after: Vec::new(),
                on_parent_dead: Default::default(),
                batch: None,
            })
        })
        .collect();
    let enqueued = state.engine.enqueue(inserts, OnDuplicate::Refuse).await?;
    let base = queue.messages_href();
    let ids: Vec<String> = enqueued.iter().map(|e| e.id.to_string()).collect();
    let location = format!("{base}?ids={}", ids.join(","));
    let resources = ids.iter().map(|id| format!("{base}/{id}")).collect();
    let response = views::json(StatusCode::CREATED, &Resources { resources });
    Ok(views::located(response, &location))
}

#[derive(Debug, Serialize)]
struct Listing<'a> {
    messages: Vec<MessageView<'a>>,
    links: Vec<Link>,
}

/// `GET /v2/queues/{name}/messages`: a page of messages (`limit` 1 to 20, default 10, after
/// `marker`), without the caller's own unless `echo`, without claimed ones unless
/// `include_claimed`; or, with `ids`, those messages.
pub async fn list(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ZaqarError> {
    let params = Params::parse(query.as_deref());
    if let Some(ids) = params.list("ids") {
        return get_many(&state, kind.resolve(&ctx.project, &name)?, &ids).await;
    }
    let queue = kind.resolve(&ctx.project, &name)?;
    let marker = params.str("marker")?.map(str::to_owned);
    let limit = params.int("limit")?;
    let echo = params.bool("echo")?;
    let include_claimed = params.bool("include_claimed")?;
    let mut include_delayed = params.bool("include_delayed")?;
    if limit.is_some_and(|l| !within(l, state.zaqar_limits.max_messages_per_page)) {
        return Err(limit_error(&state.zaqar_limits));
    }
    let config = config_of(&state, &queue).await?;
    let settings = MessageSettings::of(config.as_ref().and_then(|c| c.metadata.as_ref()));
    // As Zaqar: a queue without a default delay lists delayed messages (and says so in links).
    if settings.default_delay_s.is_none() {
        include_delayed = Some(true);
    }
    let after = match &marker {
        Some(text) => match parse_message_id(text) {
            Some(id) => Some(id),
            None => return Ok(views::json(StatusCode::OK, &empty_listing())),
        },
        None => None,
    };
    let now = state.engine.now_ms();
    let page_size = limit
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_MESSAGES_PER_PAGE);
    let filter = JobFilter {
        live_at_ms: Some(now),
        not_scheduled: include_delayed != Some(true),
        claimed_at: (include_claimed != Some(true)).then_some((false, now)),
        not_origin: (echo != Some(true)).then(|| ctx.client.clone()),
        ..JobFilter::queue(queue.tenax.clone())
    };
    let page: Vec<(Job, Option<ClaimId>)> = state
        .engine
        .jobs(&filter, Page::after(after, page_size))
        .await?
        .into_iter()
        .map(|job| {
            let claim = claim_of(&job, now);
            (job, claim)
        })
        .collect();
    let Some((last, _)) = page.last() else {
        return Ok(views::json(StatusCode::OK, &empty_listing()));
    };
    let mut next = Query::default();
    if let Some(marker) = &marker {
        next.set("marker", marker);
    }
    if let Some(limit) = limit {
        next.set("limit", limit);
    }
    for (name, value) in [
        ("echo", echo),
        ("include_claimed", include_claimed),
        ("include_delayed", include_delayed),
    ] {
        if let Some(value) = value {
            next.set_bool(name, value);
        }
    }
    next.set("marker", last.id);
    let links = vec![Link::next(format!(
        "{}{}",
        queue.messages_href(),
        next.render()
    ))];
    let messages = page
        .iter()
        .map(|(job, claim)| MessageView::new(&queue, facts(job, *claim), now))
        .collect();
    Ok(views::json(StatusCode::OK, &Listing { messages, links }))
}

fn empty_listing() -> Listing<'static> {
    Listing {
        messages: Vec::new(),
        links: Vec::new(),
    }
}

/// The claim holding `job` at `now_ms`, if any.
fn claim_of(job: &Job, now_ms: u64) -> Option<ClaimId> {
    job.held
        .filter(|held| held.lease_expires_at_ms > now_ms)
        .and_then(|held| held.claim)
}

fn facts(job: &Job, claim: Option<ClaimId>) -> Facts<'_> {
    Facts {
        id: job.id,
        created_at_ms: job.spec.created_at_ms,
        expires_at_ms: job.spec.expires_at_ms,
        claim,
        body: &job.spec.payload,
    }
}

/// The live messages of `queue` among `ids`, in id order, each with its claim.
async fn live_messages(
    state: &AppState,
    queue: &QueueRef,
    ids: &[JobId],
) -> Result<Vec<(Job, Option<ClaimId>)>, ZaqarError> {
    let now = state.engine.now_ms();
    let peeks = state.engine.peek(ids).await?;
    let mut found: Vec<JobId> = ids
        .iter()
        .zip(peeks)
        .filter(|(_, peek)| {
            peek.as_ref()
                .is_some_and(|p| *p.queue == *queue.tenax && p.is_live(now))
        })
        .map(|(id, _)| *id)
        .collect();
    found.sort_unstable();
    found.dedup();
    let mut jobs = Vec::with_capacity(found.len());
    for id in found {
        if let Some(job) = state.engine.job(id).await? {
            let claim = claim_of(&job, now);
            jobs.push((job, claim));
        }
    }
    Ok(jobs)
}

/// `GET /v2/queues/{name}/messages?ids=a,b`: those of the messages that exist (404 if none).
async fn get_many(
    state: &AppState,
    queue: QueueRef,
    ids: &[String],
) -> Result<Response, ZaqarError> {
    if !fits(ids.len(), state.zaqar_limits.max_messages_per_page) {
        return Err(limit_error(&state.zaqar_limits));
    }
    let parsed: Vec<JobId> = ids.iter().filter_map(|id| parse_message_id(id)).collect();
    let jobs = live_messages(state, &queue, &parsed).await?;
    if jobs.is_empty() {
        return Err(ZaqarError::not_found(format!(
            "No messages with IDs: {} found in the queue {} for project {}.",
            python_list(ids),
            queue.name,
            queue.project
        )));
    }
    let now = state.engine.now_ms();
    let messages: Vec<MessageView<'_>> = jobs
        .iter()
        .map(|(job, claim)| MessageView::new(&queue, facts(job, *claim), now))
        .collect();
    Ok(views::json(StatusCode::OK, &Messages { messages }))
}

/// `GET /v2/queues/{name}/messages/{id}`.
pub async fn get(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let parsed: Vec<JobId> = parse_message_id(&id).into_iter().collect();
    let jobs = live_messages(&state, &queue, &parsed).await?;
    let Some((job, claim)) = jobs.first() else {
        return Err(ZaqarError::not_found(format!(
            "Message {id} does not exist in queue {} for project {}",
            queue.name, queue.project
        )));
    };
    let now = state.engine.now_ms();
    let view = MessageView::new(&queue, facts(job, *claim), now);
    Ok(views::json(StatusCode::OK, &view))
}

/// `DELETE /v2/queues/{name}/messages/{id}[?claim_id=]`: 204, also for a missing message.
pub async fn delete(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let params = Params::parse(query.as_deref());
    let unable = |status: StatusCode, description: &str| {
        ZaqarError::new(status, "Unable to delete", description)
    };
    let claim_given = match params.str("claim_id")? {
        None => None,
        Some(text) => Some(parse_claim_id(text).ok_or_else(|| {
            unable(
                StatusCode::BAD_REQUEST,
                "The specified claim does not exist or has expired.",
            )
        })?),
    };
    let Some(id) = parse_message_id(&id) else {
        return Ok(views::empty(StatusCode::NO_CONTENT, None));
    };
    // Judged and deleted in one step: a claim that ends and is taken over meanwhile cannot let
    // its old holder delete the new holder's message.
    match state
        .engine
        .delete_held(&queue.tenax, id, claim_given)
        .await?
    {
        MessageDelete::Deleted | MessageDelete::Missing => {
            Ok(views::empty(StatusCode::NO_CONTENT, None))
        }
        MessageDelete::NotClaimed => Err(unable(
            StatusCode::BAD_REQUEST,
            "A claim was specified, but the message is not currently claimed.",
        )),
        MessageDelete::Claimed => Err(unable(
            StatusCode::FORBIDDEN,
            "This message is claimed; it cannot be deleted without a valid claim ID.",
        )),
    }
}

/// Deletes jobs of `queue` among `ids` (whatever their state).
async fn delete_ids(
    state: &AppState,
    queue: &QueueRef,
    ids: Vec<JobId>,
) -> Result<Vec<JobId>, ZaqarError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let selection = Selection {
        ids: Some(ids),
        filter: JobFilter::queue(queue.tenax.clone()),
    };
    Ok(state.engine.delete_jobs(&selection).await?)
}

/// `DELETE /v2/queues/{name}/messages?ids=a,b` (204) or `?pop=n` (200 with the messages).
pub async fn delete_many(
    ctx: Ctx,
    kind: Kind,
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ZaqarError> {
    let queue = kind.resolve(&ctx.project, &name)?;
    let params = Params::parse(query.as_deref());
    let ids = params.list("ids");
    let pop = params.int("pop")?;
    match (&ids, pop) {
        (Some(_), Some(_)) => {
            return Err(ZaqarError::api(
                "pop and id params cannot be present together in the delete request.",
            ));
        }
        (None, None) => {
            return Err(ZaqarError::api(
                "The request should have either \"ids\" or \"pop\" parameter in the request, to \
                 be able to delete.",
            ));
        }
        _ => {}
    }
    if let Some(pop) = pop {
        let max = state.zaqar_limits.max_messages_per_claim_or_pop;
        if !within(pop, max) {
            return Err(ZaqarError::api(format!(
                "Pop value must be at least 1 and may not be greater than {max}."
            )));
        }
        return pop_messages(&state, &queue, usize::try_from(pop).unwrap_or(1)).await;
    }
    let ids = ids.unwrap_or_default();
    let max = state.zaqar_limits.max_messages_per_page;
    if !fits(ids.len(), max) {
        return Err(ZaqarError::api(format!(
            "ids parameter should have at least 1 and not greater than {max} values."
        )));
    }
    let parsed = ids.iter().filter_map(|id| parse_message_id(id)).collect();
    delete_ids(&state, &queue, parsed).await?;
    Ok(views::empty(StatusCode::NO_CONTENT, None))
}

/// Pop: takes up to `count` ready messages and deletes them, atomically; answers them.
async fn pop_messages(
    state: &AppState,
    queue: &QueueRef,
    count: usize,
) -> Result<Response, ZaqarError> {
    let popped = state.engine.pop(&queue.tenax, count).await?;
    let now = state.engine.now_ms();
    let messages: Vec<PoppedView<'_>> = popped
        .iter()
        .map(|job| PoppedView {
            id: job.id.to_string(),
            age: seconds(job.spec.created_at_ms, now),
            ttl: ttl(job.spec.created_at_ms, job.spec.expires_at_ms),
            body: &job.spec.payload,
            claim_count: job.state.failures,
            claim_id: None,
        })
        .collect();
    Ok(views::json(StatusCode::OK, &Messages { messages }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> MessageSettings {
        MessageSettings {
            default_ttl_s: 3_600,
            explicit_ttl_s: None,
            max_post_bytes: None,
            default_delay_s: None,
        }
    }

    fn error(body: &str) -> String {
        match read_post(body.as_bytes(), settings(), &Limits::default()) {
            Ok(_) => panic!("{body} was accepted"),
            Err(e) => e.description.unwrap_or_default(),
        }
    }

    #[test]
    fn posts_are_read_in_zaqars_order() {
        let posted = read_post(
            br#"{"messages": [{"body": {"a": [1, 2]}}, {"ttl": 60, "delay": 5, "body": null}]}"#,
            MessageSettings {
                default_delay_s: Some(30),
                ..settings()
            },
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(
            (posted[0].ttl_s, posted[0].delay_s, posted[0].body.get()),
            (3_600, 30, r#"{"a": [1, 2]}"#)
        );
        assert_eq!((posted[1].ttl_s, posted[1].delay_s), (60, 5));
        assert_eq!(error("{bad"), "Request body could not be parsed.");
        assert_eq!(error("3"), "Request body could not be parsed.");
        assert_eq!(
            error(r#"[{"body": 1}]"#),
            "No messages were found in the request body."
        );
        assert_eq!(error(r#"{"messages": []}"#), "No messages to enqueu.");
        assert_eq!(
            error(r#"{"messages": {"body": 1}}"#),
            "Document type not supported."
        );
        assert_eq!(
            error(r#"{"messages": [{"ttl": "60", "body": 1}]}"#),
            "The value of the \"ttl\" field must be a int."
        );
        assert_eq!(
            error(r#"{"messages": [{"ttl": 60.0, "body": 1}]}"#),
            "The value of the \"ttl\" field must be a int."
        );
        assert_eq!(
            error(r#"{"messages": [{"ttl": 60}]}"#),
            "Missing \"body\" field."
        );
        assert!(error(r#"{"messages": [{"ttl": 59, "body": 1}]}"#).starts_with("The TTL"));
        // Without a queue default delay, `delay` is not read at all.
        let ignored = read_post(
            br#"{"messages": [{"delay": 901, "body": 1}]}"#,
            settings(),
            &Limits::default(),
        );
        assert_eq!(ignored.unwrap()[0].delay_s, 0);
        let delayed = MessageSettings {
            default_delay_s: Some(1),
            ..settings()
        };
        let refused = read_post(
            br#"{"messages": [{"delay": 901, "body": 1}]}"#,
            delayed,
            &Limits::default(),
        );
        assert!(refused.is_err_and(|e| e.description.unwrap().starts_with("The Delay TTL")));
    }
}
