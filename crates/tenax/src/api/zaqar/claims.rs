//! Claims: create (`ttl`, `grace`, `limit`), get, update (renew), delete (release).
//!
//! A claim is an engine claim (a group lease): its messages are leased for `ttl` seconds under
//! one id and kept alive at least `ttl + grace` seconds. Zaqar's view of a claim (its ttl and
//! when it was last renewed) lives in a [`ClaimBook`] of the server, in memory, like the leases
//! themselves: after a restart every claim is gone and its messages are free again.
//!
//! Invariants:
//! - A claim exists for its queue while the book knows it for that queue and it still holds a
//!   live message whose lease has not ended; otherwise it is 404 (and DELETE is a no-op 204).
//! - Deleting a claim ends it as an expiry would: each message counts it as one claim, so
//!   `_max_claim_count` counts released claims as well as expired ones.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

use super::error::ZaqarError;
use super::names::{QueueRef, parse_claim_id};
use super::request::{Ctx, Params, json_body, json_int};
use super::views::{self, Facts, MessageView, Messages, current_claim, is_live, seconds};
use crate::api::AppState;
use crate::clock::UnixMs;
use crate::model::{Job, JobId};

/// Zaqar's claim limits and defaults.
const MIN_CLAIM_TTL: i64 = 60;
const MAX_CLAIM_TTL: i64 = 43_200;
const MIN_CLAIM_GRACE: i64 = 60;
const MAX_CLAIM_GRACE: i64 = 43_200;
const DEFAULT_CLAIM_TTL: i64 = 300;
const DEFAULT_CLAIM_GRACE: i64 = 60;
const MAX_MESSAGES_PER_CLAIM: i64 = 20;
const DEFAULT_MESSAGES_PER_CLAIM: usize = 10;

/// The book is swept of ended claims when it grows past this many entries.
const SWEEP_FROM: usize = 1_024;

/// What Zaqar shows of a claim, for each live claim of the server.
#[derive(Debug, Default)]
pub struct ClaimBook {
    inner: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    claims: HashMap<u64, ClaimMeta>,
    sweep_at: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ClaimMeta {
    /// The Tenax queue the claim took its messages from.
    queue: String,
    ttl_s: u64,
    grace_s: u64,
    renewed_at_ms: UnixMs,
}

impl ClaimMeta {
    /// After this time the claim and its grace are over: the entry is of no more use.
    fn over_at_ms(&self) -> UnixMs {
        self.renewed_at_ms.saturating_add(
            self.ttl_s
                .saturating_add(self.grace_s)
                .saturating_mul(1_000),
        )
    }
}

impl ClaimBook {
    fn record(&self, claim: u64, meta: ClaimMeta) {
        let mut book = self.inner.lock();
        let now = meta.renewed_at_ms;
        book.claims.insert(claim, meta);
        if book.claims.len() >= book.sweep_at.max(SWEEP_FROM) {
            book.claims.retain(|_, m| m.over_at_ms() > now);
            book.sweep_at = book.claims.len().saturating_mul(2);
        }
    }

    fn get(&self, claim: u64, queue: &str) -> Option<ClaimMeta> {
        let book = self.inner.lock();
        book.claims
            .get(&claim)
            .filter(|m| m.queue == queue)
            .cloned()
    }

