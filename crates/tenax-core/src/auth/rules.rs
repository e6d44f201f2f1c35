//! The rule of every route of both APIs: what it needs, and where the queue it touches is, so
//! that a token scoped to some queues or projects is held to them.
//!
//! Invariant: [`rule`] answers for every route the server registers (the native routes of the
//! OpenAPI description, and [`crate::api::zaqar_routes`]); the router refuses to be built
//! otherwise, and `crates/tenax/tests/it/security.rs` tries every route with every role.

use http::Method;

use super::role::Capability;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, without a token: no data behind it.
    Public,
    /// A token whose role grants the capability (and whose scopes admit the target).
    Needs(Capability),
}

/// Where the queue a request touches is named, for scoped tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// No queue.
    Nothing,
    /// The path's `{name}`.
    QueueInPath,
    /// The body's `queue`.
    QueueInBody,
    /// The body's `queues` (an array).
    QueuesInBody,
    /// The body's `jobs[*].queue` (a batch enqueue).
    JobQueuesInBody,
    /// The job whose id is the path's `{id}`.
    JobInPath,
    /// The jobs whose ids are the body's `jobs[*].id`.
    JobsInBody,
    /// The query's `queue`, which a scoped token must give.
    QueueInQuery,
    /// A selection of jobs (dead jobs to replay or delete, jobs to cancel): its `ids`, its
    /// `queue`, or `all` (only for unscoped tokens).
    DeadSelection,
    /// The subscription whose id is the path's `{id}`.
    SubscriptionInPath,
    /// The delivery whose id is the path's `{id}`.
    DeliveryInPath,
    /// A listing: the handler shows only what the token's scopes admit.
    Listing,
    /// A new batch: its `jobs[*].queue`, `on_complete.queue` and `on_success.queue`.
    BatchQueuesInBody,
    /// The batch whose id is the path's `{id}` (every queue it names), and the body's
    /// `jobs[*].queue` (jobs added to it).
    BatchInPath,
    /// The schedule the path's `{name}` names: the queue of its job, and for a PUT also the
    /// body's `job.queue`.
    ScheduleInPath,
    /// Zaqar: the `X-Project-ID` project, and the path's `{queue_name}` in it.
    ZaqarQueue,
    /// Zaqar: the `X-Project-ID` project, and the path's `{topic_name}` in it (a topic is a
    /// queue of the project of its own namespace).
    ZaqarTopic,
    /// Zaqar: the `X-Project-ID` project only.
    ZaqarProject,
}

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub access: Access,
    pub target: Target,
}

const fn needs(capability: Capability, target: Target) -> Option<Rule> {
    Some(Rule {
        access: Access::Needs(capability),
        target,
    })
}

const PUBLIC: Option<Rule> = Some(Rule {
    access: Access::Public,
    target: Target::Nothing,
});

