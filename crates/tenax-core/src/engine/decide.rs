//! From a failure (or a lost lease) to the job's next state, by its policy; which policy that
//! is; and when a job moves to a dead-letter queue. Pure: the engine passes these to the store,
//! which calls them under its own serialisation.

use tenax_policy::{Decision, Failure, Outcome, RetryPolicy, SeededRandom};

use crate::clock::UnixMs;
use crate::model::{
    CANCELLED_IN_FLIGHT, ErrorEntry, JobState, QueueConfig, Status, StoredPolicy, Subscription,
    Trigger,
};
use crate::store::{DecideContext, MoveTo, Transition};

/// The policy a job goes by: its own; else, for a delivery, the one its subscription's
/// deliveries follow ([`delivery_policy`]); else its queue's; else the server default.
pub fn resolve<'a>(ctx: &DecideContext<'a>, default: &'a RetryPolicy) -> &'a RetryPolicy {
    if let Some(policy) = ctx.job_policy {
        return policy;
    }
    let configured = match ctx.owner {
        Some((subscription, queue)) => delivery_policy(subscription, queue).map(|(p, _)| p),
        None => ctx.queue_config.and_then(|c| c.policy.as_ref()),
    };
    configured.map_or(default, |p| &**p.policy())
}

/// Whose policy a subscription's deliveries follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyOwner {
    Subscription,
    Queue,
}

/// The policy a subscription's deliveries follow, and whose it is, unless it is the server's
/// delivery default: its queue's when the queue forbids overrides, else the subscription's own,
/// else the queue's.
pub fn delivery_policy<'a>(
    subscription: &'a Subscription,
    queue: Option<&'a QueueConfig>,
) -> Option<(&'a StoredPolicy, PolicyOwner)> {
    let queue_policy = queue
        .and_then(|q| q.policy.as_ref())
        .map(|p| (p, PolicyOwner::Queue));
    if queue.is_some_and(|q| q.disable_overrides) {
        return queue_policy;
    }
    let own = subscription
        .policy
        .as_ref()
        .map(|p| (p, PolicyOwner::Subscription));
    own.or(queue_policy)
}

/// A worker reported a failure at `now_ms`. When the job's lease was marked cancelled, the
/// failure is the worker stopping: the job is cancelled, whatever its policy says.
pub fn decide_failure(
    ctx: &DecideContext<'_>,
    default: &RetryPolicy,
    now_ms: UnixMs,
    outcome: Outcome,
    error: ErrorEntry,
) -> Transition {
    if ctx.cancel_requested {
        return decide_cancelled(ctx, now_ms, Some(error));
    }
    let policy = resolve(ctx, default);
    let failure = ctx.state.failures.saturating_add(1);
    let first = ctx.state.first_failure_at_ms.unwrap_or(now_ms);
    // The draw depends only on the job and the failure number, so a replayed decision, a test
    // and a preview agree.
    let mut random = SeededRandom::for_retry(&ctx.id.to_string(), failure);
    let decision = policy.decide(
        &Failure {
            failure,
            at_ms: now_ms,
            first_failure_at_ms: first,
            previous_delay_ms: ctx.state.last_delay_ms,
            outcome,
        },
        &mut random,
    );
    let mut state = ctx.state.clone();
    // The run that failed was what a replay or run-now asked for; the next is by schedule.
    state.trigger = Trigger::Scheduled;
    match decision {
        Decision::Retry {
            at_ms, delay_ms, ..
        } => {
            state.status = Status::Scheduled;
            state.run_at_ms = at_ms;
            state.failures = failure;
            state.first_failure_at_ms = Some(first);
            state.last_delay_ms = Some(delay_ms);
            Transition {
                state,
                error: Some(error),
                moved_to: None,
            }
        }
        // A snooze is not a failure: no attempt is used and nothing is recorded.
        Decision::Snooze { at_ms, .. } => {
            state.status = Status::Scheduled;
            state.run_at_ms = at_ms;
            Transition {
                state,
                error: None,
                moved_to: None,
            }
        }
        Decision::Dead { reason } => {
            state.status = Status::Dead;
            state.failures = failure;
            state.first_failure_at_ms = Some(first);
            state.finished_at_ms = Some(now_ms);
            state.dead_reason = Some(reason.to_string());
            Transition {
                state,
                error: Some(error),
                moved_to: None,
            }
        }
    }
}