    fn forget(&self, claim: u64) {
        self.inner.lock().claims.remove(&claim);
    }
}

fn missing(queue: &QueueRef, claim: &str) -> ZaqarError {
    ZaqarError::not_found(format!(
        "Claim {claim} does not exist in queue {} for project {}",
        queue.name, queue.project
    ))
}

/// `ttl` and `grace` of a claim document, with Zaqar's defaults and type checks.
fn read_claim_document(body: &[u8], empty_is_default: bool) -> Result<(i64, i64), ZaqarError> {
    if body.is_empty() && empty_is_default {
        return Ok((DEFAULT_CLAIM_TTL, DEFAULT_CLAIM_GRACE));
    }
    let Value::Object(document) = json_body(body)? else {
        return Err(ZaqarError::document_type());
    };
    let field = |name: &str, default: i64| match document.get(name) {
        None => Ok(default),
        Some(value) => json_int(value).ok_or_else(|| {
            ZaqarError::body(format!("The value of the \"{name}\" field must be a int."))
        }),
    };
    Ok((
        field("ttl", DEFAULT_CLAIM_TTL)?,
        field("grace", DEFAULT_CLAIM_GRACE)?,
    ))
}

fn check_ttl(ttl: i64) -> Result<u64, ZaqarError> {
    if (MIN_CLAIM_TTL..=MAX_CLAIM_TTL).contains(&ttl) {
        Ok(u64::try_from(ttl).unwrap_or(0))
    } else {
        Err(ZaqarError::api(format!(
            "The TTL for a claim may not exceed {MAX_CLAIM_TTL} seconds, and must be at least \
             {MIN_CLAIM_TTL} seconds long."
        )))
    }
}

fn check_grace(grace: i64) -> Result<u64, ZaqarError> {
    if (MIN_CLAIM_GRACE..=MAX_CLAIM_GRACE).contains(&grace) {
        Ok(u64::try_from(grace).unwrap_or(0))
    } else {
        Err(ZaqarError::api(format!(
            "The grace for a claim may not exceed {MAX_CLAIM_GRACE} seconds, and must be at \
             least {MIN_CLAIM_GRACE} seconds long."
        )))
    }
}

/// `POST /v2/queues/{name}/claims[?limit=]`: 201 with the claimed messages and the claim in
/// `Location`, or 204 when there was nothing to claim.
pub async fn create(
    ctx: Ctx,
    State(state): State<AppState>,
    Extension(book): Extension<std::sync::Arc<ClaimBook>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    let limit = Params::parse(query.as_deref()).int("limit")?;
    let (ttl, grace) = read_claim_document(&body, true)?;
    let ttl_s = check_ttl(ttl)?;
    if limit.is_some_and(|l| !(1..=MAX_MESSAGES_PER_CLAIM).contains(&l)) {
        return Err(ZaqarError::api(format!(
            "Limit must be at least 1 and may not be greater than {MAX_MESSAGES_PER_CLAIM}."
        )));
    }
    let grace_s = check_grace(grace)?;
    let count = limit
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_MESSAGES_PER_CLAIM);
    state.engine.expire_due_leases().await?;
    let now = state.engine.now_ms();
    let (claim, taken) = state
        .engine
        .claim(
            std::slice::from_ref(&queue.tenax),
            count,
            ttl_s.saturating_mul(1_000),
            grace_s.saturating_mul(1_000),
        )
        .await?;
    if taken.is_empty() {
        return Ok(views::empty(StatusCode::NO_CONTENT, None));
    }
    book.record(
        claim,
        ClaimMeta {
            queue: queue.tenax.clone(),
            ttl_s,
            grace_s,
            renewed_at_ms: now,
        },
    );
    let ids: Vec<JobId> = taken.iter().map(|t| t.id).collect();
    let peeks = state.engine.store.peek(&ids).await;
    let messages: Vec<MessageView<'_>> = taken
        .iter()
        .zip(peeks)
        .map(|(job, peek)| {
            let facts = Facts {
                id: job.id,
                created_at_ms: job.created_at_ms,
                expires_at_ms: peek.and_then(|p| p.expires_at_ms),
                claim: Some(claim),
                body: &job.payload,
            };
            MessageView::new(&queue, facts, now)
        })
        .collect();
    let response = views::json(StatusCode::CREATED, &Messages { messages });
    Ok(views::located(response, &queue.claim_href(claim)))
}

/// The claim `text` of `queue` with the live messages it holds, or 404.
async fn find(
    state: &AppState,
    book: &ClaimBook,
    queue: &QueueRef,
    text: &str,
) -> Result<(u64, ClaimMeta, Vec<JobId>), ZaqarError> {
    let claim = parse_claim_id(text).ok_or_else(|| missing(queue, text))?;
    let meta = book
        .get(claim, &queue.tenax)
        .ok_or_else(|| missing(queue, text))?;
    let now = state.engine.now_ms();
    let held: Vec<JobId> = state
        .engine
        .claimed(claim)
        .await
        .iter()
        .map(|c| c.id)
        .collect();
    let peeks = state.engine.store.peek(&held).await;
    let live: Vec<JobId> = held
        .into_iter()
        .zip(peeks)
        .filter(|(_, peek)| {
            peek.as_ref().is_some_and(|p| {
                *p.queue == *queue.tenax && is_live(p, now) && current_claim(p, now) == Some(claim)
            })
        })
        .map(|(id, _)| id)
        .collect();
    if live.is_empty() {
        book.forget(claim);
        return Err(missing(queue, text));
    }
    Ok((claim, meta, live))
}

#[derive(Debug, Serialize)]
struct ClaimView<'a> {
    age: u64,
    ttl: u64,
    messages: Vec<MessageView<'a>>,
    href: String,
}