/// The rule of `method` on the route `route` (a template such as `/api/jobs/{id}`); `None` if
/// there is none. `HEAD` follows `GET`.
pub fn rule(method: &Method, route: &str) -> Option<Rule> {
    use Capability::{Any, Backup, Enqueue, Manage, Metrics, Pools, Read, Tokens, Work};
    use Target::*;
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    match (method, route) {
        ("GET", "/healthz" | "/api/openapi.json" | "/") => PUBLIC,
        // Counts of every queue: a token scoped to some queues may not read them.
        ("GET", "/metrics") => needs(Metrics, Nothing),

        ("POST", "/api/jobs") => needs(Enqueue, QueueInBody),
        ("POST", "/api/jobs/batch") => needs(Enqueue, JobQueuesInBody),
        ("GET", "/api/jobs") => needs(Read, QueueInQuery),
        ("GET", "/api/jobs/{id}") => needs(Read, JobInPath),
        ("DELETE", "/api/jobs/{id}") | ("POST", "/api/jobs/{id}/cancel") => {
            needs(Manage, JobInPath)
        }
        ("POST", "/api/jobs/cancel") => needs(Manage, DeadSelection),
        ("GET", "/api/workflows/{id}") => needs(Read, JobInPath),
        ("GET", "/api/stats") => needs(Read, Listing),

        ("POST", "/api/batches") => needs(Enqueue, BatchQueuesInBody),
        ("GET", "/api/batches") => needs(Read, Listing),
        ("GET", "/api/batches/{id}") => needs(Read, BatchInPath),
        ("POST", "/api/batches/{id}/jobs" | "/api/batches/{id}/close") => {
            needs(Enqueue, BatchInPath)
        }
        ("DELETE", "/api/batches/{id}") => needs(Manage, BatchInPath),

        ("POST", "/api/take" | "/api/take/stream") => needs(Work, QueuesInBody),
        ("POST", "/api/jobs/complete") => needs(Work, JobsInBody),
        (
            "POST",
            "/api/jobs/{id}/complete" | "/api/jobs/{id}/fail" | "/api/jobs/{id}/heartbeat",
        ) => needs(Work, JobInPath),

        ("GET", "/api/dead") => needs(Read, QueueInQuery),
        ("POST", "/api/dead/replay" | "/api/dead/delete") => needs(Manage, DeadSelection),

        ("GET", "/api/queues") => needs(Read, Listing),
        ("GET", "/api/queues/{name}") => needs(Read, QueueInPath),
        ("PUT", "/api/queues/{name}")
        | ("POST", "/api/queues/{name}/pause" | "/api/queues/{name}/resume") => {
            needs(Manage, QueueInPath)
        }

        ("POST", "/api/policy/preview" | "/api/schedules/preview") => needs(Any, Nothing),

        ("GET", "/api/schedules") => needs(Read, Listing),
        ("GET", "/api/schedules/{name}" | "/api/schedules/{name}/ticks") => {
            needs(Read, ScheduleInPath)
        }
        ("PUT" | "DELETE", "/api/schedules/{name}")
        | (
            "POST",
            "/api/schedules/{name}/pause"
            | "/api/schedules/{name}/resume"
            | "/api/schedules/{name}/run",
        ) => needs(Manage, ScheduleInPath),

        ("POST", "/api/queues/{name}/subscriptions") => needs(Manage, QueueInPath),
        ("GET", "/api/queues/{name}/subscriptions") => needs(Read, QueueInPath),
        ("GET", "/api/subscriptions") => needs(Read, Listing),
        (
            "GET",
            "/api/subscriptions/{id}"
            | "/api/subscriptions/{id}/deliveries"
            | "/api/subscriptions/{id}/attempts",
        ) => needs(Read, SubscriptionInPath),
        ("PATCH" | "DELETE", "/api/subscriptions/{id}")
        | (
            "POST",
            "/api/subscriptions/{id}/enable"
            | "/api/subscriptions/{id}/disable"
            | "/api/subscriptions/{id}/rotate-secret"
            | "/api/subscriptions/{id}/replay",
        ) => needs(Manage, SubscriptionInPath),
        ("GET", "/api/deliveries/{id}" | "/api/deliveries/{id}/attempts") => {
            needs(Read, DeliveryInPath)
        }
        ("POST", "/api/deliveries/{id}/replay") => needs(Manage, DeliveryInPath),

        ("POST" | "GET", "/api/tokens") | ("DELETE", "/api/tokens/{id}") => needs(Tokens, Nothing),
        ("POST", "/api/admin/backup") => needs(Backup, Nothing),
        ("GET", "/api/pools" | "/api/pools/{name}" | "/api/flavors" | "/api/flavors/{name}")
        | ("PUT" | "DELETE", "/api/pools/{name}" | "/api/flavors/{name}")
        // Moving a queue between databases is the operator's, whatever the queue.
        | ("POST", "/api/queues/{name}/move") => needs(Pools, Nothing),

        // The workers shown are those of the token's queues.
        ("GET", "/api/cluster") => needs(Read, Listing),
        // Counts of every queue together, as the dashboard's overview shows them.
        ("GET", "/api/activity") => needs(Metrics, Nothing),

        // Zaqar v2.
        ("GET", "/v2/" | "/v2/ping" | "/v2/health") => needs(Any, ZaqarProject),
        (_, "/v2" | "/v2/{*rest}") => needs(Any, ZaqarProject),
        ("GET", "/v2/queues") => needs(Read, ZaqarProject),
        ("GET", "/v2/queues/{queue_name}" | "/v2/queues/{queue_name}/stats") => {
            needs(Read, ZaqarQueue)
        }
        ("PUT" | "PATCH" | "DELETE", "/v2/queues/{queue_name}")
        | ("POST", "/v2/queues/{queue_name}/purge" | "/v2/queues/{queue_name}/share") => {
            needs(Manage, ZaqarQueue)
        }
        ("POST", "/v2/queues/{queue_name}/messages") => needs(Enqueue, ZaqarQueue),
        (
            "GET",
            "/v2/queues/{queue_name}/messages" | "/v2/queues/{queue_name}/messages/{message_id}",
        ) => needs(Read, ZaqarQueue),
        (
            "DELETE",
            "/v2/queues/{queue_name}/messages" | "/v2/queues/{queue_name}/messages/{message_id}",
        )
        | ("POST", "/v2/queues/{queue_name}/claims")
        | ("GET" | "PATCH" | "DELETE", "/v2/queues/{queue_name}/claims/{claim_id}") => {
            needs(Work, ZaqarQueue)
        }
        (
            "GET",
            "/v2/queues/{queue_name}/subscriptions"
            | "/v2/queues/{queue_name}/subscriptions/{subscription_id}",
        ) => needs(Read, ZaqarQueue),
        ("POST", "/v2/queues/{queue_name}/subscriptions")
        | ("PATCH" | "DELETE", "/v2/queues/{queue_name}/subscriptions/{subscription_id}")
        | ("PUT", "/v2/queues/{queue_name}/subscriptions/{subscription_id}/confirm") => {
            needs(Manage, ZaqarQueue)
        }
        // Zaqar v2 pools and flavors: the operator's.
        ("GET", "/v2/pools" | "/v2/flavors")
        | (
            "GET" | "PUT" | "PATCH" | "DELETE",
            "/v2/pools/{pool_name}" | "/v2/flavors/{flavor_name}",
        ) => needs(Pools, ZaqarProject),
        // Zaqar v2 topics: as queues, without claims.
        ("GET", "/v2/topics") => needs(Read, ZaqarProject),
        (
            "GET",
            "/v2/topics/{topic_name}"
            | "/v2/topics/{topic_name}/stats"
            | "/v2/topics/{topic_name}/messages"
            | "/v2/topics/{topic_name}/messages/{message_id}"
            | "/v2/topics/{topic_name}/subscriptions"
            | "/v2/topics/{topic_name}/subscriptions/{subscription_id}",
        ) => needs(Read, ZaqarTopic),
        ("POST", "/v2/topics/{topic_name}/messages") => needs(Enqueue, ZaqarTopic),
        (
            "DELETE",
            "/v2/topics/{topic_name}/messages" | "/v2/topics/{topic_name}/messages/{message_id}",
        ) => needs(Work, ZaqarTopic),
        ("PUT" | "PATCH" | "DELETE", "/v2/topics/{topic_name}")
        | ("POST", "/v2/topics/{topic_name}/purge" | "/v2/topics/{topic_name}/subscriptions")
        | ("PATCH" | "DELETE", "/v2/topics/{topic_name}/subscriptions/{subscription_id}")
        | ("PUT", "/v2/topics/{topic_name}/subscriptions/{subscription_id}/confirm") => {
            needs(Manage, ZaqarTopic)
        }
        _ => None,
    }
}
