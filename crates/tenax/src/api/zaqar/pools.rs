//! Zaqar's pools (`/v2/pools`), the operator's: a pool is a PostgreSQL database that queues are
//! placed on (docs/postgres.md, "Pools"). Shapes, statuses and titles are Zaqar 23's
//! (`zaqar/transport/wsgi/v2_0/pools.py`); what differs is in docs/zaqar.md:
//! - a pool's `uri` is a `postgres://` URL (a MongoDB or Redis URI cannot connect: 400);
//! - a pool that holds queues is not deleted (409), and keeps its `uri` (409).

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use tenax_core::engine::EngineError;
use tenax_core::model::pool::{Pool, PoolError, PoolSpec};

use super::error::ZaqarError;
use super::request::{Ctx, Params, Query, json_body, json_int};
use super::views::{self, Link};
use crate::api::AppState;

/// Zaqar's `max_pools_per_page` (and `max_flavors_per_page`): the largest `limit` of a listing.
pub const MAX_PER_PAGE: i64 = 20;
/// A listing's `limit` when it names none (Zaqar's storage default).
pub const DEFAULT_PER_PAGE: usize = 10;
/// The fields a pool's document may hold.
const FIELDS: [&str; 4] = ["weight", "uri", "flavor", "options"];

/// `GET /v2/pools`: by name, `limit` at a time past `marker`; `detailed` adds `options`.
pub async fn list(
    _ctx: Ctx,
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ZaqarError> {
    let page = Page::parse(query.as_deref())?;
    let pools: Vec<Value> = state
        .engine
        .pools()
        .await?
        .into_iter()
        .filter(|p| page.admits(&p.spec.name))
        .take(page.size())
        .map(|p| {
            let href = format!("/v2/pools/{}", p.spec.name);
            shown(p, page.detailed == Some(true), href)
        })
        .collect();
    let last = pools
        .last()
        .and_then(|p| p["name"].as_str())
        .map(str::to_owned);
    let listing = json!({ "pools": pools, "links": page.links("/v2/pools", last) });
    Ok(views::json(StatusCode::OK, &listing))
}

/// `GET /v2/pools/{name}`; `detailed` adds `options`.
pub async fn show(
    _ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ZaqarError> {
    let detailed = Params::parse(query.as_deref()).bool("detailed")?;
    let pool = state.engine.pool(&name).await?;
    let href = format!("/v2/pools/{name}");
    Ok(views::json(
        StatusCode::OK,
        &shown(pool, detailed == Some(true), href),
    ))
}

/// `PUT /v2/pools/{name}`: registers the pool, or replaces the one of that name (201 both).
pub async fn put(
    _ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let document = object(&body)?;
    if let Some(extra) = document.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ZaqarError::body(format!(
            "Additional properties are not allowed ('{extra}' was unexpected)"
        )));
    }
    let (Some(weight), Some(uri)) = (document.get("weight"), document.get("uri")) else {
        let missing = if document.contains_key("weight") {
            "uri"
        } else {
            "weight"
        };
        return Err(ZaqarError::body(format!(
            "'{missing}' is a required property"
        )));
    };
    let spec = PoolSpec {
        name: name.clone(),
        weight: weight_of(weight)?,
        uri: uri_of(uri)?,
        flavor: document.get("flavor").map(flavor_of).transpose()?,
        options: document
            .get("options")
            .map(options_of)
            .transpose()?
            .unwrap_or_default(),
    };
    state.engine.put_pool(spec).await?;
    Ok(views::empty(
        StatusCode::CREATED,
        Some(&format!("/v2/pools/{name}")),
    ))
}

