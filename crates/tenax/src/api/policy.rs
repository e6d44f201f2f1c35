//! `POST /api/policy/preview`: the body is a policy in any spelling; the answer is the JSON of
//! `tenax policy preview --format json`, bounded: the first `rows` retries (default
//! [`DEFAULT_ROWS`], `?rows=` asks for up to [`MAX_ROWS`]), with the window and the number of
//! retries of the whole policy. A policy allows up to 100 000 retries, so an unbounded preview
//! of a 60-byte request could be megabytes.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenax_policy::{Preview, PreviewRow, parse_policy};

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;

/// Retries shown when the request does not say.
pub const DEFAULT_ROWS: usize = 100;
/// The most retries one preview shows.
pub const MAX_ROWS: usize = 10_000;

pub fn router() -> Router<AppState> {
    Router::new().route("/policy/preview", post(preview))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewQuery {
    /// How many retries to show, from the first.
    rows: Option<usize>,
}

/// A preview of the first retries of a policy, and the totals of all of them.
#[derive(Debug, Serialize)]
struct PreviewView {
    retries: Vec<PreviewRow>,
    /// The sum of every delay without jitter, over all retries (not only those shown).
    window_ms: u64,
    /// How many retries the policy allows (within its window, if it has one).
    retry_count: usize,
    /// True when `retries` shows fewer than `retry_count`.
    truncated: bool,
}

async fn preview(
    State(_): State<AppState>,
    query: Result<Query<PreviewQuery>, QueryRejection>,
    JsonBody(policy): JsonBody<Value>,
) -> Result<Json<PreviewView>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid("query", e.body_text()))?;
    let rows = query.rows.unwrap_or(DEFAULT_ROWS);
    if !(1..=MAX_ROWS).contains(&rows) {
        return Err(ApiError::invalid(
            "rows",
            format!("must be from 1 to {MAX_ROWS}, got {rows}"),
        ));
    }
    let parsed = parse_policy(&policy).map_err(|e| ApiError::policy("", &e))?;
    let Preview {
        mut retries,
        window_ms,
    } = Preview::of(&parsed.retry);
    let retry_count = retries.len();
    retries.truncate(rows);
    Ok(Json(PreviewView {
        truncated: retries.len() < retry_count,
        retries,
        window_ms,
        retry_count,
    }))
}
