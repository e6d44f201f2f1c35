//! Tenax's own spelling: `{"type": "<shape>", ...shape parameters, "jitter", "cap",
//! "retry_limit", "max_window"}`. Durations are integer milliseconds or human strings.

use serde_json::{Map, Value, json};

use super::fields::Fields;
use crate::duration::{MAX_DELAY_MS, parse_duration};
use crate::error::PolicyError;
use crate::jitter::Jitter;
use crate::phased::{BackoffFunction, Phased, PhasedNames};
use crate::policy::{DEFAULT_RETRY_LIMIT, MAX_RETRY_LIMIT, RetryPolicy};
use crate::polynomial::{DEFAULT_JITTER_MS, Polynomial};
use crate::saturating::{Arctan, Euler, Logistic};
use crate::shape::Shape;
use crate::simple::{DelayList, DoublingThenLinear, Exponential};

const SHAPES: &str =
    "phased, polynomial, arctan, logistic, euler, fixed, list, exponential or doubling";

const PHASED_NAMES: PhasedNames = PhasedNames {
    min_delay: "min_delay",
    max_delay: "max_delay",
    num_retries: "num_retries",
    num_no_delay_retries: "num_no_delay_retries",
    num_min_delay_retries: "num_min_delay_retries",
    num_max_delay_retries: "num_max_delay_retries",
    function: "function",
};

/// Parses the native spelling.
pub fn parse(value: &Value) -> Result<RetryPolicy, PolicyError> {
    let mut fields = Fields::new(value, "")?;
    let kind = fields
        .string("type")?
        .ok_or_else(|| PolicyError::new("type", format!("is required: one of {SHAPES}")))?;
    let shape = parse_shape(kind, &mut fields)?;
    let default_jitter = match shape {
        Shape::Polynomial(_) => Jitter::Additive {
            amount_ms: DEFAULT_JITTER_MS,
        },
        _ => Jitter::None,
    };
    let jitter = match fields.get("jitter") {
        Some(v) => parse_jitter(v, &fields.path("jitter"))?,
        None => default_jitter,
    };
    let cap_ms = fields.duration("cap")?;
    let max_window_ms = fields.duration("max_window")?;
    let retry_limit = fields.count("retry_limit")?;
    fields.finish()?;

    let natural = shape.natural_retry_limit();
    if let (Some(limit), Some(len), Shape::List(_)) = (retry_limit, natural, &shape) {
        if limit > len {
            return Err(PolicyError::new(
                "retry_limit",
                format!(
                    "must be at most {len}, the length of \"delays\", unless \"repeat_last\" is true; got {limit}"
                ),
            ));
        }
    }
    let retry_limit = match (retry_limit, natural, max_window_ms) {
        (Some(limit), _, _) => limit,
        (None, Some(natural), _) => natural,
        // A window alone is the stop condition: as many retries as fit in it.
        (None, None, Some(_)) => MAX_RETRY_LIMIT,
        (None, None, None) => DEFAULT_RETRY_LIMIT,
    };
    if retry_limit > MAX_RETRY_LIMIT {
        return Err(PolicyError::new(
            "retry_limit",
            format!("must be at most {MAX_RETRY_LIMIT}, got {retry_limit}"),
        ));
    }
    Ok(RetryPolicy {
        shape,
        jitter,
        cap_ms,
        retry_limit,
        max_window_ms,
    })
}

