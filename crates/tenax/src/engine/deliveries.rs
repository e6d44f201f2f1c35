//! The engine's side of webhook deliveries: subscriptions, and ending an attempt by the
//! subscription's policy. HTTP is the delivery workers' business (`crate::delivery`).

use std::sync::Arc;

use tenax_policy::{Outcome, RetryPolicy};

use super::{Engine, decide_failure};
use crate::model::subscription::is_internal_queue;
use crate::model::{Attempt, AttemptResult, ErrorEntry, Status, Subscription, SubscriptionId};
use crate::store::{Ack, DecideContext, Finished, StoreError, Transition};

impl Engine {
    /// The server default for jobs of `queue`: the delivery default for deliveries.
    pub fn default_policy_for(&self, queue: &str) -> &Arc<RetryPolicy> {
        if is_internal_queue(queue) {
            &self.settings.delivery_policy
        } else {
            &self.settings.default_policy
        }
    }

    /// The policy a subscription's deliveries follow: the queue's when it forbids overrides,
    /// else the subscription's own, else the queue's, else the server's delivery default.
    pub async fn effective_delivery_policy(&self, id: SubscriptionId) -> Arc<RetryPolicy> {
        match self.store.delivery_policy(id).await {
            Some(policy) => policy,
            None => self.settings.delivery_policy.clone(),
        }
    }

    /// Creates (id 0) or replaces a subscription; `policy` is its policy parsed.
    pub async fn put_subscription(
        &self,
        subscription: Subscription,
        policy: Option<Arc<RetryPolicy>>,
    ) -> Result<Subscription, StoreError> {
        self.store.put_subscription(subscription, policy).await
    }

    /// Ends an attempt of delivery `ack.id`: delivered, or failed and decided by the policy.
    /// A `Retry-After` the endpoint sent pushes the retry later, never earlier, and never past
    /// the policy's limit or window (those are decided first).
    pub async fn finish_delivery(
        &self,
        ack: Ack,
        attempt: Attempt,
    ) -> Result<Finished, StoreError> {
        let now_ms = self.now_ms();
        let retain = self.settings.completed_retention_ms > 0;
        let default = self.settings.delivery_policy.clone();
        let outcome = match attempt.result {
            AttemptResult::Permanent => Outcome::NotRetryable,
            AttemptResult::Retryable | AttemptResult::Delivered => Outcome::Retry,
        };
        // Only a failure is recorded as an error; a success costs no encoding here.
        let failed = attempt.result != AttemptResult::Delivered;
        let error = ErrorEntry {
            attempt: attempt.attempt,
            at_ms: now_ms,
            message: if failed {
                attempt_message(&attempt)
            } else {
                String::new()
            },
            detail: failed
                .then(|| serde_json::to_value(&attempt).ok())
                .flatten(),
        };
        let retry_after_ms = attempt.retry_after_ms;
        let message = error.message.clone();
        let decide = move |ctx: &DecideContext<'_>| {
            let error = ErrorEntry {
                attempt: ctx.state.failures + 1,
                ..error.clone()
            };
            let transition = decide_failure(ctx, &default, now_ms, outcome, error);
            let transition = explain_death(transition, outcome, &message);
            respect_retry_after(transition, now_ms, retry_after_ms)
        };
        self.store
            .finish_delivery(ack, &attempt, retain, now_ms, &decide)
            .await
    }
}

/// An attempt in words, for the delivery's error history.
fn attempt_message(attempt: &Attempt) -> String {
    match (attempt.status, &attempt.error) {
        (Some(status), _) => format!("the endpoint answered HTTP {status}"),
        (None, Some(error)) => error.clone(),
        (None, None) => "the attempt failed".into(),
    }
}

/// A delivery dead of a permanent failure says what the endpoint did ("the endpoint answered
/// HTTP 404, which is not retried") rather than the policy's generic "the failure was marked
/// not retryable". An exhausted policy's reason ("all 7 retries were used") stays as it is: the
/// attempts show what each retry got.
fn explain_death(mut transition: Transition, outcome: Outcome, message: &str) -> Transition {
    if transition.state.status == Status::Dead && outcome == Outcome::NotRetryable {
        transition.state.dead_reason = Some(format!("{message}, which is not retried"));
    }
    transition
}

/// Moves a scheduled retry to at least `now + retry_after`.
fn respect_retry_after(
    mut transition: Transition,
    now_ms: u64,
    retry_after_ms: Option<u64>,
) -> Transition {
    if let Some(wait) = retry_after_ms {
        let earliest = now_ms.saturating_add(wait);
        if transition.state.status == Status::Scheduled && transition.state.run_at_ms < earliest {
            transition.state.run_at_ms = earliest;
        }
    }
    transition
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobState;

    #[test]
    fn a_dead_delivery_says_what_the_endpoint_did() {
        let t = |status: Status, reason: &str| Transition {
            state: JobState {
                status,
                dead_reason: Some(reason.into()),
                ..JobState::new(0, 0)
            },
            error: None,
        };
        let reason = |t: Transition| t.state.dead_reason.unwrap_or_default();
        let permanent = t(Status::Dead, "the failure was marked not retryable");
        assert_eq!(
            reason(explain_death(
                permanent,
                Outcome::NotRetryable,
                "the endpoint answered HTTP 404"
            )),
            "the endpoint answered HTTP 404, which is not retried"
        );
        let exhausted = t(Status::Dead, "all 3 retries were used");
        assert_eq!(
            reason(explain_death(
                exhausted,
                Outcome::Retry,
                "the endpoint answered HTTP 500"
            )),
            "all 3 retries were used"
        );
        let scheduled = t(Status::Scheduled, "unchanged");
        assert_eq!(
            reason(explain_death(scheduled, Outcome::Retry, "HTTP 500")),
            "unchanged"
        );
    }

    #[test]
    fn retry_after_only_pushes_later() {
        let mut state = JobState::new(0, 0);
        state.status = Status::Scheduled;
        state.run_at_ms = 5_000;
        let t = |state: &JobState| Transition {
            state: state.clone(),
            error: None,
        };
        assert_eq!(
            respect_retry_after(t(&state), 1_000, Some(10_000))
                .state
                .run_at_ms,
            11_000
        );
        assert_eq!(
            respect_retry_after(t(&state), 1_000, Some(1_000))
                .state
                .run_at_ms,
            5_000
        );
        assert_eq!(
            respect_retry_after(t(&state), 1_000, None).state.run_at_ms,
            5_000
        );
        state.status = Status::Dead;
        assert_eq!(
            respect_retry_after(t(&state), 1_000, Some(10_000))
                .state
                .status,
            Status::Dead
        );
    }
}
