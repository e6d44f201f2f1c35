//! The deployment's pools and flavors (docs/postgres.md, "Pools"): list, show, register or
//! change, forget; and moving queues between pools. Only an admin token that is not scoped may use these routes; a server of
//! one database lists none and refuses to register any (409 `not_pooled`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tenax_core::model::pool::{Flavor, Moved, Pool, PoolSpec};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;
use super::fields::check_queue_name;
use super::openapi::{Conflict, Missing, Refusals};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_pools))
        .routes(routes!(show_pool, put_pool, delete_pool))
        .routes(routes!(list_flavors))
        .routes(routes!(show_flavor, put_flavor, delete_flavor))
        .routes(routes!(move_queue))
}

/// A pool: a PostgreSQL database that holds the queues placed on it.
#[derive(Debug, Serialize, ToSchema)]
struct PoolView {
    name: String,
    /// 1 to 63: the remainder modulo 64 of every id its database hands out.
    number: u8,
    /// Its database, as registered.
    uri: String,
    /// New queues go to a pool in proportion to its weight; 0 takes none.
    weight: u32,
    /// The flavor it serves, if any.
    flavor: Option<String>,
    /// As given at registration.
    #[schema(value_type = Object)]
    options: Map<String, Value>,
    /// How many queues are placed on it.
    queues: usize,
    /// Whether it takes new queues yet: once every server has loaded it (a few seconds at
    /// most).
    ready: bool,
}

impl From<Pool> for PoolView {
    fn from(pool: Pool) -> Self {
        Self {
            name: pool.spec.name,
            number: pool.number,
            uri: pool.spec.uri,
            weight: pool.spec.weight,
            flavor: pool.spec.flavor,
            options: pool.spec.options,
            queues: pool.queues,
            ready: pool.ready,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
struct PoolList {
    pools: Vec<PoolView>,
}

/// A pool to register, or every setting of a registered one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"uri": "postgres://tenax@db2.internal/tenax", "weight": 100}))]
struct PoolRequest {
    /// Its database: a `postgres://` URL. The database is made when its server has none of
    /// that name; it must hold no queues. A pool that holds queues keeps its uri.
    uri: String,
    /// New queues go to a pool in proportion to its weight; 0 takes none.
    #[serde(default = "default_weight")]
    weight: u32,
    /// The flavor it serves, if any.
    #[serde(default)]
    flavor: Option<String>,
    /// Anything the operator wants kept with it.
    #[serde(default)]
    #[schema(value_type = Object)]
    options: Map<String, Value>,
}

fn default_weight() -> u32 {
    100
}

/// A flavor: a named group of pools, for queues that ask for it (Zaqar's `_flavor`).
#[derive(Debug, Serialize, ToSchema)]
struct FlavorView {
    name: String,
    /// Its pools, by name.
    pools: Vec<String>,
    /// As given.
    #[schema(value_type = Object)]
    capabilities: Map<String, Value>,
}

impl From<Flavor> for FlavorView {
    fn from(flavor: Flavor) -> Self {
        Self {
            name: flavor.name,
            pools: flavor.pools,
            capabilities: flavor.capabilities,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
struct FlavorList {
    flavors: Vec<FlavorView>,
}

/// A flavor's pools (at least one; each registered), and what to keep with it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"pools": ["fast-1", "fast-2"]}))]
struct FlavorRequest {
    pools: Vec<String>,
    #[serde(default)]
    #[schema(value_type = Object)]
    capabilities: Map<String, Value>,
}

/// Where to move a queue, and the queues tied to it that move with it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"to": "pool-b", "with": ["emails-dead"]}))]
struct MoveRequest {
    /// The pool to move to.
    to: String,
    /// Other queues of the same pool that move with it: its dead-letter queue, queues whose
    /// jobs wait for its jobs or share batches with them.
    #[serde(default)]
    with: Vec<String>,
}

/// Queues moved, with what they held.
#[derive(Debug, Serialize, ToSchema)]
struct MovedView {
    queues: Vec<String>,
    /// The pool they were on ("" for the catalogue's database); null when none of them held
    /// anything elsewhere.
    from: Option<String>,
    to: String,
    /// Jobs moved, finished ones too, with their ids.
    jobs: u64,
    /// Subscriptions moved, with their deliveries.
    subscriptions: u64,
}

impl From<Moved> for MovedView {
    fn from(moved: Moved) -> Self {
        Self {
            queues: moved.queues,
            from: moved.from,
            to: moved.to,
            jobs: moved.jobs,
            subscriptions: moved.subscriptions,
        }
    }
}

/// Moves a queue, and the queues `with` it, to another pool, with everything they hold: jobs
/// (with their ids and leases), claims, settings, subscriptions and their deliveries. Their
/// writes are answered 503 while they move; a move that stopped short is finished by asking
/// for it again (until then, no other move begins).
#[utoipa::path(post, path = "/queues/{name}/move", operation_id = "move_queue", tag = "pools",
    params(("name" = String, Path, description = "The queue")),
    request_body = MoveRequest,
    responses((status = 200, body = MovedView), Missing, Conflict, Refusals))]
async fn move_queue(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<MoveRequest>,
) -> Result<Json<MovedView>, ApiError> {
    check_queue_name("name", &name)?;
    for other in &request.with {
        check_queue_name("with", other)?;
    }
    let moved = state
        .engine
        .move_queues(&name, request.with, &request.to)
        .await?;
    Ok(Json(moved.into()))
}

/// Every pool, by name.
#[utoipa::path(get, path = "/pools", operation_id = "list_pools", tag = "pools",
    responses((status = 200, body = PoolList), Refusals))]
async fn list_pools(State(state): State<AppState>) -> Result<Json<PoolList>, ApiError> {
    let pools = state.engine.pools().await?;
    Ok(Json(PoolList {
        pools: pools.into_iter().map(PoolView::from).collect(),
    }))
}

/// One pool.
#[utoipa::path(get, path = "/pools/{name}", operation_id = "get_pool", tag = "pools",
    params(("name" = String, Path, description = "The pool's name")),
    responses((status = 200, body = PoolView), Missing, Refusals))]