fn parse_shape(kind: &str, fields: &mut Fields<'_>) -> Result<Shape, PolicyError> {
    Ok(match kind {
        "phased" => {
            let default = Phased::sns_default();
            let function = match fields.string("function")? {
                Some(name) => BackoffFunction::parse("function", name)?,
                None => default.function,
            };
            let phased = Phased {
                min_delay_ms: fields
                    .duration("min_delay")?
                    .unwrap_or(default.min_delay_ms),
                max_delay_ms: fields
                    .duration("max_delay")?
                    .unwrap_or(default.max_delay_ms),
                num_retries: fields.count("num_retries")?.unwrap_or(default.num_retries),
                num_no_delay_retries: fields.count("num_no_delay_retries")?.unwrap_or(0),
                num_min_delay_retries: fields.count("num_min_delay_retries")?.unwrap_or(0),
                num_max_delay_retries: fields.count("num_max_delay_retries")?.unwrap_or(0),
                function,
            };
            phased.validate(&PHASED_NAMES, MAX_RETRY_LIMIT)?;
            Shape::Phased(phased)
        }
        "polynomial" => {
            let default = Polynomial::default();
            Shape::Polynomial(Polynomial {
                base_ms: fields.duration("base")?.unwrap_or(default.base_ms),
                exponent: fields
                    .number(
                        "exponent",
                        0.0..=f64::MAX,
                        "must be a finite number at least 0",
                    )?
                    .unwrap_or(default.exponent),
            })
        }
        "arctan" => {
            let default = Arctan::default();
            Shape::Arctan(Arctan {
                cap_ms: fields.duration("max_delay")?.unwrap_or(default.cap_ms),
                power: fields
                    .number(
                        "power",
                        0.0..=f64::MAX,
                        "must be a finite number at least 0",
                    )?
                    .unwrap_or(default.power),
                scale: positive(fields, "scale")?.unwrap_or(default.scale),
            })
        }
        "logistic" => {
            let default = Logistic::default();
            Shape::Logistic(Logistic {
                cap_ms: fields.duration("max_delay")?.unwrap_or(default.cap_ms),
                midpoint: fields
                    .number(
                        "midpoint",
                        0.0..=f64::MAX,
                        "must be a finite number at least 0",
                    )?
                    .unwrap_or(default.midpoint),
                steepness: positive(fields, "steepness")?.unwrap_or(default.steepness),
            })
        }
        "euler" => Shape::Euler(Euler {
            cap_ms: fields
                .duration("max_delay")?
                .unwrap_or(Euler::default().cap_ms),
        }),
        "fixed" => Shape::Fixed {
            delay_ms: fields
                .duration("delay")?
                .ok_or_else(|| PolicyError::new("delay", "is required for the fixed policy"))?,
        },
        "list" => {
            let repeat_last = fields.boolean("repeat_last")?.unwrap_or(false);
            let Some(value) = fields.get("delays") else {
                return Err(PolicyError::new(
                    "delays",
                    "is required for the list policy",
                ));
            };
            let Some(items) = value.as_array().filter(|items| !items.is_empty()) else {
                return Err(PolicyError::new(
                    "delays",
                    "must be a non-empty array of durations",
                ));
            };
            if items.len() > MAX_RETRY_LIMIT as usize {
                return Err(PolicyError::new(
                    "delays",
                    format!(
                        "must have at most {MAX_RETRY_LIMIT} entries, got {}",
                        items.len()
                    ),
                ));
            }
            let delays_ms = items
                .iter()
                .enumerate()
                .map(|(i, v)| crate::duration::duration_from_json(&format!("delays[{i}]"), v))
                .collect::<Result<Vec<_>, _>>()?;
            Shape::List(DelayList {
                delays_ms,
                repeat_last,
            })
        }
        "exponential" => {
            let initial_ms = fields.duration("initial")?.unwrap_or(1_000);
            let factor = fields
                .number(
                    "factor",
                    1.0..=f64::MAX,
                    "must be a finite number at least 1",
                )?
                .unwrap_or(2.0);
            let max_ms = fields.duration("max")?.unwrap_or(MAX_DELAY_MS);
            if max_ms < initial_ms {
                return Err(PolicyError::new(
                    "max",
                    format!("must be at least \"initial\" ({initial_ms} ms), got {max_ms} ms"),
                ));
            }
            Shape::Exponential(Exponential {
                initial_ms,
                factor,
                max_ms,
            })
        }
        "doubling" => {
            let default = DoublingThenLinear::default();
            let curve = DoublingThenLinear {
                min_backoff_ms: fields
                    .duration("min_backoff")?
                    .unwrap_or(default.min_backoff_ms),
                max_backoff_ms: fields
                    .duration("max_backoff")?
                    .unwrap_or(default.max_backoff_ms),
                max_doublings: fields
                    .count("max_doublings")?
                    .unwrap_or(default.max_doublings),
            };
            if curve.max_backoff_ms < curve.min_backoff_ms {
                return Err(PolicyError::new(
                    "max_backoff",
                    format!(
                        "must be at least \"min_backoff\" ({} ms), got {} ms",
                        curve.min_backoff_ms, curve.max_backoff_ms
                    ),
                ));
            }
            Shape::DoublingThenLinear(curve)
        }
        other => {
            return Err(PolicyError::new(
                "type",
                format!("unknown policy type \"{other}\" (use {SHAPES})"),
            ));
        }
    })
}

