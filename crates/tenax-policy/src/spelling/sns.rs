//! The AWS SNS `DeliveryPolicy` spelling, verbatim: a subscription's
//! `{"healthyRetryPolicy", "throttlePolicy", "requestPolicy", ...}` or a topic's
//! `{"http": {"defaultHealthyRetryPolicy", "disableSubscriptionOverrides", ...}}`. Seconds.

use serde_json::Value;

use super::ParsedPolicy;
use super::fields::Fields;
use crate::error::PolicyError;
use crate::phased::{BackoffFunction, Phased, PhasedNames};
use crate::policy::RetryPolicy;
use crate::shape::Shape;

/// SNS allows at most 100 retries.
pub const SNS_MAX_RETRIES: u32 = 100;
/// SNS caps a single delay at one hour.
pub const SNS_MAX_DELAY_MS: u64 = 3_600_000;
/// SNS caps the sum of all delays at one hour.
pub const SNS_MAX_TOTAL_MS: u64 = 3_600_000;
/// AWS's own message for a policy whose delays add up to more than an hour.
pub const SNS_TOTAL_MESSAGE: &str = "Total policy retry time cannot be greater than 3600 seconds";

/// True when `value` is spelt the SNS way.
pub fn recognises(value: &Value) -> bool {
    [
        "healthyRetryPolicy",
        "throttlePolicy",
        "requestPolicy",
        "sicklyRetryPolicy",
        "http",
    ]
    .iter()
    .any(|key| value.get(key).is_some())
}

pub fn parse(value: &Value) -> Result<ParsedPolicy, PolicyError> {
    let mut top = Fields::new(value, "")?;
    if top.has("http") {
        let http = top.get("http").unwrap_or(&Value::Null);
        top.finish()?;
        let mut fields = Fields::new(http, "http")?;
        let mut parsed = parse_parts(
            &mut fields,
            "defaultHealthyRetryPolicy",
            "defaultThrottlePolicy",
            "defaultRequestPolicy",
        )?;
        fields.ignore(&["defaultSicklyRetryPolicy"]);
        parsed.disable_overrides = fields
            .boolean("disableSubscriptionOverrides")?
            .unwrap_or(false);
        fields.finish()?;
        return Ok(parsed);
    }
    let parsed = parse_parts(
        &mut top,
        "healthyRetryPolicy",
        "throttlePolicy",
        "requestPolicy",
    )?;
    top.ignore(&["sicklyRetryPolicy", "guaranteed"]);
    top.finish()?;
    Ok(parsed)
}

/// The policy as an SNS subscription `DeliveryPolicy`, or why SNS cannot say it.
pub fn to_json(policy: &RetryPolicy) -> Result<Value, String> {
    let p = super::plain_phased(policy, "SNS")?;
    let value = serde_json::json!({"healthyRetryPolicy": {
        "minDelayTarget": p.min_delay_ms / 1_000,
        "maxDelayTarget": p.max_delay_ms / 1_000,
        "numRetries": p.num_retries,
        "numNoDelayRetries": p.num_no_delay_retries,
        "numMinDelayRetries": p.num_min_delay_retries,
        "numMaxDelayRetries": p.num_max_delay_retries,
        "backoffFunction": p.function.name(),
    }});
    super::checked(value, policy)
}

fn parse_parts(
    fields: &mut Fields<'_>,
    healthy: &'static str,
    throttle: &'static str,
    request: &'static str,
) -> Result<ParsedPolicy, PolicyError> {
    let phased = match fields.get(healthy) {
        Some(v) => parse_healthy(v, &fields.path(healthy))?,
        None => Phased::sns_default(),
    };
    let throttle_per_second = match fields.get(throttle) {
        Some(v) => {
            let mut t = Fields::new(v, &fields.path(throttle))?;
            let rate = t.count("maxReceivesPerSecond")?;
            if rate == Some(0) {
                return Err(PolicyError::new(
                    t.path("maxReceivesPerSecond"),
                    "must be at least 1",
                ));
            }
            t.finish()?;
            rate
        }
        None => None,
    };
    let content_type = match fields.get(request) {
        Some(v) => {
            let mut r = Fields::new(v, &fields.path(request))?;
            let content_type = r.string("headerContentType")?.map(str::to_owned);
            r.finish()?;
            content_type
        }
        None => None,
    };
    let retry = RetryPolicy::new(Shape::Phased(phased));
    Ok(ParsedPolicy {
        retry,
        throttle_per_second,
        content_type,
        disable_overrides: false,
    })
}

