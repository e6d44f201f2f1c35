//! Subscriptions as `tenax subscriptions` prints them: a list, and one subscription in words
//! (its effective policy, what holds its deliveries back, how its endpoint answers).

use std::fmt::Write as _;

use tenax_client::{BreakerState, EndpointHealth, RetryBudget, Subscription, SubscriptionHealth};
use tenax_policy::format_duration;
use tenax_policy::spelling::native;

use super::output::{or, time, time_or};
use super::policy::describe;
use super::terminal::safe;

pub fn list_table(subscriptions: &[Subscription]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6}  {:<20} {:<8} {:<8} {:>8} {:>8}  endpoint",
        "id", "queue", "enabled", "health", "pending", "dead"
    );
    for s in subscriptions {
        let _ = writeln!(
            out,
            "{:>6}  {:<20} {:<8} {:<8} {:>8} {:>8}  {}",
            s.id,
            safe(&s.queue),
            if s.enabled { "yes" } else { "no" },
            if s.health.healthy { "ok" } else { "failing" },
            s.deliveries.unfinished(),
            s.deliveries.dead,
            safe(&s.endpoint),
        );
    }
    out
}

pub fn subscription_table(s: &Subscription) -> String {
    let mut rows: Vec<(&str, String)> = Vec::new();
    rows.push(("id", s.id.to_string()));
    rows.push(("queue", safe(&s.queue).into_owned()));
    rows.push(("endpoint", safe(&s.endpoint).into_owned()));
    let enabled = match (s.enabled, &s.disabled_reason) {
        (true, _) => "yes".to_owned(),
        (false, Some(reason)) => format!("no: {}", safe(reason)),
        (false, None) => "no".to_owned(),
    };
    rows.push(("enabled", enabled));
    let policy = native::parse(&s.effective_policy)
        .map(|p| describe(&p))
        .unwrap_or_else(|_| s.effective_policy.to_string());
    rows.push((
        "policy",
        format!("{} (from the {})", safe(&policy), s.policy_source),
    ));
    rows.push(("", safe(&s.effective_policy.to_string()).into_owned()));
    rows.push((
        "throttle",
        s.throttle_per_second
            .map_or_else(|| "none".to_owned(), |n| format!("{n} per second")),
    ));
    rows.push(("content type", safe(&s.content_type).into_owned()));
    rows.push(("secret", safe(&s.secret).into_owned()));
    let headers: Vec<String> = s
        .headers
        .iter()
        .map(|(name, value)| format!("{}: {}", safe(name), safe(value)))
        .collect();
    rows.push(("headers", headers.join(", ")));
    rows.push((
        "retried",
        match &s.retryable_statuses {
            Some(list) => list
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            None => "5xx, 408, 429, connection errors, timeouts".to_owned(),
        },
    ));
    rows.push(("concurrency", or(s.max_concurrency, "endpoint's bound")));
    rows.push((
        "auto-disable",
        match s.auto_disable_after_ms {
            0 => "never".to_owned(),
            ms => format!("after {} failing", format_duration(ms)),
        },
    ));
    rows.push(("retry budget", retry_budget(s.retry_budget, &s.health)));
    rows.push(("format", s.format.to_string()));
    rows.push(("health", health(&s.health)));
    rows.push(("endpoint", endpoint(&s.health.endpoint)));
    let d = &s.deliveries;
    rows.push((
        "deliveries",
        format!(
            "{} scheduled, {} ready, {} in flight, {} completed, {} dead",
            d.scheduled, d.ready, d.in_flight, d.completed, d.dead
        ),
    ));
    rows.push(("created", time(s.created_at)));
    rows.push(("updated", time(s.updated_at)));
    let mut out = String::new();
    for (key, value) in rows {
        let _ = writeln!(out, "{key:<13} {value}");
    }
    out
}

fn retry_budget(budget: Option<RetryBudget>, health: &SubscriptionHealth) -> String {
    let Some(budget) = budget else {
        return "none".to_owned();
    };
    let mut words = format!(
        "retries at most {}% of the attempts in any {} (or {})",
        budget.percent,
        format_duration(budget.window_ms),
        budget.min_retries
    );
    if let Some(used) = health.retry_budget {
        let _ = write!(
            words,
            "; now {} of {} on this server",
            used.retries, used.attempts
        );
    }
    words
}

/// The endpoint's pause and circuit breaker in words.
fn endpoint(e: &EndpointHealth) -> String {
    let mut words = safe(&e.origin).into_owned();
    if let Some(until) = e.paused_until {
        let _ = write!(
            words,
            "; paused until {} (it answered {})",
            time(until),
            or(e.paused_by_status, "null")
        );
    }
    match e.breaker {
        BreakerState::Open => {
            let _ = write!(
                words,
                "; circuit breaker open until {} ({}; opened {} times in a row)",
                time_or(e.breaker_until, "?"),
                or(e.breaker_reason.as_deref(), "failures"),
                e.breaker_trips
            );
        }
        BreakerState::HalfOpen => {
            let _ = write!(words, "; circuit breaker half-open: one probe on its way");
        }
        _ => {
            let _ = write!(words, "; circuit breaker closed");
            if e.breaker_failures > 0 {
                let _ = write!(words, " ({} failures in a row here)", e.breaker_failures);
            }
        }
    }
    words
}

fn health(h: &SubscriptionHealth) -> String {
    let mut words = if h.healthy {
        "ok".to_owned()
    } else {
        format!("failing since {}", time_or(h.failing_since, "?"))
    };
    if h.consecutive_failures > 0 {
        let _ = write!(words, "; {} failures in a row", h.consecutive_failures);
    }
    if h.recent_attempts > 0 {
        let _ = write!(
            words,
            "; {:.0}% of the last {} failed",
            h.recent_failure_rate * 100.0,
            h.recent_attempts
        );
    }
    if let Some(at) = h.last_success_at {
        let _ = write!(words, "; last success {}", time(at));
    }
    words
}
