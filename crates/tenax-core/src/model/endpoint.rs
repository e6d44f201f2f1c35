//! What every server must know of a webhook endpoint (an origin: scheme, host and port), shared
//! by every subscription pointing there: a pause the endpoint asked for (a 429 or 503 with
//! `Retry-After`), and its circuit breaker. Stored, so that it holds for every server of a
//! cluster and across restarts; the rules that change it are in `crate::delivery::backpressure`.

use serde::{Deserialize, Serialize};

use super::SubscriptionId;
use crate::clock::UnixMs;

/// An endpoint's stored delivery state. An endpoint that never paused nor tripped has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointState {
    /// The endpoint's origin, as `url::Url::origin` serialises it (`https://host:port`, the
    /// port left out when it is the scheme's default).
    pub origin: String,
    /// The last pause the endpoint asked for; over once `until_ms` has passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
    #[serde(default)]
    pub breaker: Breaker,
    pub updated_at_ms: UnixMs,
}

/// A pause an endpoint asked for: deliveries to it wait until `until_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    pub until_ms: UnixMs,
    /// The status of the answer that asked (429 or 503).
    pub status: u16,
    /// The subscription whose delivery got that answer.
    pub subscription: SubscriptionId,
    pub at_ms: UnixMs,
}

/// Where a circuit breaker is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Deliveries go.
    #[default]
    Closed,
    /// None go until the cool-down is over.
    Open,
    /// One probe delivery is on its way; its outcome closes or opens the breaker again.
    HalfOpen,
}

impl BreakerState {
    /// Its name in the API and the metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }
}

/// An endpoint's circuit breaker.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Breaker {
    pub state: BreakerState,
    /// Open: the end of the cool-down. Half-open: when the probe counts as lost (its server
    /// went away), so that another may be sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<UnixMs>,
    /// When the breaker last opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at_ms: Option<UnixMs>,
    /// Openings since it was last closed by a successful probe: each cool-down is twice the
    /// one before (up to the most).
    #[serde(default)]
    pub trips: u32,
    /// The half-open probe's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<u64>,
    /// The failure that opened it last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Advanced by every change of `state`: each server counts its run of failures under the
    /// epoch it saw, so a run from before an opening never counts after it.
    #[serde(default)]
    pub epoch: u64,
}
