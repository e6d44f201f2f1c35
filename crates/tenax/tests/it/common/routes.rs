//! The specification of who may call each route of both APIs, by role: `tests/it/security.rs`
//! tries every route with every role, and `tests/it/scopes.rs` every route with scoped tokens.
//! A route the server has and the table lacks fails both.

use std::collections::BTreeMap;

/// Who may call a route, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// No token needed.
    Public,
    /// Any valid token.
    AnyToken,
    /// Admin, producer, reader.
    Readers,
    /// Admin, producer.
    Producers,
    /// Admin, worker.
    Workers,
    /// Admin, reader: the metrics.
    MetricReaders,
    /// Admin only.
    Admins,
}

impl Who {
    pub fn admits(self, role: &str) -> bool {
        match self {
            Self::Public | Self::AnyToken => true,
            Self::Readers => matches!(role, "admin" | "producer" | "reader"),
            Self::Producers => matches!(role, "admin" | "producer"),
            Self::Workers => matches!(role, "admin" | "worker"),
            Self::MetricReaders => matches!(role, "admin" | "reader"),
            Self::Admins => role == "admin",
        }
    }
}

/// The specification: every route of both APIs and who may call it.
pub fn table() -> BTreeMap<(&'static str, &'static str), Who> {
    use Who::*;
    let mut table = BTreeMap::new();
    let mut add = |method: &'static str, route: &'static str, who: Who| {
        assert!(
            table.insert((method, route), who).is_none(),
            "{method} {route} twice"
        );
    };
    add("GET", "/healthz", Public);
    add("GET", "/api/openapi.json", Public);
    add("GET", "/", Public);
    add("GET", "/metrics", MetricReaders);
    add("POST", "/api/jobs", Producers);
    add("POST", "/api/jobs/batch", Producers);
    add("GET", "/api/jobs", Readers);
    add("GET", "/api/jobs/{id}", Readers);
    add("DELETE", "/api/jobs/{id}", Admins);
    add("GET", "/api/workflows/{id}", Readers);
    add("POST", "/api/jobs/{id}/cancel", Admins);
    add("POST", "/api/jobs/cancel", Admins);
    add("GET", "/api/stats", Readers);
    add("POST", "/api/batches", Producers);
    add("GET", "/api/batches", Readers);
    add("GET", "/api/batches/{id}", Readers);
    add("DELETE", "/api/batches/{id}", Admins);
    add("POST", "/api/batches/{id}/jobs", Producers);
    add("POST", "/api/batches/{id}/close", Producers);
    add("POST", "/api/take", Workers);
    add("POST", "/api/take/stream", Workers);
    add("POST", "/api/jobs/complete", Workers);
    add("POST", "/api/jobs/{id}/complete", Workers);
    add("POST", "/api/jobs/{id}/fail", Workers);
    add("POST", "/api/jobs/{id}/heartbeat", Workers);
    add("GET", "/api/dead", Readers);
    add("POST", "/api/dead/replay", Admins);
    add("POST", "/api/dead/delete", Admins);
    add("GET", "/api/queues", Readers);
    add("GET", "/api/queues/{name}", Readers);
    add("PUT", "/api/queues/{name}", Admins);
    add("POST", "/api/queues/{name}/pause", Admins);
    add("POST", "/api/queues/{name}/resume", Admins);
    add("POST", "/api/policy/preview", AnyToken);
    add("GET", "/api/schedules", Readers);
    add("POST", "/api/schedules/preview", AnyToken);
    add("GET", "/api/schedules/{name}", Readers);
    add("PUT", "/api/schedules/{name}", Admins);
    add("DELETE", "/api/schedules/{name}", Admins);
    add("POST", "/api/schedules/{name}/pause", Admins);
    add("POST", "/api/schedules/{name}/resume", Admins);
    add("POST", "/api/schedules/{name}/run", Admins);
    add("GET", "/api/schedules/{name}/ticks", Readers);
    add("POST", "/api/queues/{name}/subscriptions", Admins);
    add("GET", "/api/queues/{name}/subscriptions", Readers);
    add("GET", "/api/subscriptions", Readers);
    add("GET", "/api/subscriptions/{id}", Readers);
    add("PATCH", "/api/subscriptions/{id}", Admins);
    add("DELETE", "/api/subscriptions/{id}", Admins);
    add("POST", "/api/subscriptions/{id}/enable", Admins);
    add("POST", "/api/subscriptions/{id}/disable", Admins);
    add("POST", "/api/subscriptions/{id}/rotate-secret", Admins);
    add("GET", "/api/subscriptions/{id}/deliveries", Readers);
    add("GET", "/api/subscriptions/{id}/attempts", Readers);
    add("POST", "/api/subscriptions/{id}/replay", Admins);
    add("GET", "/api/deliveries/{id}", Readers);
    add("GET", "/api/deliveries/{id}/attempts", Readers);
    add("POST", "/api/deliveries/{id}/replay", Admins);
    add("POST", "/api/tokens", Admins);
    add("GET", "/api/tokens", Admins);
    add("DELETE", "/api/tokens/{id}", Admins);
    add("POST", "/api/admin/backup", Admins);
    add("POST", "/api/queues/{name}/move", Admins);
    for method in ["GET", "PUT", "DELETE"] {
        add(method, "/api/pools/{name}", Admins);
        add(method, "/api/flavors/{name}", Admins);
    }
    add("GET", "/api/pools", Admins);
    add("GET", "/api/flavors", Admins);
    for method in ["GET", "PUT", "PATCH", "DELETE"] {
        add(method, "/v2/pools/{pool_name}", Admins);
        add(method, "/v2/flavors/{flavor_name}", Admins);
    }
    add("GET", "/v2/pools", Admins);
    add("GET", "/v2/flavors", Admins);
    add("GET", "/api/cluster", Readers);
    add("GET", "/api/activity", MetricReaders);
    add("GET", "/v2/", AnyToken);
    add("GET", "/v2/ping", AnyToken);
    add("HEAD", "/v2/ping", AnyToken);
    add("GET", "/v2/health", AnyToken);
    add("GET", "/v2/queues", Readers);
    add("GET", "/v2/queues/{queue_name}", Readers);
    add("HEAD", "/v2/queues/{queue_name}", Readers);
    add("PUT", "/v2/queues/{queue_name}", Admins);
    add("PATCH", "/v2/queues/{queue_name}", Admins);
    add("DELETE", "/v2/queues/{queue_name}", Admins);
    add("GET", "/v2/queues/{queue_name}/stats", Readers);
    add("POST", "/v2/queues/{queue_name}/purge", Admins);
    add("POST", "/v2/queues/{queue_name}/share", Admins);
    add("POST", "/v2/queues/{queue_name}/messages", Producers);
    add("GET", "/v2/queues/{queue_name}/messages", Readers);
    add("DELETE", "/v2/queues/{queue_name}/messages", Workers);
    add(
        "GET",
        "/v2/queues/{queue_name}/messages/{message_id}",
        Readers,
    );
    add(
        "DELETE",
        "/v2/queues/{queue_name}/messages/{message_id}",
        Workers,
    );
    add("POST", "/v2/queues/{queue_name}/claims", Workers);
    add("GET", "/v2/queues/{queue_name}/claims/{claim_id}", Workers);
    add(
        "PATCH",
        "/v2/queues/{queue_name}/claims/{claim_id}",
        Workers,
    );
    add(
        "DELETE",
        "/v2/queues/{queue_name}/claims/{claim_id}",
        Workers,
    );
    add("POST", "/v2/queues/{queue_name}/subscriptions", Admins);
    add("GET", "/v2/queues/{queue_name}/subscriptions", Readers);
    add(
        "GET",
        "/v2/queues/{queue_name}/subscriptions/{subscription_id}",
        Readers,
    );
    add(
        "PATCH",
        "/v2/queues/{queue_name}/subscriptions/{subscription_id}",
        Admins,
    );
    add(
        "DELETE",
        "/v2/queues/{queue_name}/subscriptions/{subscription_id}",
        Admins,
    );
    add(
        "PUT",
        "/v2/queues/{queue_name}/subscriptions/{subscription_id}/confirm",
        Admins,
    );
    for method in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        add(method, "/v2", AnyToken);
        add(method, "/v2/{*rest}", AnyToken);
    }
    // Topics: every queue route under /v2/topics, for the same callers, but HEAD, claims and
    // share, which topics do not have.
    let topics: Vec<_> = table
        .iter()
        .filter(|((method, route), _)| {
            (*route == "/v2/queues" || route.starts_with("/v2/queues/"))
                && *method != "HEAD"
                && !route.contains("/claims")
                && !route.ends_with("/share")
        })
        .map(|((method, route), who)| {
            let topic = route
                .replace("/v2/queues", "/v2/topics")
                .replace("{queue_name}", "{topic_name}");
            ((*method, &*Box::leak(topic.into_boxed_str())), *who)
        })
        .collect();
    table.extend(topics);
    table
}
