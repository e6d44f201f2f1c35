//! `POST /api/policy/preview`: the body is a policy in any spelling; the answer is the same JSON
//! as `tenax policy preview --format json`.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::Value;
use tenax_policy::{Preview, parse_policy};

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;

pub fn router() -> Router<AppState> {
    Router::new().route("/policy/preview", post(preview))
}

async fn preview(
    State(_): State<AppState>,
    JsonBody(policy): JsonBody<Value>,
) -> Result<Json<Preview>, ApiError> {
    let parsed = parse_policy(&policy).map_err(|e| ApiError::policy("", &e))?;
    Ok(Json(Preview::of(&parsed.retry)))
}
