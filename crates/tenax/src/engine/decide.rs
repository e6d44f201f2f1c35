//! From a failure (or a lost lease) to the job's next state, by its policy. Pure: the engine
//! passes these to the store, which calls them under its own serialisation.

use tenax_policy::{Decision, Failure, Outcome, RetryPolicy, SeededRandom};

use crate::clock::UnixMs;
use crate::model::{ErrorEntry, JobState, Status};
use crate::store::{DecideContext, Transition};

/// The policy that applies: the job's own, else its queue's, else the server default.
pub fn resolve<'a>(ctx: &DecideContext<'a>, default: &'a RetryPolicy) -> &'a RetryPolicy {
    ctx.job_policy.or(ctx.queue_policy).unwrap_or(default)
}

/// A worker reported a failure at `now_ms`.
pub fn decide_failure(
    ctx: &DecideContext<'_>,
    default: &RetryPolicy,
    now_ms: UnixMs,
    outcome: Outcome,
    error: ErrorEntry,
) -> Transition {
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
            }
        }
        // A snooze is not a failure: no attempt is used and nothing is recorded.
        Decision::Snooze { at_ms, .. } => {
            state.status = Status::Scheduled;
            state.run_at_ms = at_ms;
            Transition { state, error: None }
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
            }
        }
    }
}

/// A lease expired at `now_ms`: the worker hung or vanished. This counts as a failed attempt
/// (so a job that always hangs its worker cannot run forever), but the job is ready again at
/// once: the lease already made it wait. Past the retry limit it is dead.
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
    let mut state: JobState = ctx.state.clone();
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
    Transition {
        state,
        error: Some(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenax_policy::{Jitter, Shape};

    fn ctx<'a>(state: &'a JobState, job_policy: Option<&'a RetryPolicy>) -> DecideContext<'a> {
        DecideContext {
            id: 1,
            queue: "q",
            state,
            job_policy,
            queue_policy: None,
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
}
