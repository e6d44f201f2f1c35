//! The cluster's activity per minute: jobs enqueued, completed, failed and dead, webhook
//! attempts delivered and failed, over the last minutes up to a day. On PostgreSQL every server
//! adds its counts to the database every 2 seconds, so every server answers with the cluster's
//! sums (another server's last seconds appear once it has added them); on the embedded store,
//! this server's since it started. The counts are of every queue: they are read with any
//! reading token, as the dashboard shows them.

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use tenax_core::clock::rfc3339;
use tenax_core::model::activity::{Counts, MINUTES, Minute};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::openapi::Refusals;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(activity))
}

/// How many minutes are shown when the query does not say.
const DEFAULT_MINUTES: usize = 60;

/// Which minutes.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ActivityQuery {
    /// The last this many minutes, the current one included: 1 to 1440 (a day); default 60.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1440)]
    minutes: Option<String>,
}

/// What happened in a minute (or over the window: `total`).
#[derive(Debug, Serialize, ToSchema)]
struct CountsView {
    enqueued: u64,
    completed: u64,
    /// Failed runs (a worker's failure or an expired lease), retried or not.
    failed: u64,
    /// Jobs and deliveries that died.
    dead: u64,
    /// Webhook attempts that delivered.
    delivered: u64,
    /// Webhook attempts that failed.
    delivery_failed: u64,
}

impl From<Counts> for CountsView {
    fn from(c: Counts) -> Self {
        Self {
            enqueued: c.enqueued,
            completed: c.completed,
            failed: c.failed,
            dead: c.dead,
            delivered: c.delivered,
            delivery_failed: c.delivery_failed,
        }
    }
}

/// One minute: its start, and its counts.
#[derive(Debug, Serialize, ToSchema)]
struct MinuteView {
    at: String,
    #[serde(flatten)]
    counts: CountsView,
}

/// The minutes of the window, oldest first, every one of them (zeros where nothing
/// happened), and their sums.
#[derive(Debug, Serialize, ToSchema)]
struct ActivityView {
    minutes: Vec<MinuteView>,
    total: CountsView,
}

/// `minutes` as the query gives it: 1 to a day.
fn minutes_of(query: &ActivityQuery) -> Result<usize, ApiError> {
    let Some(text) = &query.minutes else {
        return Ok(DEFAULT_MINUTES);
    };
    let rule = || format!("must be a whole number from 1 to {MINUTES}, got {text:?}");
    let minutes: usize = text
        .parse()
        .map_err(|_| ApiError::invalid("minutes", rule()))?;
    if !(1..=MINUTES).contains(&minutes) {
        return Err(ApiError::invalid("minutes", rule()));
    }
    Ok(minutes)
}

/// The cluster's activity per minute over the last `minutes` minutes, with its sums.
#[utoipa::path(get, path = "/activity", operation_id = "get_activity", tag = "cluster",
    params(ActivityQuery),
    responses((status = 200, body = ActivityView), Refusals))]
async fn activity(
    State(state): State<AppState>,
    query: Result<Query<ActivityQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ActivityView>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid("query", e.body_text()))?;
    let minutes = minutes_of(&query)?;
    let series: Vec<Minute> = state.engine.cluster_activity(minutes).await?;
    let total = Counts::sum(series.iter().map(|m| &m.counts));
    Ok(Json(ActivityView {
        minutes: series
            .into_iter()
            .map(|m| MinuteView {
                at: rfc3339(m.at_ms),
                counts: m.counts.into(),
            })
            .collect(),
        total: total.into(),
    }))
}