fn parse_healthy(value: &Value, path: &str) -> Result<Phased, PolicyError> {
    let mut f = Fields::new(value, path)?;
    let default = Phased::sns_default();
    let function = match f.string("backoffFunction")? {
        Some(name) => BackoffFunction::parse(&f.path("backoffFunction"), name)?,
        None => default.function,
    };
    let phased = Phased {
        min_delay_ms: f.seconds("minDelayTarget")?.unwrap_or(default.min_delay_ms),
        max_delay_ms: f.seconds("maxDelayTarget")?.unwrap_or(default.max_delay_ms),
        num_retries: f.count("numRetries")?.unwrap_or(default.num_retries),
        num_no_delay_retries: f.count("numNoDelayRetries")?.unwrap_or(0),
        num_min_delay_retries: f.count("numMinDelayRetries")?.unwrap_or(0),
        num_max_delay_retries: f.count("numMaxDelayRetries")?.unwrap_or(0),
        function,
    };
    f.finish()?;

    let field = |name: &str| format!("{path}.{name}");
    if phased.min_delay_ms < 1_000 {
        return Err(PolicyError::new(
            field("minDelayTarget"),
            format!("must be at least 1 second, got {} ms", phased.min_delay_ms),
        ));
    }
    if phased.max_delay_ms > SNS_MAX_DELAY_MS {
        return Err(PolicyError::new(
            field("maxDelayTarget"),
            format!(
                "must be at most 3600 seconds, got {} ms",
                phased.max_delay_ms
            ),
        ));
    }
    // The shared rules name fields by full path; SNS has exactly two places a policy can sit.
    let names = if path.starts_with("http") {
        &DEFAULT_NAMES
    } else {
        &NAMES
    };
    phased.validate(names, SNS_MAX_RETRIES)?;
    let total: u64 = (1..=phased.num_retries)
        .map(|r| crate::duration::clamp_ms(phased.delay_ms(r)))
        .sum();
    if total > SNS_MAX_TOTAL_MS {
        return Err(PolicyError::new(path, SNS_TOTAL_MESSAGE));
    }
    Ok(phased)
}

const NAMES: PhasedNames = PhasedNames {
    min_delay: "healthyRetryPolicy.minDelayTarget",
    max_delay: "healthyRetryPolicy.maxDelayTarget",
    num_retries: "healthyRetryPolicy.numRetries",
    num_no_delay_retries: "healthyRetryPolicy.numNoDelayRetries",
    num_min_delay_retries: "healthyRetryPolicy.numMinDelayRetries",
    num_max_delay_retries: "healthyRetryPolicy.numMaxDelayRetries",
    function: "healthyRetryPolicy.backoffFunction",
};