/// A lease expired at `now_ms`: the worker hung or vanished. This counts as a failed attempt
/// (so a job that always hangs its worker cannot run forever), but the job is ready again at
/// once: the lease already made it wait. Past the retry limit it is dead; and once its leases
/// have expired as often as its queue's dead-letter rule allows, it moves to the dead-letter
/// queue instead, ready, with a fresh count (Zaqar's `_max_claim_count`). A lease marked
/// cancelled is not run again: the job is cancelled.
pub fn decide_lease_expiry(
    ctx: &DecideContext<'_>,
    default: &RetryPolicy,
    now_ms: UnixMs,
) -> Transition {
    let policy = resolve(ctx, default);
    let failure = ctx.state.failures.saturating_add(1);
    let error = ErrorEntry {
        attempt: failure,
        at_ms: now_ms,
        message: "lease expired: the worker did not complete, fail or heartbeat in time".into(),
        detail: None,
    };
    if ctx.cancel_requested {
        return decide_cancelled(ctx, now_ms, Some(error));
    }
    let mut state: JobState = ctx.state.clone();
    state.trigger = Trigger::Scheduled;
    state.failures = failure;
    state.first_failure_at_ms = Some(ctx.state.first_failure_at_ms.unwrap_or(now_ms));
    if failure > policy.retry_limit {
        state.status = Status::Dead;
        state.finished_at_ms = Some(now_ms);
        state.dead_reason = Some(format!(
            "the lease expired and all {} retries were used",
            policy.retry_limit
        ));
    } else {
        state.status = Status::Ready;
        state.run_at_ms = now_ms;
    }
    let rule = ctx.queue_config.and_then(|c| c.dead_letter.as_ref());
    if let Some(rule) = rule.filter(|r| state.failures >= r.max_claims) {
        return Transition {
            state: JobState::new(now_ms, now_ms),
            error: None,
            moved_to: Some(MoveTo {
                queue: rule.queue.clone(),
                expires_at_ms: rule
                    .ttl_ms
                    .map(|ttl| now_ms.saturating_add(ttl))
                    .or(ctx.expires_at_ms),
            }),
        };
    }
    Transition {
        state,
        error: Some(error),
        moved_to: None,
    }
}

/// An attempt whose lease was marked cancelled ended at `now_ms` without completing (its
/// worker failed it, or its lease ended): the job is cancelled, no retry and no death, the
/// attempt's `error` recorded as any failure's is. It stays in its queue (no dead-letter move).
pub fn decide_cancelled(
    ctx: &DecideContext<'_>,
    now_ms: UnixMs,
    error: Option<ErrorEntry>,
) -> Transition {
    let mut state = ctx.state.cancelled(now_ms, CANCELLED_IN_FLIGHT);
    if error.is_some() {
        state.failures = ctx.state.failures.saturating_add(1);
        state.first_failure_at_ms = Some(ctx.state.first_failure_at_ms.unwrap_or(now_ms));
    }
    Transition {
        state,
        error,
        moved_to: None,
    }
}

#[cfg(test)]
mod tests {
    use tenax_policy::{Jitter, Shape};

    use super::*;
    use crate::model::{DeadLetter, JobId};

    fn ctx<'a>(state: &'a JobState, job_policy: Option<&'a RetryPolicy>) -> DecideContext<'a> {
        DecideContext {
            id: JobId(1),
            queue: "q",
            state,
            expires_at_ms: None,
            job_policy,
            queue_config: None,
            owner: None,
            lease: None,
            cancel_requested: false,
        }
    }

    fn error(attempt: u32) -> ErrorEntry {
        ErrorEntry {
            attempt,
            at_ms: 0,
            message: "boom".into(),
            detail: None,
        }
    }

