//! OpenStack Zaqar's `_retry_policy` (a subscription's `options`, or queue metadata). Seconds.
//!
//! Zaqar has no retry count: its backoff phase has floor((maximum_delay − minimum_delay) / 5)
//! retries. Tenax keeps that count, and computes the delays with the phased table (docs/policies.md), so
//! that the phase really ends at `maximum_delay`.

use serde_json::Value;

use super::ParsedPolicy;
use super::fields::Fields;
use crate::error::PolicyError;
use crate::phased::{BackoffFunction, Phased, PhasedNames};
use crate::policy::{MAX_RETRY_LIMIT, RetryPolicy};
use crate::shape::Shape;

/// The keys of a Zaqar retry policy; any one of them marks the spelling.
pub const KEYS: [&str; 7] = [
    "retries_with_no_delay",
    "minimum_delay_retries",
    "minimum_delay",
    "maximum_delay",
    "maximum_delay_retries",
    "retry_backoff_function",
    "ignore_subscription_override",
];

/// Zaqar's step between backoff retries, which fixes the backoff phase's length.
const ZAQAR_STEP_MS: u64 = 5_000;

const NAMES: PhasedNames = PhasedNames {
    min_delay: "minimum_delay",
    max_delay: "maximum_delay",
    num_retries: "maximum_delay",
    num_no_delay_retries: "retries_with_no_delay",
    num_min_delay_retries: "minimum_delay_retries",
    num_max_delay_retries: "maximum_delay_retries",
    function: "retry_backoff_function",
};

/// True when `value` is spelt the Zaqar way (bare, or wrapped as `{"_retry_policy": {...}}`).
pub fn recognises(value: &Value) -> bool {
    value.get("_retry_policy").is_some()
        || value
            .as_object()
            .is_some_and(|map| KEYS.iter().any(|key| map.contains_key(*key)))
}

/// The policy as a Zaqar `_retry_policy`, or why Zaqar cannot say it (its backoff phase has
/// (maximum_delay − minimum_delay) / 5 s retries, whatever one wants).
pub fn to_json(policy: &RetryPolicy) -> Result<Value, String> {
    let p = super::plain_phased(policy, "Zaqar")?;
    let backoff = (p.max_delay_ms - p.min_delay_ms.min(p.max_delay_ms)) / ZAQAR_STEP_MS;
    if u64::from(p.backoff_retries()) != backoff {
        return Err(format!(
            "Zaqar's backoff phase has (maximum_delay − minimum_delay) / 5 s = {backoff} retries; \
             this policy's has {}",
            p.backoff_retries()
        ));
    }
    let value = serde_json::json!({"_retry_policy": {
        "retries_with_no_delay": p.num_no_delay_retries,
        "minimum_delay_retries": p.num_min_delay_retries,
        "minimum_delay": p.min_delay_ms / 1_000,
        "maximum_delay": p.max_delay_ms / 1_000,
        "maximum_delay_retries": p.num_max_delay_retries,
        "retry_backoff_function": p.function.name(),
    }});
    super::checked(value, policy)
}

