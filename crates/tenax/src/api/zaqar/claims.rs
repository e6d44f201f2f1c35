//! Claims: create (`ttl`, `grace`, `limit`), get, update (renew), delete (release).
//!
//! A claim is an engine claim (a group lease with a record of its terms): its messages are
//! leased for `ttl` seconds under one random id and kept alive at least `ttl + grace` seconds.
//! The store keeps the claim, as it keeps leases (the embedded store in memory: after a restart
//! every claim is gone and its messages are free again).
//!
//! Invariants:
//! - A claim exists for its queue while its record names that queue and it still holds a live
//!   message whose lease has not ended ([`Engine::claim_of`]); otherwise it is 404 (and DELETE
//!   is a no-op 204).
//! - Deleting a claim ends it as an expiry would: each message counts it as one claim, so
//!   `_max_claim_count` counts released claims as well as expired ones.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use tenax_core::engine::{ClaimView as Live, NewClaim};
use tenax_core::model::Job;

use super::error::ZaqarError;
use super::limits::{Limits, MIN_CLAIM_GRACE, MIN_CLAIM_TTL, within};
use super::names::{QueueRef, parse_claim_id};
use super::request::{Ctx, Params, json_body, json_int};
use super::views::{self, Facts, MessageView, Messages, seconds};
use crate::api::AppState;

/// Zaqar's claim defaults; the limits are in [`Limits`].
const DEFAULT_CLAIM_TTL: i64 = 300;
const DEFAULT_CLAIM_GRACE: i64 = 60;
const DEFAULT_MESSAGES_PER_CLAIM: usize = 10;

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

fn check_ttl(ttl: i64, limits: &Limits) -> Result<u64, ZaqarError> {
    let max = limits.max_claim_ttl;
    match u64::try_from(ttl) {
        Ok(ttl) if (MIN_CLAIM_TTL..=max).contains(&ttl) => Ok(ttl),
        _ => Err(ZaqarError::api(format!(
            "The TTL for a claim may not exceed {max} seconds, and must be at least \
             {MIN_CLAIM_TTL} seconds long."
        ))),
    }
}

fn check_grace(grace: i64, limits: &Limits) -> Result<u64, ZaqarError> {
    let max = limits.max_claim_grace;
    match u64::try_from(grace) {
        Ok(grace) if (MIN_CLAIM_GRACE..=max).contains(&grace) => Ok(grace),
        _ => Err(ZaqarError::api(format!(
            "The grace for a claim may not exceed {max} seconds, and must be at \
             least {MIN_CLAIM_GRACE} seconds long."
        ))),
    }
}

/// `POST /v2/queues/{name}/claims[?limit=]`: 201 with the claimed messages and the claim in
/// `Location`, or 204 when there was nothing to claim.
pub async fn create(
    ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    let limit = Params::parse(query.as_deref()).int("limit")?;
    let (ttl, grace) = read_claim_document(&body, true)?;
    let limits = &state.zaqar_limits;
    let ttl_s = check_ttl(ttl, limits)?;
    let max = limits.max_messages_per_claim_or_pop;
    if limit.is_some_and(|l| !within(l, max)) {
        return Err(ZaqarError::api(format!(
            "Limit must be at least 1 and may not be greater than {max}."
        )));
    }
    let grace_s = check_grace(grace, limits)?;
    let count = limit
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_MESSAGES_PER_CLAIM);
    let (claim, taken) = state
        .engine
        .claim(NewClaim {
            queue: &queue.tenax,
            max: count,
            lease_ms: ttl_s.saturating_mul(1_000),
            grace_ms: grace_s.saturating_mul(1_000),
        })
        .await?;
    if taken.is_empty() {
        return Ok(views::empty(StatusCode::NO_CONTENT, None));
    }
    let now = state.engine.now_ms();
    let messages: Vec<MessageView<'_>> = taken
        .iter()
        .map(|job| {
            let facts = Facts {
                id: job.id,
                created_at_ms: job.created_at_ms,
                expires_at_ms: job.expires_at_ms,
                claim: Some(claim),
                body: &job.payload,
            };
            MessageView::new(&queue, facts, now)
        })
        .collect();
    let response = views::json(StatusCode::CREATED, &Messages { messages });
    Ok(views::located(response, &queue.claim_href(claim)))
}

