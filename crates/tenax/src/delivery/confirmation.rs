//! Confirmation: a subscription whose subscriber has not confirmed it (Zaqar's
//! `require_confirmation`) is sent no message, only its confirmation notices.
//!
//! Invariants:
//! - The rule is the stored `confirmed` flag, read as the delivery is about to leave: a
//!   message delivery of an unconfirmed subscription ends unsent, dead with the reason, as
//!   Zaqar's notifier skips it (a message posted while unconfirmed is never sent; an operator
//!   may replay it once the subscription is confirmed). It is not the endpoint's failure: no
//!   health, breaker or budget counts it.
//! - Confirmation notices and test events go out whether or not the subscription is confirmed
//!   ([`needs_confirmation`]).

use tenax_core::model::subscription::needs_confirmation;
use tenax_core::model::{Attempt, AttemptResult, Subscription, TakenJob};

/// What an unsent delivery's attempt says.
pub const NOT_CONFIRMED: &str = "not sent: the subscription is not confirmed (PUT \
                                 .../subscriptions/{id}/confirm {\"confirmed\": true} confirms it)";

/// Whether `job`, a delivery of `subscription` as it is stored now, may be sent.
pub fn may_send(subscription: &Subscription, job: &TakenJob) -> bool {
    subscription.confirmed || !needs_confirmation(&job.kind)
}

/// The attempt recorded for `job` ended unsent at `now_ms` because its subscription is not
/// confirmed: final, with no request made.
pub fn unsent(job: &TakenJob, now_ms: u64) -> Attempt {
    Attempt {
        error: Some(NOT_CONFIRMED.to_owned()),
        ..super::send::attempt_of(job, now_ms, AttemptResult::Permanent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::fixtures::taken_job as job;
    use tenax_core::model::subscription::{
        CONFIRMATION_DELIVERY_KIND, DELIVERY_KIND, TEST_DELIVERY_KIND,
    };

    #[test]
    fn only_messages_wait_for_confirmation() {
        let mut subscription = Subscription::new("p:q".to_owned(), 0);
        assert!(may_send(&subscription, &job(DELIVERY_KIND)));
        subscription.confirmed = false;
        assert!(!may_send(&subscription, &job(DELIVERY_KIND)));
        assert!(may_send(&subscription, &job(CONFIRMATION_DELIVERY_KIND)));
        assert!(may_send(&subscription, &job(TEST_DELIVERY_KIND)));
        let attempt = unsent(&job(DELIVERY_KIND), 7);
        assert_eq!(attempt.result, AttemptResult::Permanent);
        assert_eq!((attempt.at_ms, attempt.status), (7, None));
    }
}
