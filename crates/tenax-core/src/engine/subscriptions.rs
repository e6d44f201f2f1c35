//! Subscriptions, and the engine's side of webhook deliveries: taking them for a subscription,
//! and ending an attempt by the policy its deliveries follow. HTTP is the delivery runtime's
//! business (`crate::delivery`). Every change to a subscription wakes the runners through the
//! store's signal ([`crate::store::Signals::subscriptions`]).

use std::sync::Arc;

use tenax_policy::{Outcome, RetryPolicy};

use super::{ChangeError, Engine, PolicyOwner, Refusal, decide_failure, delivery_policy};
use crate::clock::UnixMs;
use crate::engine::EngineError;
use crate::metrics::webhooks::HeldReason;
use crate::model::subscription::{
    CONFIRMATION_DELIVERY_KIND, CONFIRMATION_EVENT_KIND, TEST_DELIVERY_KIND, TEST_EVENT_KIND,
    delivery_queue,
};
use crate::model::{
    Ack, Attempt, AttemptResult, DeliveryPayload, ErrorEntry, JobId, NewJob, OnDuplicate,
    QueueCounts, Status, Subscription, SubscriptionId, TakenJob,
};
use crate::store::{DecideContext, Finished, Insert, StoreError, TakeRequest, Transition};

impl Engine {
    pub async fn subscription(
        &self,
        id: SubscriptionId,
    ) -> Result<Option<Subscription>, EngineError> {
        Ok(self.store.subscription(id).await?)
    }

    /// Subscriptions of `queue` (all when `None`), in id order.
    pub async fn subscriptions(
        &self,
        queue: Option<&str>,
    ) -> Result<Vec<Subscription>, EngineError> {
        Ok(self.store.subscriptions(queue).await?)
    }

    /// Creates a subscription (its id is assigned) and returns it with `true`; or, if its
    /// endpoint must be unique in its queue and another subscription has it, returns that one
    /// with `false` (subscribe-if-absent, as Zaqar's API does).
    pub async fn create_subscription(
        &self,
        subscription: Subscription,
    ) -> Result<(Subscription, bool), EngineError> {
        Ok(self.store.insert_subscription(subscription).await?)
    }

    /// Changes a subscription atomically: `change` gets it as stored and returns the new one,
    /// `None` to leave it, or an error to refuse. Only what `change` sets changes, so the health
    /// marks the runners store meanwhile are kept. Returns it as stored after.
    pub async fn update_subscription<E: Send>(
        &self,
        id: SubscriptionId,
        change: impl Fn(&Subscription) -> Result<Option<Subscription>, E> + Send + Sync,
    ) -> Result<Subscription, ChangeError<E>> {
        let refusal = Refusal::new();
        let result = self
            .store
            .update_subscription(id, &|current| refusal.keep(change(current)))
            .await;
        refusal.result(result)
    }

    /// Deletes a subscription and its deliveries; returns how many deliveries went.
    pub async fn delete_subscription(&self, id: SubscriptionId) -> Result<usize, EngineError> {
        Ok(self.store.delete_subscription(id).await?)
    }

    /// Deletes the subscriptions whose time to live has passed; returns their ids.
    pub async fn expire_subscriptions(&self) -> Result<Vec<SubscriptionId>, EngineError> {
        let now_ms = self.now_ms();
        let mut expired = Vec::new();
        for subscription in self.store.subscriptions(None).await? {
            if subscription.expires_at_ms.is_some_and(|at| at <= now_ms) {
                match self.store.delete_subscription(subscription.id).await {
                    Ok(_) | Err(StoreError::NoSubscription(_)) => expired.push(subscription.id),
                    Err(error) => return Err(error.into()),
                }
            }
        }
        Ok(expired)
    }

    /// The policy a subscription's deliveries follow, and whose it is (`None`: the server's
    /// delivery default): the queue's when it forbids overrides, else the subscription's own,
    /// else the queue's.
    pub async fn effective_delivery_policy(
        &self,
        subscription: &Subscription,
    ) -> Result<(Arc<RetryPolicy>, Option<PolicyOwner>), EngineError> {
        let queue = self.store.queue(&subscription.queue).await?;
        Ok(match delivery_policy(subscription, queue.as_ref()) {
            Some((policy, owner)) => (policy.policy().clone(), Some(owner)),
            None => (self.settings.delivery_policy.clone(), None),
        })
    }

    /// Leases up to `max` ready deliveries of subscription `id`, for `lease_ms`; none while it
    /// is disabled or gone. Does not wait.
    pub async fn take_deliveries(
        &self,
        id: SubscriptionId,
        max: usize,
        lease_ms: u64,
    ) -> Result<Vec<TakenJob>, EngineError> {
        let queues = [delivery_queue(id)];
        let request = TakeRequest {
            subscription: Some(id),
            ..TakeRequest::new(&queues, max, lease_ms)
        };
        let jobs = self.store.take_jobs(&request, self.now_ms()).await?.jobs;
        let (jobs, _ended) = self.unended(jobs);
        Ok(self.opened_taken(jobs)?)
    }

    /// Counts by status of a subscription's deliveries.
    pub async fn delivery_counts(&self, id: SubscriptionId) -> Result<QueueCounts, EngineError> {
        Ok(self.store.queue_counts(&delivery_queue(id)).await?)
    }

