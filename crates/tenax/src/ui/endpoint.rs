//! An endpoint's state, wherever a subscription is shown: paused by its `Retry-After` (until
//! when), its circuit breaker open (why, and until when), or probing. The state is kept per
//! origin and shared by every subscription that posts there, so a page says whose it is.

use maud::{Markup, html};
use tenax_core::clock::parse_rfc3339;
use tenax_core::model::BreakerState;

use super::format;
use crate::delivery::EndpointView;

/// The endpoint's state in a few words, each with its time; "accepting" when nothing holds it.
pub fn state(view: &EndpointView, now: u64) -> Markup {
    let held = view.paused_until.is_some() || view.breaker != BreakerState::Closed;
    html! {
        span.endpoint-states data-breaker=(view.breaker.name()) {
            @if let Some(until) = &view.paused_until {
                span.endpoint-state.paused {
                    "paused by Retry-After"
                    @if let Some(status) = view.paused_by_status { " (" (status) ")" }
                    ", resumes " (when(until, now))
                }
            }
            @match view.breaker {
                BreakerState::Open => span.endpoint-state.open {
                    "circuit open"
                    @if let Some(reason) = &view.breaker_reason { ": " (format::excerpt(reason, 120)) }
                    @if let Some(until) = &view.breaker_until { "; a probe may go " (when(until, now)) }
                    @if view.breaker_trips > 1 { " (opened " (view.breaker_trips) " times in a row)" }
                },
                BreakerState::HalfOpen => span.endpoint-state.probing {
                    "probing: one delivery tests the endpoint"
                    @if let Some(until) = &view.breaker_until { "; counted as lost if unanswered " (when(until, now)) }
                },
                BreakerState::Closed => {},
            }
            @if !held { span.endpoint-state.accepting { "accepting" } }
        }
    }
}

/// A time the API spells in RFC 3339, as "in 42s" with the time itself as its tooltip.
fn when(at: &str, now: u64) -> Markup {
    html! {
        @match parse_rfc3339(at) {
            Some(ms) => span title=(at) { (format::relative(ms, now)) },
            None => (at),
        }
    }
}

#[cfg(test)]
mod tests {
    use tenax_core::clock::rfc3339;

    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn each_state_in_words_with_its_time() {
        let shown = |view: &EndpointView| state(view, NOW).into_string();
        assert!(shown(&EndpointView::default()).contains("accepting"));
        let probing = EndpointView {
            breaker: BreakerState::HalfOpen,
            breaker_until: Some(rfc3339(NOW + 5_000)),
            ..EndpointView::default()
        };
        let text = shown(&probing);
        assert!(text.contains("probing") && text.contains("in 5s"), "{text}");
        assert!(!text.contains("accepting"), "{text}");
        let open = EndpointView {
            breaker: BreakerState::Open,
            breaker_until: Some(rfc3339(NOW + 80_000)),
            breaker_trips: 3,
            breaker_reason: Some("the endpoint answered HTTP 502".into()),
            paused_until: Some(rfc3339(NOW + 1_000)),
            paused_by_status: Some(503),
            ..EndpointView::default()
        };
        let text = shown(&open);
        for part in [
            "paused by Retry-After (503), resumes",
            "circuit open: the endpoint answered HTTP 502; a probe may go",
            "in 1m 20s",
            "(opened 3 times in a row)",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }
}