fn positive(fields: &mut Fields<'_>, key: &'static str) -> Result<Option<f64>, PolicyError> {
    let value = fields.number(
        key,
        f64::MIN_POSITIVE..=f64::MAX,
        "must be a finite number above 0",
    )?;
    Ok(value)
}

/// `"none" | "full" | "equal" | "decorrelated"`, a duration (additive jitter of that amount), or
/// `{"type": "proportional", "percent": p}` / `{"type": "additive", "amount": d}`.
fn parse_jitter(value: &Value, path: &str) -> Result<Jitter, PolicyError> {
    let named = |name: &str| match name {
        "none" => Some(Jitter::None),
        "full" => Some(Jitter::Full),
        "equal" => Some(Jitter::Equal),
        "decorrelated" => Some(Jitter::Decorrelated),
        _ => None,
    };
    match value {
        Value::String(name) => match named(name.as_str()) {
            Some(jitter) => Ok(jitter),
            None => parse_duration(path, name).map(|amount_ms| Jitter::Additive { amount_ms }).map_err(|_| {
                PolicyError::new(
                    path,
                    format!("unknown jitter \"{name}\" (use none, full, equal, decorrelated, a duration for additive jitter, or an object for proportional)"),
                )
            }),
        },
        Value::Number(_) => {
            crate::duration::duration_from_json(path, value).map(|amount_ms| Jitter::Additive { amount_ms })
        }
        Value::Object(_) => {
            let mut fields = Fields::new(value, path)?;
            let kind = fields.string("type")?.ok_or_else(|| {
                PolicyError::new(format!("{path}.type"), "is required: none, full, equal, decorrelated, proportional or additive")
            })?;
            let jitter = match kind {
                "proportional" => Jitter::Proportional {
                    percent: fields
                        .number("percent", 0.0..=100.0, "must be a percentage from 0 to 100")?
                        .ok_or_else(|| PolicyError::new(fields.path("percent"), "is required for proportional jitter"))?,
                },
                "additive" => Jitter::Additive {
                    amount_ms: fields
                        .duration("amount")?
                        .ok_or_else(|| PolicyError::new(fields.path("amount"), "is required for additive jitter"))?,
                },
                other => named(other).ok_or_else(|| {
                    PolicyError::new(
                        fields.path("type"),
                        format!("unknown jitter \"{other}\" (use none, full, equal, decorrelated, proportional or additive)"),
                    )
                })?,
            };
            fields.finish()?;
            Ok(jitter)
        }
        other => Err(PolicyError::new(
            path,
            format!("must be a jitter name, a duration or an object, got {}", crate::duration::json_kind(other)),
        )),
    }
}

