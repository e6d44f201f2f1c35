//! The three ways to write a policy (docs/policies.md, "The three spellings"), all normalised to [`ParsedPolicy`].

mod fields;
pub mod native;
pub mod sns;
pub mod zaqar;

use serde_json::Value;

use crate::error::PolicyError;
use crate::policy::RetryPolicy;

/// Which spelling an input used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    Native,
    Sns,
    Zaqar,
}

/// A policy as parsed from any spelling, with the delivery settings SNS and Zaqar carry beside
/// the retry curve.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedPolicy {
    pub retry: RetryPolicy,
    /// SNS `throttlePolicy.maxReceivesPerSecond`.
    pub throttle_per_second: Option<u32>,
    /// SNS `requestPolicy.headerContentType`.
    pub content_type: Option<String>,
    /// SNS `disableSubscriptionOverrides` / Zaqar `ignore_subscription_override`: the queue's
    /// policy applies to every subscription.
    pub disable_overrides: bool,
}

impl From<RetryPolicy> for ParsedPolicy {
    fn from(retry: RetryPolicy) -> Self {
        Self {
            retry,
            throttle_per_second: None,
            content_type: None,
            disable_overrides: false,
        }
    }
}

/// Which spelling `value` is in: native when it has `"type"`; SNS by `healthyRetryPolicy`,
/// `throttlePolicy`, `requestPolicy`, `sicklyRetryPolicy` or `http`; Zaqar by `_retry_policy`
/// or any of its keys; native otherwise (whose error then asks for `"type"`).
pub fn detect(value: &Value) -> Spelling {
    if value.get("type").is_some() {
        Spelling::Native
    } else if sns::recognises(value) {
        Spelling::Sns
    } else if zaqar::recognises(value) {
        Spelling::Zaqar
    } else {
        Spelling::Native
    }
}

/// Parses a policy in any of the three spellings.
pub fn parse_policy(value: &Value) -> Result<ParsedPolicy, PolicyError> {
    match detect(value) {
        Spelling::Native => native::parse(value).map(ParsedPolicy::from),
        Spelling::Sns => sns::parse(value),
        Spelling::Zaqar => zaqar::parse(value),
    }
}

/// A policy written in `spelling`, or why that spelling cannot say it (SNS and Zaqar have only
/// the phased shape, in whole seconds, without jitter, cap or window). Parsing the answer gives
/// back the same retry policy.
pub fn spell(policy: &RetryPolicy, spelling: Spelling) -> Result<Value, String> {
    match spelling {
        Spelling::Native => Ok(native::to_json(policy)),
        Spelling::Sns => sns::to_json(policy),
        Spelling::Zaqar => zaqar::to_json(policy),
    }
}

/// The phased shape of a policy that SNS or Zaqar can say: nothing but the curve.
fn plain_phased<'a>(policy: &'a RetryPolicy, name: &str) -> Result<&'a crate::Phased, String> {
    let crate::Shape::Phased(phased) = &policy.shape else {
        return Err(format!(
            "{name} has only the phased policy; this one is {}",
            policy.shape.kind()
        ));
    };
    if policy.jitter != crate::Jitter::None {
        return Err(format!("{name} has no jitter"));
    }
    if policy.cap_ms.is_some_and(|cap| cap < phased.max_delay_ms) {
        return Err(format!("{name} has no cap below the maximum delay"));
    }
    if policy.max_window_ms.is_some() {
        return Err(format!("{name} has no retry window"));
    }
    if policy.retry_limit != phased.num_retries {
        return Err(format!(
            "{name} retries exactly the phases' {} times; this policy's limit is {}",
            phased.num_retries, policy.retry_limit
        ));
    }
    for (what, ms) in [
        ("minimum", phased.min_delay_ms),
        ("maximum", phased.max_delay_ms),
    ] {
        if ms % 1_000 != 0 {
            return Err(format!(
                "{name} counts delays in whole seconds; the {what} delay is {ms} ms"
            ));
        }
    }
    Ok(phased)
}

/// `value` if it parses back to `policy`'s curve, else why not.
fn checked(value: Value, policy: &RetryPolicy) -> Result<Value, String> {
    let parsed = parse_policy(&value).map_err(|e| e.to_string())?;
    if parsed.retry.shape == policy.shape && parsed.retry.retry_limit == policy.retry_limit {
        Ok(value)
    } else {
        Err("the spelling would give another policy".into())
    }
}

/// Parses policy JSON text in any of the three spellings.
pub fn parse_policy_str(text: &str) -> Result<ParsedPolicy, PolicyError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| PolicyError::new("", format!("policy is not valid JSON: {e}")))?;
    parse_policy(&value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn one_policy_three_spellings() {
        let native = json!({"type": "phased", "min_delay": "5s", "max_delay": "260s",
            "num_retries": 10, "function": "geometric"});
        let sns = json!({"healthyRetryPolicy": {"minDelayTarget": 5, "maxDelayTarget": 260,
            "numRetries": 10, "backoffFunction": "geometric"}});
        // Zaqar derives the count: (55 − 5) / 5 = 10 backoff retries.
        let zaqar = json!({"_retry_policy": {"retries_with_no_delay": 0, "minimum_delay_retries": 0,
            "maximum_delay_retries": 0, "minimum_delay": 5, "maximum_delay": 55,
            "retry_backoff_function": "geometric"}});
        assert_eq!(detect(&native), Spelling::Native);
        assert_eq!(detect(&sns), Spelling::Sns);
        assert_eq!(detect(&zaqar), Spelling::Zaqar);
        let n = parse_policy(&native).unwrap();
        let s = parse_policy(&sns).unwrap();
        assert_eq!(n.retry, s.retry);
        let z = parse_policy(&zaqar).unwrap();
        assert_eq!(z.retry.retry_limit, 10);
    }

    #[test]
    fn type_means_native_and_sns_has_several_top_keys() {
        let mixed = json!({"type": "fixed", "delay": "1s", "minimum_delay": 5});
        assert_eq!(detect(&mixed), Spelling::Native);
        assert_eq!(parse_policy(&mixed).unwrap_err().field, "minimum_delay");
        let throttle_only = json!({"throttlePolicy": {"maxReceivesPerSecond": 5}});
        assert_eq!(detect(&throttle_only), Spelling::Sns);
        assert_eq!(
            parse_policy(&throttle_only).unwrap().throttle_per_second,
            Some(5)
        );
    }

    #[test]
    fn invalid_json_is_an_error() {
        let e = parse_policy_str("{not json").unwrap_err();
        assert!(e.rule.contains("not valid JSON"), "{e}");
    }
}
