//! Property tests: whatever the parameters, no delay overflows, wraps, goes negative or becomes
//! NaN; the phased functions run from MIN to MAX without decreasing; jitter stays in its band;
//! saturating curves stay under their cap; parsing never panics.

use proptest::prelude::*;
use serde_json::{Value, json};
use tenax_policy::phased::BackoffFunction;
use tenax_policy::spelling::native;
use tenax_policy::{
    Decision, Failure, MAX_DELAY_MS, MAX_RETRY_LIMIT, Outcome, Preview, RetryPolicy, SeededRandom,
    parse_duration, parse_policy,
};

const YEAR_MS: u64 = MAX_DELAY_MS / 100;

fn function() -> impl Strategy<Value = BackoffFunction> {
    prop::sample::select(BackoffFunction::ALL.to_vec())
}

fn duration() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..=10_000u64,
        0..=MAX_DELAY_MS,
        Just(MAX_DELAY_MS),
        Just(100 * YEAR_MS)
    ]
}

fn jitter() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("none")),
        Just(json!("full")),
        Just(json!("equal")),
        Just(json!("decorrelated")),
        (0.0..=100.0f64).prop_map(|p| json!({"type": "proportional", "percent": p})),
        duration().prop_map(|amount| json!({"type": "additive", "amount": amount})),
    ]
}

/// Valid native policies of every shape, with parameters up to the documented extremes.
fn native_policy() -> impl Strategy<Value = Value> {
    let shape = prop_oneof![
        (
            duration(),
            duration(),
            0..=2_000u32,
            0..=20u32,
            0..=20u32,
            0..=20u32,
            function()
        )
            .prop_map(|(lo, hi, r, a, b, c, f)| {
                let (lo, hi) = (lo.min(hi).max(1_000), hi.max(lo).max(1_000));
                json!({"type": "phased", "min_delay": lo, "max_delay": hi,
                       "num_retries": r + a + b + c, "num_no_delay_retries": a,
                       "num_min_delay_retries": b, "num_max_delay_retries": c,
                       "function": f.name()})
            }),
        (duration(), 0.0..=1_000.0f64)
            .prop_map(|(base, e)| json!({"type": "polynomial", "base": base, "exponent": e})),
        (duration(), 0.0..=1_000.0f64, 1e-9..=1e9f64).prop_map(
            |(cap, p, s)| json!({"type": "arctan", "max_delay": cap, "power": p, "scale": s})
        ),
        (duration(), 0.0..=1e6f64, 1e-9..=1e9f64).prop_map(|(cap, m, k)| {
            json!({"type": "logistic", "max_delay": cap, "midpoint": m, "steepness": k})
        }),
        duration().prop_map(|cap| json!({"type": "euler", "max_delay": cap})),
        duration().prop_map(|d| json!({"type": "fixed", "delay": d})),
        (prop::collection::vec(duration(), 1..20), any::<bool>())
            .prop_map(|(ds, rep)| json!({"type": "list", "delays": ds, "repeat_last": rep})),
        (duration(), 1.0..=1e6f64, duration()).prop_map(|(i, f, m)| {
            json!({"type": "exponential", "initial": i.min(m), "factor": f, "max": m.max(i)})
        }),
        (duration(), duration(), 0..=100u32).prop_map(|(lo, hi, n)| {
            json!({"type": "doubling", "min_backoff": lo.min(hi), "max_backoff": hi.max(lo),
                   "max_doublings": n})
        }),
    ];
    (
        shape,
        jitter(),
        prop::option::of(duration()),
        prop::option::of(0..=10_000u32),
    )
        .prop_map(|(mut shape, jitter, cap, limit)| {
            let is_list = shape["type"] == "list";
            shape["jitter"] = jitter;
            if let Some(cap) = cap {
                shape["cap"] = json!(cap);
            }
            if let Some(limit) = limit.filter(|_| !is_list) {
                shape["retry_limit"] = json!(limit);
            }
            shape
        })
}