    /// A delivery's attempts, oldest first.
    pub async fn attempts(&self, delivery: JobId) -> Result<Vec<Attempt>, EngineError> {
        Ok(self.store.attempts(delivery).await?)
    }

    /// Ends an attempt of delivery `ack.id` of `subscription`, answered (or failed) at
    /// `answered_at_ms`: delivered, or failed and decided by the policy, whose delay counts
    /// from then, however long the bookkeeping after the answer takes. A `Retry-After` the
    /// endpoint sent pushes the retry later, never earlier, and never past the policy's limit
    /// or window (those are decided first). `traceparent` is the delivery's (its message's
    /// trace).
    pub async fn finish_delivery(
        &self,
        subscription: &Subscription,
        ack: Ack,
        attempt: Attempt,
        answered_at_ms: UnixMs,
        traceparent: Option<&str>,
    ) -> Result<Finished, EngineError> {
        let now_ms = answered_at_ms;
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
        let finished = self
            .store
            .finish_delivery(ack, &attempt, retain, now_ms, &decide)
            .await?;
        self.observe_delivery(subscription, ack, &attempt, traceparent, &finished, now_ms);
        Ok(finished)
    }

    /// Sends a test event to subscription `id` alone: a delivery of no message, whose body
    /// says it is a test, retried by the subscription's policy like any other; its first
    /// attempt is an operator's ([`Trigger::Manual`]). Returns the delivery's id.
    pub async fn send_test_event(&self, id: SubscriptionId) -> Result<JobId, EngineError> {
        let now_ms = self.now_ms();
        let body = serde_json::json!({
            "test": true,
            "subscription": id,
            "sent_at": crate::clock::rfc3339(now_ms),
        });
        self.send_notice(id, TEST_DELIVERY_KIND, TEST_EVENT_KIND, &body)
            .await
    }

    /// Sends subscription `id` alone a confirmation notice whose body is `notice` (the API
    /// shapes it): a delivery of no message, sent whether or not the subscription is
    /// confirmed, and retried by its policy like any other. Returns the delivery's id.
    pub async fn send_confirmation(
        &self,
        id: SubscriptionId,
        notice: &serde_json::Value,
    ) -> Result<JobId, EngineError> {
        self.send_notice(
            id,
            CONFIRMATION_DELIVERY_KIND,
            CONFIRMATION_EVENT_KIND,
            notice,
        )
        .await
    }

    /// Sends subscription `id` alone a delivery of job kind `kind` carrying `body` (of message
    /// type `message_kind`), of no message. Returns the delivery's id.
    async fn send_notice(
        &self,
        id: SubscriptionId,
        kind: &str,
        message_kind: &str,
        body: &serde_json::Value,
    ) -> Result<JobId, EngineError> {
        let subscription = self
            .store
            .subscription(id)
            .await?
            .ok_or(EngineError::no_subscription(id))?;
        let now_ms = self.now_ms();
        let carried = DeliveryPayload {
            message_id: None,
            queue: subscription.queue.clone(),
            kind: message_kind.to_owned(),
            body: serde_json::value::to_raw_value(body)
                .map_err(|e| StoreError::Corrupt(format!("a {message_kind} notice: {e}")))?,
            ttl_s: None,
        };
        let payload = serde_json::value::to_raw_value(&carried)
            .map_err(|e| StoreError::Corrupt(format!("a {message_kind} notice: {e}")))?;
        let job = NewJob {
            queue: delivery_queue(id),
            kind: kind.to_owned(),
            payload,
            priority: 0,
            run_at_ms: now_ms,
            policy: None,
            unique_key: None,
            created_at_ms: now_ms,
            expires_at_ms: None,
            origin: None,
            parent: None,
            traceparent: None,
            payload_sealed: false,
            after: Vec::new(),
            on_parent_dead: Default::default(),
            batch: None,
        };
        let insert = Insert {
            job,
            parent: None,
            owner: Some(id),
            after: Vec::new(),
        };
        let facts = self.store.queue_facts(&subscription.queue).await?;
        let stored = self
            .store
            .insert_jobs(vec![insert], OnDuplicate::Refuse, facts.seen, now_ms)
            .await?;
        match stored.into_iter().next().flatten() {
            Some(enqueued) => Ok(enqueued.id),
            None => Err(EngineError::no_subscription(id)),
        }
    }
}

impl Engine {
    /// Puts back a delivery taken but not sent (its endpoint paused, its breaker opened, or
    /// its subscription's retry budget spent meanwhile): it waits until `until_ms`, and uses no
    /// attempt. No attempt is recorded; the metrics count it as held for `reason`.
    pub async fn hold_delivery(
        &self,
        subscription: SubscriptionId,
        ack: Ack,
        until_ms: UnixMs,
        reason: HeldReason,
    ) -> Result<(), EngineError> {
        let now_ms = self.now_ms();
        let decide = move |ctx: &DecideContext<'_>| {
            let mut state = ctx.state.clone();
            state.status = Status::Scheduled;
            state.run_at_ms = until_ms.max(now_ms);
            Transition {
                state,
                error: None,
                moved_to: None,
            }
        };
        self.store.fail_job(ack, now_ms, &decide).await?;
        self.observe_held(subscription, reason);
        Ok(())
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
            moved_to: None,
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
            moved_to: None,
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