    #[test]
    fn failures_follow_the_policy_until_dead() {
        let policy = RetryPolicy::new(Shape::Fixed { delay_ms: 1_000 })
            .with_jitter(Jitter::None)
            .with_retry_limit(2);
        let mut state = JobState::new(0, 0);
        for (now, want_run_at) in [(10_000, 11_000), (20_000, 21_000)] {
            let t = decide_failure(
                &ctx(&state, Some(&policy)),
                &policy,
                now,
                Outcome::Retry,
                error(1),
            );
            assert_eq!(t.state.status, Status::Scheduled);
            assert_eq!(t.state.run_at_ms, want_run_at);
            state = t.state;
        }
        assert_eq!(state.failures, 2);
        assert_eq!(state.first_failure_at_ms, Some(10_000));
        let t = decide_failure(
            &ctx(&state, Some(&policy)),
            &policy,
            30_000,
            Outcome::Retry,
            error(3),
        );
        assert_eq!(t.state.status, Status::Dead);
        assert_eq!(
            t.state.dead_reason.as_deref(),
            Some("all 2 retries were used")
        );
    }

    #[test]
    fn snooze_uses_no_attempt() {
        let policy = RetryPolicy::default();
        let state = JobState::new(0, 0);
        let t = decide_failure(
            &ctx(&state, None),
            &policy,
            5_000,
            Outcome::Snooze { delay_ms: 60_000 },
            error(1),
        );
        assert_eq!(
            (t.state.status, t.state.run_at_ms, t.state.failures),
            (Status::Scheduled, 65_000, 0)
        );
        assert!(t.error.is_none());
    }

    #[test]
    fn lease_expiry_counts_and_eventually_kills() {
        let policy = RetryPolicy::default().with_retry_limit(1);
        let state = JobState::new(0, 0);
        let t = decide_lease_expiry(&ctx(&state, None), &policy, 9_000);
        assert_eq!((t.state.status, t.state.failures), (Status::Ready, 1));
        let t = decide_lease_expiry(&ctx(&t.state, None), &policy, 19_000);
        assert_eq!(t.state.status, Status::Dead);
    }

    fn fixed(delay_ms: u64) -> StoredPolicy {
        StoredPolicy::new(
            RetryPolicy::new(Shape::Fixed { delay_ms })
                .with_jitter(Jitter::None)
                .with_retry_limit(5),
        )
    }

    fn queue(policy: Option<StoredPolicy>, disable_overrides: bool) -> QueueConfig {
        QueueConfig {
            policy,
            disable_overrides,
            ..QueueConfig::default()
        }
    }

    #[test]
    fn a_delivery_follows_its_subscription_unless_the_queue_forbids_it() {
        let own = fixed(1_000);
        let queues = fixed(2_000);
        let mut subscription = Subscription::new("orders".into(), 0);
        let owner_of = |s: &Subscription, q: Option<&QueueConfig>| {
            delivery_policy(s, q).map(|(p, owner)| (p.json().clone(), owner))
        };
        let json = |p: &StoredPolicy| p.json().clone();

        // Neither has one: the server's delivery default.
        assert_eq!(owner_of(&subscription, None), None);
        assert_eq!(owner_of(&subscription, Some(&queue(None, false))), None);
        // The queue's, when the subscription has none.
        let q = queue(Some(queues.clone()), false);
        assert_eq!(
            owner_of(&subscription, Some(&q)),
            Some((json(&queues), PolicyOwner::Queue))
        );
        // The subscription's own overrides the queue's...
        subscription.policy = Some(own.clone());
        assert_eq!(
            owner_of(&subscription, Some(&q)),
            Some((json(&own), PolicyOwner::Subscription))
        );
        assert_eq!(
            owner_of(&subscription, None),
            Some((json(&own), PolicyOwner::Subscription))
        );
        // ...unless the queue forbids overrides: then the queue's, or the server default.
        let strict = queue(Some(queues.clone()), true);
        assert_eq!(
            owner_of(&subscription, Some(&strict)),
            Some((json(&queues), PolicyOwner::Queue))
        );
        assert_eq!(owner_of(&subscription, Some(&queue(None, true))), None);
    }

