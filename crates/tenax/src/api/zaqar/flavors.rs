//! Zaqar's flavors (`/v2/flavors`), the operator's: a flavor is a named group of pools, and a
//! queue created with `_flavor` is placed on one of them. Shapes, statuses and titles are
//! Zaqar 23's (`zaqar/transport/wsgi/v2_0/flavors.py`); what differs is in docs/zaqar.md:
//! flavors are the deployment's, not a project's, as its pools are.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tenax_core::engine::EngineError;
use tenax_core::model::pool::{Flavor, PoolError};

use super::error::ZaqarError;
use super::pools::{Page, object};
use super::request::{Ctx, Params};
use super::views;
use crate::api::AppState;

/// What a flavor's pools can do, as Zaqar names it: every Tenax pool can all of it (messages
/// listed in the order they were posted, claims, a durable store, at-least-once delivery, a
/// high rate of messages).
const CAPABILITIES: [&str; 5] = ["FIFO", "CLAIMS", "DURABILITY", "AOD", "HIGH_THROUGHPUT"];

/// `GET /v2/flavors`: by name, `limit` at a time past `marker`; `detailed` adds
/// `capabilities`.
pub async fn list(
    _ctx: Ctx,
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ZaqarError> {
    let page = Page::parse(query.as_deref())?;
    let flavors: Vec<Value> = state
        .engine
        .flavors()
        .await?
        .into_iter()
        .filter(|f| page.admits(&f.name))
        .take(page.size())
        .map(|f| {
            let mut shown = json!({
                "name": f.name,
                "href": format!("/v2/flavors/{}", f.name),
            });
            if !f.pools.is_empty() {
                shown["pool_list"] = json!(f.pools);
            }
            if page.detailed == Some(true) {
                shown["capabilities"] = json!(CAPABILITIES);
            }
            shown
        })
        .collect();
    let last = flavors
        .last()
        .and_then(|f| f["name"].as_str())
        .map(str::to_owned);
    let listing = json!({ "flavors": flavors, "links": page.links("/v2/flavors", last) });
    Ok(views::json(StatusCode::OK, &listing))
}

/// `GET /v2/flavors/{name}`: its pools and capabilities.
pub async fn show(
    _ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ZaqarError> {
    // Read as Zaqar reads it, though a flavor shows the same either way.
    Params::parse(query.as_deref()).bool("detailed")?;
    let flavor = state.engine.flavor(&name).await.map_err(missing)?;
    Ok(views::json(StatusCode::OK, &shown(flavor)))
}

/// `PUT /v2/flavors/{name}`: makes the flavor, or replaces the one of that name (201 both),
/// with exactly the pools of `pool_list`.
pub async fn put(
    _ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let document = object(&body)?;
    if let Some(extra) = document
        .keys()
        .find(|k| !["pool_list", "capabilities"].contains(&k.as_str()))
    {
        return Err(ZaqarError::body(format!(
            "Additional properties are not allowed ('{extra}' was unexpected)"
        )));
    }
    if let Some(capabilities) = document.get("capabilities")
        && !capabilities.is_object()
    {
        return Err(ZaqarError::body(format!(
            "{capabilities} is not of type 'object': capabilities"
        )));
    }
    let Some(pool_list) = document.get("pool_list") else {
        return Err(ZaqarError::body(
            "{} is not valid under any of the given schemas: pool_list is required",
        ));
    };
    let pools = pool_names(pool_list)?;
    let flavor = Flavor {
        name: name.clone(),
        pools,
        capabilities: document
            .get("capabilities")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    };
    state
        .engine
        .put_flavor(flavor)
        .await
        .map_err(|e| refused(e, "Unable to create", &name, "could not be created"))?;
    Ok(views::empty(
        StatusCode::CREATED,
        Some(&format!("/v2/flavors/{name}")),
    ))
}

/// `PATCH /v2/flavors/{name}`: its pools become exactly those of `pool_list`; answers the
/// flavor.
pub async fn update(
    _ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let document = object(&body)?;
    let Some(pool_list) = document.get("pool_list") else {
        return Err(ZaqarError::body("`pool_list` needs to be specified"));
    };
    let pools = pool_names(pool_list)?;
    let mut flavor = state.engine.flavor(&name).await.map_err(missing)?;
    flavor.pools = pools;
    state
        .engine
        .put_flavor(flavor)
        .await
        .map_err(|e| refused(e, "updatefail", &name, "cant be updated"))?;
    let flavor = state.engine.flavor(&name).await.map_err(missing)?;
    Ok(views::json(StatusCode::OK, &shown(flavor)))
}

/// `DELETE /v2/flavors/{name}`: 204, whether it existed or not; its pools stay, of no flavor.
pub async fn delete(
    _ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ZaqarError> {
    state.engine.delete_flavor(&name).await?;
    Ok(views::empty(StatusCode::NO_CONTENT, None))
}

/// A flavor as Zaqar shows it.
fn shown(flavor: Flavor) -> Value {
    json!({
        "name": flavor.name,
        "href": format!("/v2/flavors/{}", flavor.name),
        "pool_list": flavor.pools,
        "capabilities": CAPABILITIES,
    })
}

/// `pool_list`: an array of pool names, at least one (Zaqar: "Bad Request" under "Unable to
/// create").
fn pool_names(value: &Value) -> Result<Vec<String>, ZaqarError> {
    let Some(list) = value.as_array() else {
        return Err(ZaqarError::body(format!(
            "{value} is not of type 'array': pool_list"
        )));
    };
    if list.is_empty() {
        return Err(ZaqarError::new(
            StatusCode::BAD_REQUEST,
            "Unable to create",
            "Bad Request",
        ));
    }
    list.iter()
        .map(|name| {
            name.as_str().map(str::to_owned).ok_or_else(|| {
                ZaqarError::body(format!("{name} is not of type 'string': pool_list"))
            })
        })
        .collect()
}

/// A flavor that does not exist: Zaqar's 404.
fn missing(error: EngineError) -> ZaqarError {
    match error {
        EngineError::Pool(PoolError::NoFlavor(name)) => {
            ZaqarError::not_found(format!("Flavor {name} does not exist"))
        }
        error => error.into(),
    }
}

/// A pool of `pool_list` that does not exist: Zaqar's 400 with its words.
fn refused(error: EngineError, title: &'static str, flavor: &str, failed: &str) -> ZaqarError {
    match error {
        EngineError::Pool(PoolError::NoPool(pool)) => ZaqarError::new(
            StatusCode::BAD_REQUEST,
            title,
            format!("Flavor {flavor} {failed}, error:Pool {pool} does not exist"),
        ),
        error => missing(error),
    }
}