fn parse(value: &Value) -> RetryPolicy {
    native::parse(value).unwrap_or_else(|e| panic!("generated policy {value} refused: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn phased_functions_start_at_min_end_at_max_and_never_decrease(
        function in function(),
        min in 0.0..1e12f64,
        extra in 0.0..1e12f64,
        n in 1..=100_000u32,
    ) {
        let max = min + extra;
        let min = if function == BackoffFunction::Geometric { min.max(1_000.0) } else { min };
        let max = max.max(min);
        prop_assert_eq!(function.value(1, n, min, max), min);
        let last = function.value(n, n, min, max);
        prop_assert!((last - max).abs() <= max * 1e-12, "f(N) = {} != MAX = {}", last, max);
        let step = (n / 500).max(1);
        let mut previous = min;
        for i in (1..=n).step_by(step as usize).chain([n]) {
            let value = function.value(i, n, min, max);
            prop_assert!(value.is_finite() && value >= previous && value <= max,
                "{}: f({}) = {} after {}", function.name(), i, value, previous);
            previous = value;
        }
    }

    #[test]
    fn every_delay_is_finite_bounded_and_within_its_band(policy in native_policy(), seed in any::<u64>()) {
        let policy = parse(&policy);
        let ceiling = policy.cap_ms.unwrap_or(MAX_DELAY_MS);
        let mut random = SeededRandom::new(seed);
        let mut previous_high = None;
        let mut previous = None;
        let last = policy.retry_limit.min(300);
        for r in (1..=last).chain([policy.retry_limit]) {
            let delay = policy.delay_ms(r);
            prop_assert!(delay <= ceiling);
            let (low, high) = policy.jitter_band_ms(r, previous_high);
            prop_assert!(low <= delay && delay <= high && high <= ceiling,
                "retry {}: {} not in [{}, {}]", r, delay, low, high);
            let drawn = policy.jittered_delay_ms(r, previous, &mut random);
            let (low, high) = policy.jitter_band_ms(r, previous);
            prop_assert!(low <= drawn && drawn <= high, "retry {}: draw {} not in [{}, {}]", r, drawn, low, high);
            previous_high = Some(policy.jitter_band_ms(r, previous_high).1);
            previous = Some(drawn);
        }
    }

    #[test]
    fn huge_parameters_saturate_instead_of_retrying_at_once(exponent in 0.0..=1_000.0f64, base in duration()) {
        // A peer's `attempt^4` overflowed into "retry now" near attempt 300.
        let policy = parse(&json!({"type": "polynomial", "base": base, "exponent": exponent,
            "jitter": "none", "retry_limit": 10_000}));
        let mut previous = 0;
        for r in [1, 2, 10, 100, 300, 1_000, 5_000, 10_000] {
            let delay = policy.delay_ms(r);
            prop_assert!(delay >= previous && delay >= base.min(MAX_DELAY_MS), "r = {}: {}", r, delay);
            previous = delay;
        }
    }

    #[test]
    fn arctan_never_exceeds_its_cap(cap in duration(), power in 0.0..=1_000.0f64, scale in 1e-12..=1e12f64, n in any::<u32>()) {
        let policy = parse(&json!({"type": "arctan", "max_delay": cap, "power": power, "scale": scale}));
        prop_assert!(policy.delay_ms(n) <= cap);
    }

    #[test]
    fn decisions_never_break_the_limit_or_go_back_in_time(
        policy in native_policy(),
        failure in 1..=10_001u32,
        at in 0..=u64::MAX / 2,
        back in 0..=MAX_DELAY_MS,
        outcome in prop_oneof![
            Just(Outcome::Retry),
            Just(Outcome::NotRetryable),
            any::<u64>().prop_map(|at_ms| Outcome::RetryAt { at_ms }),
            any::<u64>().prop_map(|delay_ms| Outcome::RetryIn { delay_ms }),
            any::<u64>().prop_map(|delay_ms| Outcome::Snooze { delay_ms }),
        ],
    ) {
        let policy = parse(&policy);
        let first = at.saturating_sub(back);
        let input = Failure { failure, at_ms: at, first_failure_at_ms: first, previous_delay_ms: None, outcome };
        match policy.decide(&input, &mut SeededRandom::new(u64::from(failure))) {
            Decision::Retry { retry, at_ms, delay_ms } => {
                prop_assert!(retry <= policy.retry_limit && retry == failure);
                prop_assert!(delay_ms <= MAX_DELAY_MS && at_ms == at + delay_ms);
                if let Some(window) = policy.max_window_ms {
                    prop_assert!(at_ms - first <= window);
                }
            }
            Decision::Snooze { at_ms, delay_ms } => {
                let snoozed = matches!(outcome, Outcome::Snooze { .. });
                prop_assert!(snoozed);
                prop_assert!(at_ms == at + delay_ms && delay_ms <= MAX_DELAY_MS);
            }
            Decision::Dead { .. } => {}
        }
    }

    #[test]
    fn the_canonical_form_round_trips(policy in native_policy()) {
        let policy = parse(&policy);
        prop_assert_eq!(native::parse(&native::to_json(&policy)), Ok(policy));
    }

    #[test]
    fn previews_are_consistent(policy in native_policy()) {
        let policy = parse(&policy);
        let preview = Preview::of(&policy);
        prop_assert!(preview.retries.len() <= MAX_RETRY_LIMIT as usize);
        let mut sum = 0u64;
        for row in &preview.retries {
            sum = sum.saturating_add(row.delay_ms);
            prop_assert_eq!(row.cumulative_ms, sum);
            prop_assert!(row.min_delay_ms <= row.delay_ms && row.delay_ms <= row.max_delay_ms);
        }
        prop_assert_eq!(preview.window_ms, sum);
    }

    #[test]
    fn arbitrary_json_never_panics(value in arbitrary_json()) {
        let _ = parse_policy(&value);
        let wrapped = json!({"_retry_policy": value.clone()});
        let _ = parse_policy(&wrapped);
        let sns = json!({"healthyRetryPolicy": value});
        let _ = parse_policy(&sns);
    }

    #[test]
    fn duration_text_never_panics(text in "\\PC{0,24}") {
        if let Ok(ms) = parse_duration("d", &text) {
            prop_assert!(ms <= MAX_DELAY_MS);
        }
    }
}

/// JSON values biased toward the keys the spellings read.
fn arbitrary_json() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "type",
        "min_delay",
        "max_delay",
        "num_retries",
        "function",
        "jitter",
        "cap",
        "retry_limit",
        "max_window",
        "delays",
        "base",
        "exponent",
        "minDelayTarget",
        "maxDelayTarget",
        "numRetries",
        "backoffFunction",
        "minimum_delay",
        "maximum_delay",
        "percent",
        "amount",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(vec![
            "phased",
            "polynomial",
            "list",
            "fixed",
            "geometric",
            "5s",
            "1e400s",
            "full"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6).prop_map(|m| Value::Object(
                m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
            )),
        ]
    })
}