    #[test]
    fn a_jobs_own_policy_comes_first_then_its_owners_then_its_queues() {
        let default = RetryPolicy::default();
        let own = RetryPolicy::new(Shape::Fixed { delay_ms: 7 });
        let queues = fixed(2_000);
        let subscriptions = fixed(1_000);
        let q = queue(Some(queues.clone()), false);
        let mut subscription = Subscription::new("orders".into(), 0);
        subscription.policy = Some(subscriptions.clone());
        let state = JobState::new(0, 0);
        let plain = DecideContext {
            queue_config: Some(&q),
            ..ctx(&state, None)
        };
        let delivery = DecideContext {
            owner: Some((&subscription, Some(&q))),
            ..ctx(&state, None)
        };
        assert_eq!(resolve(&ctx(&state, None), &default), &default);
        assert_eq!(resolve(&plain, &default), &**queues.policy());
        assert_eq!(resolve(&delivery, &default), &**subscriptions.policy());
        for with_own in [
            DecideContext {
                job_policy: Some(&own),
                ..plain
            },
            DecideContext {
                job_policy: Some(&own),
                ..delivery
            },
        ] {
            assert_eq!(resolve(&with_own, &default), &own);
        }
    }

    #[test]
    fn expiring_leases_move_a_job_to_the_dead_letter_queue_with_a_fresh_count() {
        let policy = RetryPolicy::default().with_retry_limit(10);
        let rule = |ttl_ms| QueueConfig {
            dead_letter: Some(DeadLetter {
                queue: "dlq".into(),
                max_claims: 2,
                ttl_ms,
            }),
            ..QueueConfig::default()
        };
        let keep = rule(None);
        let state = JobState::new(0, 0);
        let with = |state, config| DecideContext {
            queue_config: Some(config),
            expires_at_ms: Some(90_000),
            ..ctx(state, None)
        };
        // The first expiry is an ordinary failed attempt.
        let first = decide_lease_expiry(&with(&state, &keep), &policy, 1_000);
        assert_eq!(
            (first.state.status, first.state.failures),
            (Status::Ready, 1)
        );
        assert!(first.moved_to.is_none() && first.error.is_some());
        // The second reaches max_claims: moved, ready at once, with nothing counted.
        let moved = decide_lease_expiry(&with(&first.state, &keep), &policy, 2_000);
        assert_eq!(
            moved.moved_to,
            Some(MoveTo {
                queue: "dlq".into(),
                expires_at_ms: Some(90_000),
            })
        );
        assert_eq!(moved.state, JobState::new(2_000, 2_000));
        assert!(moved.error.is_none());
        // A rule with a TTL gives the moved job a new expiry.
        let fresh = rule(Some(5_000));
        let moved = decide_lease_expiry(&with(&first.state, &fresh), &policy, 2_000);
        assert_eq!(moved.moved_to.map(|m| m.expires_at_ms), Some(Some(7_000)));
    }

    #[test]
    fn a_lease_marked_cancelled_ends_in_cancelled_by_failure_or_expiry() {
        let policy = RetryPolicy::default().with_retry_limit(10);
        // A dead-letter rule that the expiry would otherwise reach: cancellation comes first.
        let config = QueueConfig {
            dead_letter: Some(DeadLetter {
                queue: "dlq".into(),
                max_claims: 1,
                ttl_ms: None,
            }),
            ..QueueConfig::default()
        };
        let state = JobState::new(0, 0);
        let marked = DecideContext {
            queue_config: Some(&config),
            cancel_requested: true,
            ..ctx(&state, None)
        };
        let failed = decide_failure(&marked, &policy, 5_000, Outcome::Retry, error(1));
        let expired = decide_lease_expiry(&marked, &policy, 6_000);
        for (transition, at) in [(failed, 5_000), (expired, 6_000)] {
            assert_eq!(transition.state.status, Status::Cancelled);
            assert_eq!(transition.state.finished_at_ms, Some(at));
            assert_eq!(transition.state.failures, 1);
            assert_eq!(
                transition.state.dead_reason.as_deref(),
                Some(CANCELLED_IN_FLIGHT)
            );
            assert!(transition.moved_to.is_none() && transition.error.is_some());
        }
        // Unmarked, the same failure is retried.
        let unmarked = DecideContext {
            cancel_requested: false,
            ..marked
        };
        let retried = decide_failure(&unmarked, &policy, 5_000, Outcome::Retry, error(1));
        assert_eq!(retried.state.status, Status::Scheduled);
    }
}