/// The live claim `text` of `queue`, or the 404.
async fn find(state: &AppState, queue: &QueueRef, text: &str) -> Result<Live, ZaqarError> {
    let id = parse_claim_id(text).ok_or_else(|| missing(queue, text))?;
    state
        .engine
        .claim_of(&queue.tenax, id)
        .await?
        .ok_or_else(|| missing(queue, text))
}

#[derive(Debug, Serialize)]
struct ClaimShown<'a> {
    age: u64,
    ttl: u64,
    messages: Vec<MessageView<'a>>,
    href: String,
}

/// `GET /v2/queues/{name}/claims/{claim}`: its age, ttl and messages.
pub async fn show(
    ctx: Ctx,
    State(state): State<AppState>,
    Path((name, text)): Path<(String, String)>,
) -> Result<Response, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    let claim = find(&state, &queue, &text).await?;
    let mut jobs: Vec<Job> = Vec::with_capacity(claim.jobs.len());
    for id in &claim.jobs {
        if let Some(job) = state.engine.job(*id).await? {
            jobs.push(job);
        }
    }
    let now = state.engine.now_ms();
    let messages = jobs
        .iter()
        .map(|job| {
            let facts = Facts {
                id: job.id,
                created_at_ms: job.spec.created_at_ms,
                expires_at_ms: job.spec.expires_at_ms,
                claim: Some(claim.id),
                body: &job.spec.payload,
            };
            MessageView::new(&queue, facts, now)
        })
        .collect();
    let view = ClaimShown {
        age: seconds(claim.record.renewed_at_ms, now),
        ttl: claim.record.lease_ms / 1_000,
        messages,
        href: queue.claim_href(claim.id),
    };
    Ok(views::json(StatusCode::OK, &view))
}

/// `PATCH /v2/queues/{name}/claims/{claim}` `{"ttl", "grace"}`: renews the claim (204), or
/// answers 404 as for an ended claim when the renewal held nothing (its messages were freed
/// meanwhile, or its new end passed before the store confirmed it).
pub async fn update(
    ctx: Ctx,
    State(state): State<AppState>,
    Path((name, text)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    let (ttl, grace) = read_claim_document(&body, false)?;
    let ttl_s = check_ttl(ttl, &state.zaqar_limits)?;
    let grace_s = u64::try_from(grace.max(0)).unwrap_or(0);
    let claim = find(&state, &queue, &text).await?;
    let held = state
        .engine
        .renew_claim(
            &claim,
            ttl_s.saturating_mul(1_000),
            grace_s.saturating_mul(1_000),
        )
        .await?;
    if held == 0 {
        return Err(missing(&queue, &text));
    }
    Ok(views::empty(StatusCode::NO_CONTENT, None))
}

/// `DELETE /v2/queues/{name}/claims/{claim}`: releases its messages (204, also when there is no
/// such claim).
pub async fn delete(
    ctx: Ctx,
    State(state): State<AppState>,
    Path((name, text)): Path<(String, String)>,
) -> Result<Response, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    if let Ok(claim) = find(&state, &queue, &text).await {
        state.engine.end_claim(claim.id).await?;
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
        let zaqar = Limits::default();
        assert!(check_ttl(59, &zaqar).is_err() && check_ttl(43_201, &zaqar).is_err());
        assert!(check_ttl(60, &zaqar).is_ok() && check_ttl(-1, &zaqar).is_err());
        assert!(check_grace(59, &zaqar).is_err() && check_grace(43_200, &zaqar).is_ok());
    }
}