/// `GET /v2/queues/{name}/claims/{claim}`: its age, ttl and messages.
pub async fn show(
    ctx: Ctx,
    State(state): State<AppState>,
    Extension(book): Extension<std::sync::Arc<ClaimBook>>,
    Path((name, text)): Path<(String, String)>,
) -> Result<Response, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    let (claim, meta, ids) = find(&state, &book, &queue, &text).await?;
    let peeks = state.engine.store.peek(&ids).await;
    let mut jobs: Vec<(Job, Option<u64>)> = Vec::with_capacity(ids.len());
    for (id, peek) in ids.into_iter().zip(peeks) {
        if let Some(mut job) = state.engine.store.get(id).await? {
            job.spec.expires_at_ms = peek.and_then(|p| p.expires_at_ms);
            jobs.push((job, Some(claim)));
        }
    }
    let now = state.engine.now_ms();
    let messages = jobs
        .iter()
        .map(|(job, claim)| {
            let facts = Facts {
                id: job.id,
                created_at_ms: job.spec.created_at_ms,
                expires_at_ms: job.spec.expires_at_ms,
                claim: *claim,
                body: &job.spec.payload,
            };
            MessageView::new(&queue, facts, now)
        })
        .collect();
    let view = ClaimView {
        age: seconds(meta.renewed_at_ms, now),
        ttl: meta.ttl_s,
        messages,
        href: queue.claim_href(claim),
    };
    Ok(views::json(StatusCode::OK, &view))
}

/// `PATCH /v2/queues/{name}/claims/{claim}` `{"ttl", "grace"}`: renews the claim (204).
pub async fn update(
    ctx: Ctx,
    State(state): State<AppState>,
    Extension(book): Extension<std::sync::Arc<ClaimBook>>,
    Path((name, text)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    let (ttl, grace) = read_claim_document(&body, false)?;
    let ttl_s = check_ttl(ttl)?;
    let grace_s = u64::try_from(grace.max(0)).unwrap_or(0);
    let (claim, meta, _) = find(&state, &book, &queue, &text).await?;
    let now = state.engine.now_ms();
    state
        .engine
        .renew_claim(
            claim,
            ttl_s.saturating_mul(1_000),
            grace_s.saturating_mul(1_000),
        )
        .await;
    book.record(
        claim,
        ClaimMeta {
            ttl_s,
            grace_s,
            renewed_at_ms: now,
            ..meta
        },
    );
    Ok(views::empty(StatusCode::NO_CONTENT, None))
}

/// `DELETE /v2/queues/{name}/claims/{claim}`: releases its messages (204, also when there is no
/// such claim).
pub async fn delete(
    ctx: Ctx,
    State(state): State<AppState>,
    Extension(book): Extension<std::sync::Arc<ClaimBook>>,
    Path((name, text)): Path<(String, String)>,
) -> Result<Response, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    if let Ok((claim, _, _)) = find(&state, &book, &queue, &text).await {
        state.engine.expire_claim(claim).await?;
        book.forget(claim);
    }
    Ok(views::empty(StatusCode::NO_CONTENT, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_documents_default_and_check_types() {
        assert_eq!(read_claim_document(b"", true).unwrap(), (300, 60));
        assert_eq!(
            read_claim_document(br#"{"ttl": 90}"#, true).unwrap(),
            (90, 60)
        );
        let error = read_claim_document(br#"{"ttl": null, "grace": null}"#, true).unwrap_err();
        assert_eq!(
            error.description.as_deref(),
            Some("The value of the \"ttl\" field must be a int.")
        );
        assert!(read_claim_document(b"", false).is_err());
        assert!(read_claim_document(b"[]", true).is_err());
        assert!(check_ttl(59).is_err() && check_ttl(43_201).is_err() && check_ttl(60).is_ok());
        assert!(check_grace(59).is_err() && check_grace(43_200).is_ok());
    }

    #[test]
    fn the_book_forgets_claims_that_are_over() {
        let book = ClaimBook::default();
        let meta = |at: u64| ClaimMeta {
            queue: "p:q".into(),
            ttl_s: 60,
            grace_s: 60,
            renewed_at_ms: at,
        };
        book.record(1, meta(0));
        assert!(book.get(1, "p:q").is_some());
        assert!(book.get(1, "p:other").is_none());
        for claim in 2..=1_100 {
            book.record(claim, meta(1_000_000));
        }
        assert!(book.get(1, "p:q").is_none(), "swept once over");
        assert!(book.get(2, "p:q").is_some());
    }
}
