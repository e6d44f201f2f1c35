//! API tokens: create (the token is in this answer and no other), list, revoke. Only an admin
//! token that is not scoped to queues or projects may use these routes.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use tenax_core::auth::{Role, TokenRecord};
use tenax_core::clock::rfc3339;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;
use super::openapi::{Missing, Refusals};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(revoke))
}

/// A token to make.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "billing workers", "role": "worker", "queues": ["billing.*"]}))]
struct NewTokenRequest {
    /// What the token is for, 1 to 128 characters.
    #[schema(min_length = 1, max_length = 128)]
    name: String,
    role: Role,
    /// Queue-name patterns it may touch (`*` matches any run of characters); none: all queues.
    #[serde(default)]
    queues: Vec<String>,
    /// Zaqar project ids (patterns) it may act for; none: all projects.
    #[serde(default)]
    projects: Vec<String>,
}

/// A token as listed: everything but the token.
#[derive(Debug, Serialize, ToSchema)]
struct TokenView {
    id: u64,
    name: String,
    role: Role,
    queues: Vec<String>,
    projects: Vec<String>,
    created_at: String,
    /// When it was last used (to within a minute), `null` if never.
    last_used_at: Option<String>,
}

impl From<TokenRecord> for TokenView {
    fn from(record: TokenRecord) -> Self {
        Self {
            id: record.id,
            name: record.name,
            role: record.role,
            queues: record.queues,
            projects: record.projects,
            created_at: rfc3339(record.created_at_ms),
            last_used_at: record.last_used_at_ms.map(rfc3339),
        }
    }
}

/// A new token: its record, and the token itself, shown this once.
#[derive(Debug, Serialize, ToSchema)]
struct CreatedToken {
    #[serde(flatten)]
    view: TokenView,
    /// The token: send it as `Authorization: Bearer <token>`. It is not stored and cannot be
    /// shown again.
    token: String,
}

#[derive(Debug, Serialize, ToSchema)]
struct TokenList {
    tokens: Vec<TokenView>,
}

/// Checks scope patterns: 1 to `max` characters of `allowed` bytes or `*`.
fn check_patterns(
    field: &str,
    patterns: &[String],
    max: usize,
    allowed: fn(u8) -> bool,
) -> Result<(), ApiError> {
    if patterns.len() > 100 {
        return Err(ApiError::invalid(field, "must hold at most 100 patterns"));
    }
    for (i, pattern) in patterns.iter().enumerate() {
        let valid = !pattern.is_empty()
            && pattern.len() <= max
            && pattern.bytes().all(|b| b == b'*' || allowed(b));
        if !valid {
            return Err(ApiError::invalid(
                format!("{field}[{i}]"),
                format!(
                    "must be 1 to {max} characters of a name, with * for any run of characters, \
                     got {pattern:?}"
                ),
            ));
        }
    }
    Ok(())
}

/// Makes a token. The answer holds the token; no later answer does.
#[utoipa::path(post, path = "/tokens", operation_id = "create_token", tag = "tokens",
    request_body = NewTokenRequest,
    responses((status = 201, body = CreatedToken), Refusals))]
async fn create(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewTokenRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    if request.name.is_empty() || request.name.len() > 128 {
        return Err(ApiError::invalid("name", "must be 1 to 128 characters"));
    }
    check_patterns(
        "queues",
        &request.queues,
        super::fields::MAX_QUEUE_NAME,
        |b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b),
    )?;
    // Zaqar project ids are any characters (up to 256): patterns may hold any but controls.
    check_patterns("projects", &request.projects, 256, |b| {
        !b.is_ascii_control()
    })?;
    let made = state
        .engine
        .create_token(request.name, request.role, request.queues, request.projects)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            view: TokenView::from(made.record),
            token: made.secret,
        }),
    ))
}

/// Every token, without the tokens themselves.
#[utoipa::path(get, path = "/tokens", operation_id = "list_tokens", tag = "tokens",
    responses((status = 200, body = TokenList), Refusals))]
async fn list(State(state): State<AppState>) -> Result<Json<TokenList>, ApiError> {
    let tokens = state.engine.list_tokens().await?;
    Ok(Json(TokenList {
        tokens: tokens.into_iter().map(TokenView::from).collect(),
    }))
}

/// Revokes a token: it is refused from the next request on.
#[utoipa::path(delete, path = "/tokens/{id}", operation_id = "revoke_token", tag = "tokens",
    params(("id" = u64, Path, description = "The token's id")),
    responses((status = 204, description = "Revoked"), Missing, Refusals))]
async fn revoke(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: u64 = id.parse().map_err(|_| {
        ApiError::invalid(
            "id",
            format!("must be a token id (a whole number), got {id:?}"),
        )
    })?;
    if state.engine.revoke_token(id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("token {id} does not exist")))
    }
}
