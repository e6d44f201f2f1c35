//! The overview: jobs and deliveries by status, what the cluster did over the last hour and
//! day (every server's counts on PostgreSQL; only for tokens that may read the metrics), and
//! the queues whose next job has waited longest.

use std::collections::HashSet;

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use maud::html;
use tenax_core::auth::Capability;
use tenax_core::engine::activity::MINUTES;
use tenax_core::model::StatusSlots;
use tenax_core::model::activity::{Counts, Minute};
use tenax_core::model::subscription::{is_internal_queue, subscription_of_queue};
use tenax_core::model::{QueueCounts, Status, SubscriptionId};

use super::bars::{self, Bar};
use super::layout::{self, Nav, Refresh};
use super::queues::urlencode;
use super::{Session, UiError, format};
use crate::api::AppState;

/// How many queues the "slowest" table shows.
const SLOWEST: usize = 8;

pub async fn page(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
) -> Result<Response, UiError> {
    let engine = &state.engine;
    let now = engine.now_ms();
    let counts = engine.counts().await?;
    let (mut jobs, mut deliveries) = ([0u64; 6], [0u64; 6]);
    let mut user_queues: Vec<&QueueCounts> = Vec::new();
    // A scoped token counts the deliveries of the subscriptions of its queues only.
    let subscriptions: Option<HashSet<SubscriptionId>> = if session.principal.is_scoped() {
        let all = engine.subscriptions(None).await?;
        Some(
            all.into_iter()
                .filter(|s| session.principal.admits_queue(&s.queue))
                .map(|s| s.id)
                .collect(),
        )
    } else {
        None
    };
    for queue in &counts {
        let internal = is_internal_queue(&queue.queue);
        let admitted = if internal {
            subscription_of_queue(&queue.queue).is_some_and(|id| {
                subscriptions
                    .as_ref()
                    .is_none_or(|admitted| admitted.contains(&id))
            })
        } else {
            session.principal.admits_queue(&queue.queue)
        };
        if !admitted {
            continue;
        }
        let slots = if internal { &mut deliveries } else { &mut jobs };
        for (slot, n) in slots.iter_mut().zip(slots_of(queue)) {
            *slot += n;
        }
        if !internal {
            user_queues.push(queue);
        }
    }
    // The slowest queues: those whose next job has been ready longest.
    let waiting: Vec<&QueueCounts> = user_queues
        .iter()
        .copied()
        .filter(|q| q.ready > 0)
        .collect();
    let names: Vec<String> = waiting.iter().map(|q| q.queue.clone()).collect();
    let since = engine.ready_since(&names).await?;
    let mut slowest: Vec<(&QueueCounts, u64)> = waiting
        .into_iter()
        .zip(since)
        .filter_map(|(q, at)| at.map(|at| (q, now.saturating_sub(at))))
        .collect();
    slowest.sort_by_key(|q| std::cmp::Reverse(q.1));
    slowest.truncate(SLOWEST);

    // The cluster's activity: on PostgreSQL every server's counts, from the store, so every
    // node's overview shows the same figures. They count every queue together, so only a
    // token that may read the metrics sees them (as `GET /api/activity`): a scoped token would
    // learn other projects' volumes.
    let activity = if session.principal.may(Capability::Metrics) {
        Some(Activity::of(&engine.cluster_activity(MINUTES).await?))
    } else {
        None
    };

    let content = html! {
        section.cards {
            @for (status, n) in Status::ALL.iter().zip(jobs) {
                a.card href={"/ui/jobs?status=" (status.name())} {
                    span.count { (n) }
                    span.label { "jobs " (status.name().replace('_', " ")) }
                }
            }
        }
        section.cards.small {
            @for (status, n) in Status::ALL.iter().zip(deliveries) {
                a.card href={"/ui/jobs?type=tenax.delivery&status=" (status.name())} {
                    span.count { (n) }
                    span.label { "deliveries " (status.name().replace('_', " ")) }
                }
            }
        }
        section {
            h2 { "Throughput and failures" }
            @if let Some(activity) = &activity {
                table.summary {
                    thead { tr { th {} th { "enqueued" } th { "completed" } th { "failed runs" } th { "dead" } th { "delivered" } th { "delivery failures" } } }
                    tbody {
                        @for (label, c) in [("last hour", activity.last_hour), ("last day", activity.last_day)] {
                            tr {
                                th { (label) }
                                td { (c.enqueued) } td { (c.completed) } td { (c.failed) } td { (c.dead) }
                                td { (c.delivered) } td { (c.delivery_failed) }
                            }
                        }
                    }
                }
                (bars::chart("The last hour, per minute", &activity.hour))
                (bars::chart("The last day, per hour", &activity.day))
                p.hint { "Counted by every server of the cluster (on the embedded store, since it started)." }
            } @else {
                p.hint #activity-hidden { "Not shown to this token: the throughput counts every queue together, and only a token that may read the metrics (an admin or reader token not scoped to queues or projects) sees it." }
            }
        }
        section {
            h2 { "Slowest queues" }
            @if slowest.is_empty() {
                p { "No queue has a job waiting." }
            } @else {
                table {
                    thead { tr { th { "queue" } th { "next job ready for" } th { "ready" } th { "in flight" } th { "scheduled" } } }
                    tbody {
                        @for (q, waited) in &slowest {
                            tr {
                                td { a href={"/ui/queues/" (urlencode(&q.queue))} { (q.queue) } }
                                td { (format::duration(*waited)) }
                                td { a href={"/ui/jobs?status=ready&queue=" (urlencode(&q.queue))} { (q.ready) } }
                                td { (q.in_flight) } td { (q.scheduled) }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout::page(
        &session,
        Nav::Overview,
        "Overview",
        Refresh::Live,
        content,
    ))
}

/// The cluster's activity as the overview shows it: the last hour per minute, the last day per
/// hour, and the sums of each.
struct Activity {
    hour: Vec<Bar>,
    day: Vec<Bar>,
    last_hour: Counts,
    last_day: Counts,
}

impl Activity {
    /// From the last day's minutes, oldest first.
    fn of(day_minutes: &[Minute]) -> Self {
        let hour_minutes = &day_minutes[day_minutes.len().saturating_sub(60)..];
        Self {
            hour: hour_minutes
                .iter()
                .map(|minute| Bar {
                    label: format::time(minute.at_ms),
                    counts: minute.counts,
                })
                .collect(),
            day: day_minutes
                .chunks(60)
                .map(|hour| Bar {
                    label: format!("the hour from {}", format::time(hour[0].at_ms)),
                    counts: total(hour),
                })
                .collect(),
            last_hour: total(hour_minutes),
            last_day: total(day_minutes),
        }
    }
}

/// Counts in the order of [`Status::ALL`].
pub fn slots_of(q: &QueueCounts) -> StatusSlots {
    q.slots()
}

/// The counts of `minutes`, added up.
fn total(minutes: &[Minute]) -> Counts {
    minutes.iter().fold(Counts::default(), |mut sum, minute| {
        sum.add(&minute.counts);
        sum
    })
}