/// `PATCH /v2/pools/{name}`: changes the fields given (at least one of `weight`, `uri`,
/// `flavor`, `options`; others are ignored, as Zaqar does); answers the pool.
pub async fn update(
    _ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ZaqarError> {
    let document = object(&body)?;
    if !FIELDS.iter().any(|f| document.contains_key(*f)) {
        return Err(ZaqarError::body(
            "One of `uri`, `weight`, `flavor`, or `options` needs to be specified",
        ));
    }
    // Every given field is checked before the pool is looked for, as Zaqar does.
    let weight = document.get("weight").map(weight_of).transpose()?;
    let uri = document.get("uri").map(uri_of).transpose()?;
    let flavor = document.get("flavor").map(flavor_of).transpose()?;
    let options = document.get("options").map(options_of).transpose()?;
    let mut spec = state.engine.pool(&name).await?.spec;
    spec.weight = weight.unwrap_or(spec.weight);
    spec.uri = uri.unwrap_or(spec.uri);
    if let Some(flavor) = flavor {
        spec.flavor = Some(flavor);
    }
    spec.options = options.unwrap_or(spec.options);
    state.engine.put_pool(spec).await?;
    let pool = state.engine.pool(&name).await?;
    let href = format!("/v2/pools/{name}");
    Ok(views::json(StatusCode::OK, &shown(pool, false, href)))
}

/// `DELETE /v2/pools/{name}`: 204, whether it existed or not; 403 for the last pool of a
/// flavor, as Zaqar; 409 while queues are placed on it.
pub async fn delete(
    _ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ZaqarError> {
    match state.engine.delete_pool(&name).await {
        Ok(_) => Ok(views::empty(StatusCode::NO_CONTENT, None)),
        Err(EngineError::Pool(PoolError::LastOfFlavor { flavor, .. })) => Err(ZaqarError::new(
            StatusCode::FORBIDDEN,
            "Unable to delete",
            format!("This pool is used by flavors {flavor}; It cannot be deleted."),
        )),
        Err(error) => Err(error.into()),
    }
}

/// A pool as Zaqar shows it.
fn shown(pool: Pool, detailed: bool, href: String) -> Value {
    let mut shown = json!({
        "name": pool.spec.name,
        "flavor": pool.spec.flavor,
        "uri": pool.spec.uri,
        "weight": pool.spec.weight,
        "href": href,
    });
    if detailed {
        shown["options"] = Value::Object(pool.spec.options);
    }
    shown
}

/// A listing's `marker`, `limit` and `detailed`, and its `next` link (Zaqar's pools' and
/// flavors' listings alike).
pub struct Page {
    marker: Option<String>,
    limit: Option<i64>,
    pub detailed: Option<bool>,
}

impl Page {
    pub fn parse(query: Option<&str>) -> Result<Self, ZaqarError> {
        let params = Params::parse(query);
        let page = Self {
            marker: params.str("marker")?.map(str::to_owned),
            limit: params.int("limit")?,
            detailed: params.bool("detailed")?,
        };
        if page.limit.is_some_and(|l| !(1..=MAX_PER_PAGE).contains(&l)) {
            return Err(ZaqarError::api(format!(
                "Limit must be at least 1 and no greater than {MAX_PER_PAGE}."
            )));
        }
        Ok(page)
    }

    /// Whether `name` comes past the marker.
    pub fn admits(&self, name: &str) -> bool {
        self.marker.as_deref().is_none_or(|m| name > m)
    }

    pub fn size(&self) -> usize {
        self.limit
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(DEFAULT_PER_PAGE)
    }

    /// The `next` link after `last` (none for an empty page), with this page's parameters.
    pub fn links(&self, path: &str, last: Option<String>) -> Vec<Link> {
        let Some(last) = last else {
            return Vec::new();
        };
        let mut next = Query::default();
        if let Some(marker) = &self.marker {
            next.set("marker", marker);
        }
        if let Some(limit) = self.limit {
            next.set("limit", limit);
        }
        if let Some(detailed) = self.detailed {
            next.set_bool("detailed", detailed);
        }
        next.set("marker", last);
        vec![Link::next(format!("{path}{}", next.render()))]
    }
}

/// The body as a JSON object.
pub fn object(body: &[u8]) -> Result<Map<String, Value>, ZaqarError> {
    match json_body(body)? {
        Value::Object(map) => Ok(map),
        _ => Err(ZaqarError::document_type()),
    }
}

fn weight_of(value: &Value) -> Result<u32, ZaqarError> {
    json_int(value)
        .filter(|_| !value.is_boolean())
        .and_then(|w| u32::try_from(w).ok())
        .ok_or_else(|| {
            ZaqarError::body(format!(
                "{value} is not valid under any of the given schemas: weight must be an \
                 integer from 0 to 4294967295"
            ))
        })
}

fn uri_of(value: &Value) -> Result<String, ZaqarError> {
    match value.as_str() {
        Some(uri) if uri.len() <= 255 => Ok(uri.to_owned()),
        _ => Err(ZaqarError::body(format!(
            "{value} is not valid: uri must be a URI of at most 255 characters"
        ))),
    }
}

fn flavor_of(value: &Value) -> Result<String, ZaqarError> {
    match value.as_str() {
        Some(flavor) if flavor.len() <= 255 => Ok(flavor.to_owned()),
        _ => Err(ZaqarError::body(format!(
            "{value} is not valid: flavor must be a string of at most 255 characters"
        ))),
    }
}

fn options_of(value: &Value) -> Result<Map<String, Value>, ZaqarError> {
    match value {
        Value::Object(options) => Ok(options.clone()),
        _ => Err(ZaqarError::body(format!(
            "{value} is not of type 'object': options"
        ))),
    }
}