/// The canonical native spelling of a policy: every parameter explicit, durations in integer
/// milliseconds. [`parse`] of this value gives back an equal policy.
pub fn to_json(policy: &RetryPolicy) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!(policy.shape.kind()));
    let shape = match &policy.shape {
        Shape::Phased(p) => json!({
            "min_delay": p.min_delay_ms,
            "max_delay": p.max_delay_ms,
            "num_retries": p.num_retries,
            "num_no_delay_retries": p.num_no_delay_retries,
            "num_min_delay_retries": p.num_min_delay_retries,
            "num_max_delay_retries": p.num_max_delay_retries,
            "function": p.function.name(),
        }),
        Shape::Polynomial(p) => json!({"base": p.base_ms, "exponent": p.exponent}),
        Shape::Arctan(a) => json!({"max_delay": a.cap_ms, "power": a.power, "scale": a.scale}),
        Shape::Logistic(l) => {
            json!({"max_delay": l.cap_ms, "midpoint": l.midpoint, "steepness": l.steepness})
        }
        Shape::Euler(e) => json!({"max_delay": e.cap_ms}),
        Shape::Fixed { delay_ms } => json!({"delay": delay_ms}),
        Shape::List(l) => json!({"delays": l.delays_ms, "repeat_last": l.repeat_last}),
        Shape::Exponential(e) => {
            json!({"initial": e.initial_ms, "factor": e.factor, "max": e.max_ms})
        }
        Shape::DoublingThenLinear(d) => json!({
            "min_backoff": d.min_backoff_ms,
            "max_backoff": d.max_backoff_ms,
            "max_doublings": d.max_doublings,
        }),
    };
    if let Value::Object(params) = shape {
        out.extend(params);
    }
    let jitter = match &policy.jitter {
        Jitter::Proportional { percent } => json!({"type": "proportional", "percent": percent}),
        Jitter::Additive { amount_ms } => json!({"type": "additive", "amount": amount_ms}),
        other => json!(other.name()),
    };
    out.insert("jitter".into(), jitter);
    if let Some(cap) = policy.cap_ms {
        out.insert("cap".into(), json!(cap));
    }
    out.insert("retry_limit".into(), json!(policy.retry_limit));
    if let Some(window) = policy.max_window_ms {
        out.insert("max_window".into(), json!(window));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(value: Value) -> PolicyError {
        parse(&value).unwrap_err()
    }

    #[test]
    fn polynomial_defaults() {
        let policy = parse(&json!({"type": "polynomial"})).unwrap();
        assert_eq!(policy, RetryPolicy::default());
    }

    #[test]
    fn durations_in_every_spelling() {
        let a = parse(
            &json!({"type": "phased", "min_delay": "5s", "max_delay": "4m20s",
            "num_retries": 10, "function": "Geometric"}),
        );
        let b = parse(
            &json!({"type": "phased", "min_delay": 5000, "max_delay": 260000,
            "num_retries": 10, "function": "geometric"}),
        );
        assert_eq!(a, b);
        assert!(a.is_ok());
    }

    #[test]
    fn errors_name_the_field_and_rule() {
        let e = err(json!({"type": "phased", "min_delay": "10s", "max_delay": "5s"}));
        assert_eq!(e.field, "max_delay");
        assert!(e.rule.contains("greater than or equal to min_delay"), "{e}");
        let e = err(json!({"type": "phased", "num_retries": 2, "num_no_delay_retries": 3}));
        assert_eq!(e.field, "num_retries");
        let e = err(json!({"type": "phased", "function": "cubic"}));
        assert_eq!(e.field, "function");
        let e = err(json!({"type": "phased", "function": "geometric", "min_delay": 0}));
        assert_eq!(e.field, "min_delay");
        let e = err(json!({"type": "polynomial", "exponent": -1}));
        assert_eq!(e.field, "exponent");
        let e = err(json!({"type": "polynomial", "bsae": "15s"}));
        assert_eq!(e.field, "bsae");
        assert!(e.rule.starts_with("unknown field"), "{e}");
        let e = err(
            json!({"type": "fixed", "delay": "1s", "jitter": {"type": "proportional", "percent": 150}}),
        );
        assert_eq!(e.field, "jitter.percent");
        let e = err(json!({"type": "fixed", "delay": "1s", "jitter": "wobbly"}));
        assert_eq!(e.field, "jitter");
        let e = err(json!({"type": "fixed", "delay": "1s", "retry_limit": 100_001}));
        assert_eq!(e.field, "retry_limit");
        let e = err(json!({"type": "list", "delays": ["1s", "2x"]}));
        assert_eq!(e.field, "delays[1]");
        let e = err(json!({"type": "list", "delays": ["1s"], "retry_limit": 2}));
        assert_eq!(e.field, "retry_limit");
        let e = err(json!({"delay": "1s"}));
        assert_eq!(e.field, "type");
        let e = err(json!({"type": "fixed", "delay": "200y"}));
        assert_eq!(e.field, "delay");
        let e = err(json!([1, 2]));
        assert!(e.rule.contains("JSON object"), "{e}");
    }

    #[test]
    fn jitter_spellings() {
        let jitter = |j: Value| {
            parse(&json!({"type": "fixed", "delay": 1000, "jitter": j})).map(|p| p.jitter)
        };
        assert_eq!(jitter(json!("full")), Ok(Jitter::Full));
        assert_eq!(
            jitter(json!("30s")),
            Ok(Jitter::Additive { amount_ms: 30_000 })
        );
        assert_eq!(jitter(json!(250)), Ok(Jitter::Additive { amount_ms: 250 }));
        assert_eq!(jitter(json!({"type": "equal"})), Ok(Jitter::Equal));
        assert_eq!(
            jitter(json!({"type": "proportional", "percent": 10})),
            Ok(Jitter::Proportional { percent: 10.0 })
        );
    }

    #[test]
    fn stop_conditions() {
        let p = parse(&json!({"type": "fixed", "delay": "1m", "max_window": "1h"}));
        assert_eq!(
            p.map(|p| (p.retry_limit, p.max_window_ms)),
            Ok((MAX_RETRY_LIMIT, Some(3_600_000)))
        );
        let p = parse(&json!({"type": "fixed", "delay": "1m"}));
        assert_eq!(p.map(|p| p.retry_limit), Ok(DEFAULT_RETRY_LIMIT));
        let p = parse(&json!({"type": "phased", "num_retries": 7}));
        assert_eq!(p.map(|p| p.retry_limit), Ok(7));
    }

    #[test]
    fn canonical_form_round_trips() {
        let inputs = [
            json!({"type": "phased", "min_delay": "5s", "max_delay": "260s", "num_retries": 13,
                   "num_no_delay_retries": 1, "num_min_delay_retries": 1, "num_max_delay_retries": 1,
                   "function": "exponential", "jitter": "equal", "cap": "1m", "max_window": "2h"}),
            json!({"type": "polynomial", "exponent": 2.5}),
            json!({"type": "arctan"}),
            json!({"type": "logistic", "midpoint": 3}),
            json!({"type": "euler", "max_delay": "10m", "jitter": {"type": "proportional", "percent": 20}}),
            json!({"type": "list", "delays": [0, "5s", "5m"], "repeat_last": true, "retry_limit": 9}),
            json!({"type": "exponential", "initial": "1s", "factor": 3, "max": "1h", "jitter": "decorrelated"}),
            json!({"type": "doubling", "min_backoff": "10s", "max_backoff": "300s", "max_doublings": 3}),
        ];
        for input in inputs {
            let policy = parse(&input).unwrap();
            assert_eq!(parse(&to_json(&policy)), Ok(policy), "{input}");
        }
    }

    /// Found by fuzzing: serde_json's default number parser is not exact, so a factor written
    /// back as `3e+30` was read as 3.0000000000000003e30: a policy stored as JSON text (as the
    /// store keeps it) was not the same policy once read back. The crate asks serde_json for
    /// `float_roundtrip`.
    #[test]
    fn canonical_text_round_trips_floats() {
        let inputs = [
            r#"{"type": "exponential", "initial": "1s", "factor": 2999999999999999999999999999999, "max": "1m"}"#,
            r#"{"type": "exponential", "factor": 3e30}"#,
            r#"{"type": "polynomial", "exponent": 0.30000000000000004}"#,
            r#"{"type": "logistic", "midpoint": 1.7976931348623157e308, "steepness": 2.2250738585072014e-308}"#,
        ];
        for input in inputs {
            let policy = parse(&serde_json::from_str(input).unwrap()).unwrap();
            let text = to_json(&policy).to_string();
            let again = parse(&serde_json::from_str(&text).unwrap());
            assert_eq!(again, Ok(policy), "{input} written as {text}");
        }
    }
}