async fn show_pool(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<PoolView>, ApiError> {
    Ok(Json(state.engine.pool(&name).await?.into()))
}

/// Registers a pool (201), or sets every setting of the one of that name (200). New queues
/// are placed on it once every server has loaded it.
#[utoipa::path(put, path = "/pools/{name}", operation_id = "put_pool", tag = "pools",
    params(("name" = String, Path, description = "The pool's name: 1 to 64 letters, digits, '_' or '-'")),
    request_body = PoolRequest,
    responses((status = 200, body = PoolView), (status = 201, body = PoolView), Conflict, Refusals))]
async fn put_pool(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<PoolRequest>,
) -> Result<(StatusCode, Json<PoolView>), ApiError> {
    let spec = PoolSpec {
        name: name.clone(),
        uri: request.uri,
        weight: request.weight,
        flavor: request.flavor,
        options: request.options,
    };
    let created = state.engine.put_pool(spec).await?;
    let pool = state.engine.pool(&name).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(pool.into())))
}

/// Forgets a pool. Refused while queues are placed on it, and for the last pool of a flavor.
#[utoipa::path(delete, path = "/pools/{name}", operation_id = "delete_pool", tag = "pools",
    params(("name" = String, Path, description = "The pool's name")),
    responses((status = 204, description = "Forgotten"), Missing, Conflict, Refusals))]
async fn delete_pool(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state.engine.delete_pool(&name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("pool {name:?} does not exist")))
    }
}

/// Every flavor, by name.
#[utoipa::path(get, path = "/flavors", operation_id = "list_flavors", tag = "pools",
    responses((status = 200, body = FlavorList), Refusals))]
async fn list_flavors(State(state): State<AppState>) -> Result<Json<FlavorList>, ApiError> {
    let flavors = state.engine.flavors().await?;
    Ok(Json(FlavorList {
        flavors: flavors.into_iter().map(FlavorView::from).collect(),
    }))
}

/// One flavor.
#[utoipa::path(get, path = "/flavors/{name}", operation_id = "get_flavor", tag = "pools",
    params(("name" = String, Path, description = "The flavor's name")),
    responses((status = 200, body = FlavorView), Missing, Refusals))]
async fn show_flavor(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<FlavorView>, ApiError> {
    Ok(Json(state.engine.flavor(&name).await?.into()))
}

/// Makes a flavor (201), or sets the pools of the one of that name (200): exactly those named.
#[utoipa::path(put, path = "/flavors/{name}", operation_id = "put_flavor", tag = "pools",
    params(("name" = String, Path, description = "The flavor's name: 1 to 64 letters, digits, '_' or '-'")),
    request_body = FlavorRequest,
    responses((status = 200, body = FlavorView), (status = 201, body = FlavorView), Missing, Conflict, Refusals))]
async fn put_flavor(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<FlavorRequest>,
) -> Result<(StatusCode, Json<FlavorView>), ApiError> {
    let created = state
        .engine
        .put_flavor(Flavor {
            name: name.clone(),
            pools: request.pools,
            capabilities: request.capabilities,
        })
        .await?;
    let flavor = state.engine.flavor(&name).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(flavor.into())))
}

/// Forgets a flavor; its pools stay, of no flavor.
#[utoipa::path(delete, path = "/flavors/{name}", operation_id = "delete_flavor", tag = "pools",
    params(("name" = String, Path, description = "The flavor's name")),
    responses((status = 204, description = "Forgotten"), Missing, Refusals))]
async fn delete_flavor(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state.engine.delete_flavor(&name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "flavor {name:?} does not exist"
        )))
    }
}