const DEFAULT_NAMES: PhasedNames = PhasedNames {
    min_delay: "http.defaultHealthyRetryPolicy.minDelayTarget",
    max_delay: "http.defaultHealthyRetryPolicy.maxDelayTarget",
    num_retries: "http.defaultHealthyRetryPolicy.numRetries",
    num_no_delay_retries: "http.defaultHealthyRetryPolicy.numNoDelayRetries",
    num_min_delay_retries: "http.defaultHealthyRetryPolicy.numMinDelayRetries",
    num_max_delay_retries: "http.defaultHealthyRetryPolicy.numMaxDelayRetries",
    function: "http.defaultHealthyRetryPolicy.backoffFunction",
};

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_example_of_policies_md() {
        let parsed = parse(
            &json!({"healthyRetryPolicy": {"minDelayTarget": 5, "maxDelayTarget": 260,
            "numRetries": 10, "numNoDelayRetries": 0, "numMinDelayRetries": 0,
            "numMaxDelayRetries": 0, "backoffFunction": "geometric"},
            "throttlePolicy": {"maxReceivesPerSecond": 10},
            "requestPolicy": {"headerContentType": "application/json"}}),
        )
        .unwrap();
        assert_eq!(parsed.throttle_per_second, Some(10));
        assert_eq!(parsed.content_type.as_deref(), Some("application/json"));
        assert_eq!(parsed.retry.retry_limit, 10);
        assert_eq!(parsed.retry.delay_ms(2), 7_756);
    }

    #[test]
    fn defaults_and_ignored_keys() {
        let parsed = parse(&json!({"healthyRetryPolicy": {"backoffFunction": "LINEAR"},
            "sicklyRetryPolicy": null, "guaranteed": false}))
        .unwrap();
        assert_eq!(parsed.retry.shape, Shape::Phased(Phased::sns_default()));
        let topic = parse(
            &json!({"http": {"defaultHealthyRetryPolicy": {"numRetries": 5},
            "disableSubscriptionOverrides": true}}),
        )
        .unwrap();
        assert!(topic.disable_overrides);
        assert_eq!(topic.retry.retry_limit, 5);
    }

    #[test]
    fn sns_spelling_round_trips_or_says_why_not() {
        let parsed = parse(&json!({"healthyRetryPolicy": {"minDelayTarget": 5,
            "maxDelayTarget": 260, "numRetries": 10, "backoffFunction": "geometric"}}))
        .unwrap();
        let written = to_json(&parsed.retry).unwrap();
        assert_eq!(parse(&written).unwrap().retry, parsed.retry);
        let half = crate::spelling::native::parse(&json!({"type": "phased", "min_delay": 1500,
            "max_delay": "10s", "num_retries": 3}))
        .unwrap();
        assert!(to_json(&half).unwrap_err().contains("whole seconds"));
        let long = crate::spelling::native::parse(&json!({"type": "phased", "min_delay": "20s",
            "max_delay": "3600s", "num_retries": 100}))
        .unwrap();
        assert!(to_json(&long).unwrap_err().ends_with(SNS_TOTAL_MESSAGE));
        let jittered = crate::spelling::native::parse(&json!({"type": "phased", "min_delay": "5s",
            "max_delay": "10s", "num_retries": 3, "jitter": "full"}))
        .unwrap();
        assert!(to_json(&jittered).unwrap_err().contains("no jitter"));
    }

    #[test]
    fn aws_rules() {
        let e = parse(
            &json!({"healthyRetryPolicy": {"minDelayTarget": 20, "maxDelayTarget": 3600,
            "numRetries": 100, "backoffFunction": "linear"}}),
        )
        .unwrap_err();
        assert_eq!(e.rule, SNS_TOTAL_MESSAGE);
        assert_eq!(e.field, "healthyRetryPolicy");
        let e = parse(&json!({"healthyRetryPolicy": {"numRetries": 101, "minDelayTarget": 1, "maxDelayTarget": 1}}))
            .unwrap_err();
        assert_eq!(e.field, "healthyRetryPolicy.numRetries");
        let e = parse(&json!({"healthyRetryPolicy": {"minDelayTarget": 0}})).unwrap_err();
        assert_eq!(e.field, "healthyRetryPolicy.minDelayTarget");
        let e = parse(&json!({"healthyRetryPolicy": {"minDelayTarget": 30, "maxDelayTarget": 20}}))
            .unwrap_err();
        assert_eq!(e.field, "healthyRetryPolicy.maxDelayTarget");
        let e = parse(
            &json!({"healthyRetryPolicy": {"numRetries": 3, "numNoDelayRetries": 2,
            "numMaxDelayRetries": 2}}),
        )
        .unwrap_err();
        assert_eq!(e.field, "healthyRetryPolicy.numRetries");
        let e = parse(&json!({"healthyRetryPolicy": {"backoffFunction": "cubic"}})).unwrap_err();
        assert_eq!(e.field, "healthyRetryPolicy.backoffFunction");
        let e = parse(&json!({"healthyRetryPolicy": {"minDelayTarget": "5"}})).unwrap_err();
        assert_eq!(e.field, "healthyRetryPolicy.minDelayTarget");
        let e = parse(
            &json!({"healthyRetryPolicy": {}, "throttlePolicy": {"maxReceivesPerSecond": 0}}),
        )
        .unwrap_err();
        assert_eq!(e.field, "throttlePolicy.maxReceivesPerSecond");
        let e = parse(&json!({"healthyRetryPolicy": {"minDelay": 3}})).unwrap_err();
        assert_eq!(e.field, "healthyRetryPolicy.minDelay");
    }
}