pub fn parse(value: &Value) -> Result<ParsedPolicy, PolicyError> {
    if let Some(inner) = value.get("_retry_policy") {
        let mut wrapper = Fields::new(value, "")?;
        wrapper.ignore(&["_retry_policy"]);
        wrapper.finish()?;
        return parse(inner).map_err(|e| e.within("_retry_policy"));
    }
    let mut f = Fields::new(value, "")?;
    let a = f.count("retries_with_no_delay")?.unwrap_or(3);
    let b = f.count("minimum_delay_retries")?.unwrap_or(3);
    let min_delay_ms = f.seconds("minimum_delay")?.unwrap_or(5_000);
    let max_delay_ms = f.seconds("maximum_delay")?.unwrap_or(30_000);
    let c = f.count("maximum_delay_retries")?.unwrap_or(3);
    let function = match f.string("retry_backoff_function")? {
        Some(name) => BackoffFunction::parse("retry_backoff_function", name)?,
        None => BackoffFunction::Linear,
    };
    let disable_overrides = f.boolean("ignore_subscription_override")?.unwrap_or(false);
    f.finish()?;

    if max_delay_ms < min_delay_ms {
        return Err(PolicyError::new(
            "maximum_delay",
            format!(
                "must be greater than or equal to minimum_delay ({min_delay_ms} ms), got {max_delay_ms} ms"
            ),
        ));
    }
    let backoff = (max_delay_ms - min_delay_ms) / ZAQAR_STEP_MS;
    let total = u64::from(a) + u64::from(b) + u64::from(c) + backoff;
    let num_retries = u32::try_from(total)
        .ok()
        .filter(|r| *r <= MAX_RETRY_LIMIT)
        .ok_or_else(|| {
            PolicyError::new(
                "maximum_delay",
                format!(
                    "gives {total} retries in all (the backoff phase has (maximum_delay − minimum_delay) / 5 s = {backoff}); at most {MAX_RETRY_LIMIT} are allowed"
                ),
            )
        })?;
    let phased = Phased {
        min_delay_ms,
        max_delay_ms,
        num_retries,
        num_no_delay_retries: a,
        num_min_delay_retries: b,
        num_max_delay_retries: c,
        function,
    };
    phased.validate(&NAMES, MAX_RETRY_LIMIT)?;
    Ok(ParsedPolicy {
        retry: RetryPolicy::new(Shape::Phased(phased)),
        throttle_per_second: None,
        content_type: None,
        disable_overrides,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn zaqar_defaults() {
        let parsed = parse(
            &json!({"retries_with_no_delay": 3, "minimum_delay_retries": 3,
            "minimum_delay": 5, "maximum_delay": 30, "maximum_delay_retries": 3,
            "retry_backoff_function": "linear", "ignore_subscription_override": false}),
        )
        .unwrap();
        let same = parse(&json!({"_retry_policy": {}})).unwrap();
        assert_eq!(parsed, same);
        // 3 immediate, 3 at 5 s, 5 from 5 s to 30 s, 3 at 30 s.
        let delays: Vec<u64> = (1..=parsed.retry.retry_limit)
            .map(|r| parsed.retry.delay_ms(r))
            .collect();
        assert_eq!(
            delays,
            [
                0, 0, 0, 5_000, 5_000, 5_000, 5_000, 11_250, 17_500, 23_750, 30_000, 30_000,
                30_000, 30_000
            ]
        );
    }

    #[test]
    fn zaqar_spelling_round_trips_or_says_why_not() {
        let parsed = parse(
            &json!({"_retry_policy": {"minimum_delay": 5, "maximum_delay": 55,
            "retry_backoff_function": "geometric"}}),
        )
        .unwrap();
        let written = to_json(&parsed.retry).unwrap();
        assert_eq!(parse(&written).unwrap().retry, parsed.retry);
        let native = crate::spelling::native::parse(&json!({"type": "phased", "min_delay": "5s",
            "max_delay": "60s", "num_retries": 3}))
        .unwrap();
        let why = to_json(&native).unwrap_err();
        assert!(why.contains("= 11 retries"), "{why}");
        let fixed =
            crate::spelling::native::parse(&json!({"type": "fixed", "delay": "1s"})).unwrap();
        assert!(to_json(&fixed).unwrap_err().contains("only the phased"));
    }

    #[test]
    fn zaqar_errors() {
        let e = parse(&json!({"minimum_delay": 30, "maximum_delay": 5})).unwrap_err();
        assert_eq!(e.field, "maximum_delay");
        let e =
            parse(&json!({"_retry_policy": {"retry_backoff_function": "fibonacci"}})).unwrap_err();
        assert_eq!(e.field, "_retry_policy.retry_backoff_function");
        let e = parse(&json!({"minimum_delay": -1})).unwrap_err();
        assert_eq!(e.field, "minimum_delay");
        let e = parse(&json!({"maximum_delay": 1e9})).unwrap_err();
        assert_eq!(e.field, "maximum_delay");
        let e = parse(&json!({"minimum_delay": 5, "retries_with_no_delay": "3"})).unwrap_err();
        assert_eq!(e.field, "retries_with_no_delay");
    }
}
