//! `POST /api/policy/preview`: the body is a policy in any spelling; the answer is the JSON of
//! `tenax policy preview --format json`, bounded: the first `rows` retries (default
//! [`DEFAULT_ROWS`], `?rows=` asks for up to [`MAX_ROWS`]), with the window and the number of
//! retries of the whole policy. A policy allows up to 100 000 retries, so an unbounded preview
//! of a 60-byte request could be megabytes.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenax_policy::{Preview, PreviewRow, parse_policy};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;
use super::openapi::Refusals;

/// Retries shown when the request does not say.
pub const DEFAULT_ROWS: usize = 100;
/// The most retries one preview shows.
pub const MAX_ROWS: usize = 10_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(preview))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct PreviewQuery {
    /// How many retries to show, from the first (1 to 10 000, default 100).
    #[param(minimum = 1, maximum = 10_000)]
    rows: Option<usize>,
}

/// One retry of a preview: its delay without jitter (capped), the running total, and the band
/// jitter can make of the delay.
#[derive(Debug, Serialize, ToSchema)]
struct RowView {
    retry: u32,
    delay_ms: u64,
    cumulative_ms: u64,
    min_delay_ms: u64,
    max_delay_ms: u64,
}

impl From<PreviewRow> for RowView {
    fn from(row: PreviewRow) -> Self {
        Self {
            retry: row.retry,
            delay_ms: row.delay_ms,
            cumulative_ms: row.cumulative_ms,
            min_delay_ms: row.min_delay_ms,
            max_delay_ms: row.max_delay_ms,
        }
    }
}

/// A preview of the first retries of a policy, and the totals of all of them.
#[derive(Debug, Serialize, ToSchema)]
struct PreviewView {
    retries: Vec<RowView>,
    /// The sum of every delay without jitter, over all retries (not only those shown).
    window_ms: u64,
    /// How many retries the policy allows (within its window, if it has one).
    retry_count: usize,
    /// True when `retries` shows fewer than `retry_count`.
    truncated: bool,
}

/// Every retry's delay, the running total, the jitter band and the whole window of a policy
/// (the body: a policy in any spelling).
#[utoipa::path(post, path = "/policy/preview", operation_id = "preview_policy", tag = "policies", params(PreviewQuery),
    request_body(content = Object, description = "A policy in any spelling",
        example = json!({"type": "phased", "min_delay": "5s", "max_delay": "260s",
                         "num_retries": 10, "function": "geometric"})),
    responses((status = 200, body = PreviewView), Refusals))]
async fn preview(
    State(_): State<AppState>,
    query: Result<Query<PreviewQuery>, QueryRejection>,
    JsonBody(policy): JsonBody<Value>,
) -> Result<Json<PreviewView>, ApiError> {
    let query = super::extract::query(query)?;
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
        retries: retries.into_iter().map(RowView::from).collect(),
        window_ms,
        retry_count,
    }))
}
