//! Entry points for the fuzz targets in `fuzz/` and for the corpus replay test
//! (`crates/tenax-fuzzing/tests/fuzz_corpus.rs`). Not an API: hidden from the docs, and free to change
//! with the request types it reaches into.
//!
//! Each function takes the raw bytes a client could send, runs them through the same code the
//! server runs (the decoders, the validation, the policy parser and engine arithmetic), and
//! panics only when an invariant is broken:
//! - nothing panics or overflows (the fuzz targets are built with overflow checks);
//! - every rejection is a client error (4xx), never a 5xx;
//! - every policy that is accepted survives its canonical form (`native::to_json`, as JSON text
//!   too, which is how the store keeps it), and its decisions, delays and preview stay within
//!   [`MAX_DELAY_MS`] and its retry limit.
//!
//! Handlers that need the engine or the network (storing, resolving an endpoint) are not run;
//! their request-side steps are, in the handlers' order.

use serde_json::{Map, Value, json};
use tenax::api::Limits;
use tenax::api::error::ApiError;
use tenax::api::extract::decode;
use tenax::api::jobs::{BatchRequest, EnqueueRequest, to_enqueue};
use tenax::api::queues::{UpdateQueue, queue_change};
use tenax::api::schedules::{PutSchedule, schedule_spec};
use tenax::api::subscriptions::{MAX_CONCURRENCY, SubscriptionRequest, subscription_change};
use tenax::api::work::{FailRequest, TakeRequest, failure_report, take_params};
use tenax::api::zaqar::error::ZaqarError;
use tenax::api::zaqar::limits::Limits as ZaqarLimits;
use tenax::api::zaqar::messages::read_post;
use tenax::api::zaqar::metadata::{self, MAX_MESSAGE_DELAY, MIN_MESSAGE_TTL, MessageSettings};
use tenax::api::zaqar::patch;
use tenax::api::zaqar::request::json_body;
use tenax_core::engine::Enqueue;
use tenax_core::model::{QueueConfig, StoredPolicy};
use tenax_policy::spelling::{ParsedPolicy, native, sns, zaqar as zaqar_spelling};
use tenax_policy::{
    DeadReason, Decision, Failure, FixedRandom, MAX_DELAY_MS, MAX_RETRY_LIMIT, Outcome, Preview,
    RetryPolicy, Shape, format_duration, parse_duration, parse_policy, parse_policy_str,
};

/// "Now" for every target: a fixed time, so that a corpus file always takes the same path.
const NOW_MS: u64 = 1_795_260_337_123;

/// What a fuzz target runs with one input.
pub type Run = fn(&[u8]);

/// The fuzz targets, by the name of their directory under `fuzz/corpus/`, and the function
/// each calls with one input.
pub const TARGETS: [(&str, Run); 5] = [
    ("policy", policy),
    ("duration", duration),
    ("native_body", native_bodies),
    ("zaqar_patch", zaqar_patch),
    ("zaqar_post", zaqar_post),
];

/// A request body of the native API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeBody {
    /// `POST /api/jobs`: decoded, then [`to_insert`].
    Enqueue,
    /// `POST /api/jobs/batch`: decoded, then each job through [`to_insert`].
    Batch,
    /// `POST /api/jobs/{id}/fail`: decoded, its outcome decided by the default policy.
    Fail,
    /// `POST /api/take` (and `/api/take/stream`).
    Take,
    /// `PUT /api/queues/{name}`.
    QueueUpdate,
    /// `POST /api/queues/{name}/subscriptions` and `PATCH /api/subscriptions/{id}`, without
    /// resolving the endpoint.
    Subscription,
    /// `PUT /api/schedules/{name}`: checked, and its next ticks walked.
    Schedule,
}

impl NativeBody {
    pub const ALL: [Self; 7] = [
        Self::Enqueue,
        Self::Batch,
        Self::Fail,
        Self::Take,
        Self::QueueUpdate,
        Self::Subscription,
        Self::Schedule,
    ];
}

/// The server's default limits (`tenax serve` without flags).
fn limits() -> Limits {
    Limits {
        max_request_bytes: 16 * 1024 * 1024,
        request_timeout: std::time::Duration::from_secs(30),
        max_payload_bytes: 1024 * 1024,
        default_lease_ms: 30_000,
        max_lease_ms: 12 * 3_600_000,
    }
}

fn client_error(what: &str, error: &ApiError) {
    assert!(
        error.status.is_client_error(),
        "{what}: a rejection must be a 4xx, got {error:?}"
    );
}

fn zaqar_client_error(what: &str, error: &ZaqarError) {
    assert!(
        error.status.is_client_error(),
        "{what}: a rejection must be a 4xx, got {error:?}"
    );
}

/// One native request body, as its handler reads it.
pub fn native_body(kind: NativeBody, bytes: &[u8]) {
    let what = format!("{kind:?}");
    let result = match kind {
        NativeBody::Enqueue => enqueue(bytes),
        NativeBody::Batch => batch(bytes),
        NativeBody::Fail => fail(bytes),
        NativeBody::Take => take(bytes),
        NativeBody::QueueUpdate => queue_update(bytes),
        NativeBody::Subscription => subscription(bytes),
        NativeBody::Schedule => schedule(bytes),
    };
    if let Err(error) = result {
        client_error(&what, &error);
    }
}

/// The `native_body` target: the same bytes as every native request body.
pub fn native_bodies(bytes: &[u8]) {
    for kind in NativeBody::ALL {
        native_body(kind, bytes);
    }
}

fn enqueue(bytes: &[u8]) -> Result<(), ApiError> {
    let request: EnqueueRequest = decode(bytes)?;
    check_enqueue(&to_enqueue(request, "", NOW_MS, &limits())?);
    Ok(())
}

fn batch(bytes: &[u8]) -> Result<(), ApiError> {
    let request: BatchRequest = decode(bytes)?;
    if request.jobs.is_empty() {
        return Err(ApiError::invalid("jobs", "must hold at least one job"));
    }
    for (i, job) in request.jobs.into_iter().enumerate() {
        check_enqueue(&to_enqueue(job, &format!("jobs[{i}]"), NOW_MS, &limits())?);
    }
    Ok(())
}

fn check_enqueue(enqueue: &Enqueue) {
    assert!(enqueue.job.payload.get().len() <= limits().max_payload_bytes);
    if let Some(policy) = &enqueue.job.policy {
        check_stored(policy);
    }
    if let Some(limit) = enqueue.retry_limit {
        assert!(limit <= MAX_RETRY_LIMIT);
        check_policy(&RetryPolicy::default().with_retry_limit(limit));
    }
}

/// A stored policy's JSON must parse back to the policy it runs by (as JSON text too, which is
/// how the store keeps it), and the policy must keep every rule.
fn check_stored(stored: &StoredPolicy) {
    let text = serde_json::to_string(stored).unwrap_or_default();
    let back: Result<StoredPolicy, _> = serde_json::from_str(&text);
    assert_eq!(
        back.as_ref().ok(),
        Some(stored),
        "a stored policy must read back as itself: {text}"
    );
    check_policy(stored.policy());
}

/// The fail handler's reading of the body, then the engine's decision by the default policy.
fn fail(bytes: &[u8]) -> Result<(), ApiError> {
    let body: FailRequest = decode(bytes)?;
    let report = failure_report(body, NOW_MS)?;
    let policy = RetryPolicy::default();
    for failure in [1, 2, policy.retry_limit, policy.retry_limit + 1] {
        let failure = Failure {
            failure,
            at_ms: NOW_MS,
            first_failure_at_ms: NOW_MS - 1_000,
            previous_delay_ms: None,
            outcome: report.outcome,
        };
        check_decision(&policy, &failure, &mut FixedRandom(0.5));
    }
    Ok(())
}

fn take(bytes: &[u8]) -> Result<(), ApiError> {
    let request: TakeRequest = decode(bytes)?;
    let params = take_params(&limits(), request, 1)?;
    assert!(params.lease_ms <= MAX_DELAY_MS && params.wait_ms <= MAX_DELAY_MS);
    assert!(!params.queues.is_empty() && params.max >= 1);
    Ok(())
}

/// The queue update handler's checks, and the change applied.
fn queue_update(bytes: &[u8]) -> Result<(), ApiError> {
    let request: UpdateQueue = decode(bytes)?;
    let change = queue_change(request)?;
    for start in [None, Some(QueueConfig::default())] {
        let config = change.applied(start.as_ref());
        if let Some(policy) = &config.policy {
            check_stored(policy);
        }
        assert!(
            config
                .message_ttl_ms
                .is_none_or(|ttl| ttl > 0 && ttl <= MAX_DELAY_MS),
            "a message ttl of 0 or past 100 years"
        );
        assert!(
            config.concurrency.is_none_or(|n| n >= 1),
            "a concurrency limit of 0"
        );
        assert!(
            config
                .rate
                .is_none_or(|r| r.limit >= 1 && r.period_ms >= 1 && r.bucket_ms() >= 1),
            "a rate limit that allows nothing, or has no period"
        );
    }
    Ok(())
}

/// The schedule handler's checks; an accepted schedule's ticks come after now, each after the
/// one before.
fn schedule(bytes: &[u8]) -> Result<(), ApiError> {
    let request: PutSchedule = decode(bytes)?;
    let (spec, timetable) = schedule_spec("fuzzed", request, NOW_MS, &limits())?;
    if let Some(policy) = &spec.job.policy {
        check_stored(policy);
    }
    let ticks = timetable.ticks_after(NOW_MS, 3);
    assert!(!ticks.is_empty(), "an accepted expression with no tick");
    let mut last = NOW_MS;
    for tick in ticks {
        assert!(tick.at_ms > last, "ticks out of order");
        last = tick.at_ms;
    }
    Ok(())
}

/// The subscription handlers' checks (without resolving the endpoint's host), and the change
/// applied to a new subscription.
fn subscription(bytes: &[u8]) -> Result<(), ApiError> {
    let request: SubscriptionRequest = decode(bytes)?;
    let change = subscription_change(request, false)?;
    let mut subscription = tenax_core::model::Subscription::new("orders".into(), NOW_MS);
    change.apply(&mut subscription, NOW_MS);
    if let Some(policy) = &subscription.policy {
        check_stored(policy);
    }
    if let Some(statuses) = &subscription.retryable_statuses {
        assert!(statuses.windows(2).all(|w| w[0] < w[1]));
    }
    if let Some(max) = subscription.max_concurrency {
        assert!((1..=MAX_CONCURRENCY).contains(&max));
    }
    assert_ne!(subscription.throttle_per_second, Some(0));
    if let Some(budget) = subscription.retry_budget {
        assert!((1..=100).contains(&budget.percent));
        assert!((1_000..=86_400_000).contains(&budget.window_ms));
        assert!(budget.min_retries >= 1);
    }
    Ok(())
}

/// The `zaqar_patch` target: a metadata PATCH body, checked, applied to an empty and to a
/// populated metadata map, then checked and installed as the handler does.
pub fn zaqar_patch(bytes: &[u8]) {
    let changes = match json_body(bytes).and_then(patch::parse) {
        Ok(changes) => changes,
        Err(error) => return zaqar_client_error("patch", &error),
    };
    let stored = json!({
        "_max_claim_count": 3, "_dead_letter_queue": "dlq", "_default_message_ttl": 600,
        "_retry_policy": {"minimum_delay": 5, "maximum_delay": 60}, "color": "blue",
    });
    for start in [Map::new(), stored.as_object().cloned().unwrap_or_default()] {
        let mut metadata = start;
        if let Err(error) = patch::apply(&mut metadata, changes.clone()) {
            zaqar_client_error("patch apply", &error);
            continue;
        }
        if metadata::check(&metadata, &ZaqarLimits::default()).is_err() {
            continue;
        }
        let mut config = QueueConfig::default();
        if metadata::install(&mut config, "p", metadata.clone()).is_err() {
            continue;
        }
        let Some(policy) = &config.policy else {
            panic!("installed metadata must give the queue a policy")
        };
        check_stored(policy);
        assert_eq!(config.metadata.as_ref(), Some(&metadata));
        let settings = MessageSettings::of(config.metadata.as_ref());
        let zaqar = ZaqarLimits::default();
        assert!((MIN_MESSAGE_TTL..=zaqar.max_message_ttl).contains(&settings.default_ttl_s));
        assert!(
            settings
                .max_post_bytes
                .is_none_or(|max| (1..=zaqar.max_messages_post_size).contains(&max))
        );
        assert!(
            settings
                .default_delay_s
                .is_none_or(|delay| delay <= MAX_MESSAGE_DELAY)
        );
        let shown = metadata::with_defaults(config.metadata.as_ref(), &ZaqarLimits::default());
        assert!(shown.len() >= metadata.len());
    }
}

/// The `zaqar_post` target: a message-post body read for a queue without metadata and for one
/// with a default delay.
pub fn zaqar_post(bytes: &[u8]) {
    let delayed = json!({"_default_message_delay": 30, "_default_message_ttl": 120});
    for settings in [
        MessageSettings::of(None),
        MessageSettings::of(delayed.as_object()),
    ] {
        match read_post(bytes, settings, &ZaqarLimits::default()) {
            Err(error) => zaqar_client_error("post", &error),
            Ok(posted) => {
                assert!(!posted.is_empty(), "a post of no messages was accepted");
                for message in posted {
                    assert!(
                        (MIN_MESSAGE_TTL..=ZaqarLimits::default().max_message_ttl)
                            .contains(&message.ttl_s)
                    );
                    assert!(message.delay_s <= MAX_MESSAGE_DELAY);
                    if settings.default_delay_s.is_none() {
                        assert_eq!(message.delay_s, 0, "delay is read only with a default");
                    }
                    let body = message.body.get();
                    assert!(
                        serde_json::from_str::<&serde_json::value::RawValue>(body).is_ok(),
                        "a message body must be JSON text: {body:?}"
                    );
                }
            }
        }
    }
}

/// The `policy` target: policy JSON through the parser that detects the spelling and through
/// each spelling's own parser.
pub fn policy(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let parsed = parse_policy_str(text);
    if let Ok(parsed) = &parsed {
        check_parsed(parsed);
    }
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        assert!(parsed.is_err(), "text that is not JSON was accepted");
        return;
    };
    assert_eq!(parse_policy(&value), parsed, "text and value parse alike");
    if let Ok(policy) = native::parse(&value) {
        check_policy(&policy);
    }
    for parsed in [sns::parse(&value), zaqar_spelling::parse(&value)]
        .into_iter()
        .flatten()
    {
        check_parsed(&parsed);
    }
}

fn check_parsed(parsed: &ParsedPolicy) {
    check_policy(&parsed.retry);
    assert_ne!(parsed.throttle_per_second, Some(0));
}

/// Failure numbers worth deciding for a policy with `limit` retries.
fn failures(limit: u32) -> [u32; 8] {
    [
        0,
        1,
        2,
        3,
        limit.saturating_sub(1),
        limit,
        limit.saturating_add(1),
        u32::MAX,
    ]
}

/// What must hold for every policy the parsers accept.
pub fn check_policy(policy: &RetryPolicy) {
    assert!(policy.retry_limit <= MAX_RETRY_LIMIT);
    assert!(policy.cap_ms.is_none_or(|cap| cap <= MAX_DELAY_MS));
    assert!(policy.max_window_ms.is_none_or(|w| w <= MAX_DELAY_MS));

    // The canonical form gives the same policy back, as a value and as the text it is stored as.
    let canonical = native::to_json(policy);
    assert_eq!(
        native::parse(&canonical).as_ref(),
        Ok(policy),
        "to_json then parse: {canonical}"
    );
    let text = canonical.to_string();
    let reread = serde_json::from_str::<Value>(&text).map(|v| native::parse(&v));
    assert!(
        matches!(&reread, Ok(Ok(p)) if p == policy),
        "to_json as text then parse: {text} gives {reread:?}"
    );

    let ceiling = policy.cap_ms.unwrap_or(MAX_DELAY_MS);
    // Every shape but an explicit list rises or stays level: a later retry never waits less.
    if !matches!(policy.shape, Shape::List(_)) {
        let mut samples: Vec<u32> = failures(policy.retry_limit).to_vec();
        samples.extend([
            4, 10, 100, 1_000, 1_024, 1_025, 1_026, 1_100, 10_000, 100_000,
        ]);
        samples.sort_unstable();
        let mut previous = (0, 0);
        for r in samples {
            let delay = policy.delay_ms(r);
            assert!(
                delay >= previous.1,
                "delay_ms({r}) = {delay} is less than delay_ms({}) = {}",
                previous.0,
                previous.1
            );
            previous = (r, delay);
        }
    }
    for r in failures(policy.retry_limit) {
        let delay = policy.delay_ms(r);
        assert!(
            delay <= ceiling,
            "delay_ms({r}) = {delay} is past {ceiling}"
        );
        for previous in [None, Some(0), Some(delay), Some(MAX_DELAY_MS)] {
            let (low, high) = policy.jitter_band_ms(r, previous);
            assert!(
                low <= high && high <= ceiling,
                "band ({low}, {high}) for {r}"
            );
            for u in [0.0, 0.5, 0.999_999] {
                let drawn = policy.jittered_delay_ms(r, previous, &mut FixedRandom(u));
                assert!(
                    (low..=high).contains(&drawn),
                    "retry {r}: draw {drawn} outside ({low}, {high})"
                );
            }
        }
    }

    for failure in failures(policy.retry_limit) {
        for at_ms in [0, NOW_MS, u64::MAX - 1] {
            for outcome in [
                Outcome::Retry,
                Outcome::NotRetryable,
                Outcome::RetryIn { delay_ms: 1_500 },
                Outcome::RetryIn { delay_ms: u64::MAX },
                Outcome::RetryAt { at_ms: u64::MAX },
                Outcome::Snooze { delay_ms: u64::MAX },
            ] {
                for previous_delay_ms in [None, Some(MAX_DELAY_MS)] {
                    let failure = Failure {
                        failure,
                        at_ms,
                        first_failure_at_ms: at_ms.saturating_sub(3_600_000),
                        previous_delay_ms,
                        outcome,
                    };
                    check_decision(policy, &failure, &mut FixedRandom(0.75));
                }
            }
        }
    }

    let preview = Preview::of(policy);
    let limit = usize::try_from(policy.retry_limit).unwrap_or(usize::MAX);
    assert!(preview.retries.len() <= limit);
    let mut cumulative = 0u64;
    for (i, row) in preview.retries.iter().enumerate() {
        assert_eq!(usize::try_from(row.retry).ok(), Some(i + 1));
        assert!(row.delay_ms <= ceiling);
        assert!(row.min_delay_ms <= row.max_delay_ms && row.max_delay_ms <= ceiling);
        assert!(row.cumulative_ms >= cumulative);
        cumulative = row.cumulative_ms;
    }
    assert_eq!(preview.window_ms, cumulative);
    if let Some(window) = policy.max_window_ms {
        assert!(preview.window_ms <= window);
    }
    assert!(preview.min_window_ms() <= preview.max_window_ms());
}

fn check_decision(policy: &RetryPolicy, failure: &Failure, random: &mut FixedRandom) {
    let decision = policy.decide(failure, random);
    match decision {
        Decision::Retry {
            retry,
            at_ms,
            delay_ms,
        } => {
            assert!(delay_ms <= MAX_DELAY_MS, "{failure:?} gives {decision:?}");
            assert_eq!(at_ms, failure.at_ms.saturating_add(delay_ms));
            assert_eq!(retry, failure.failure.max(1));
            assert!(
                retry <= policy.retry_limit,
                "{failure:?} gives {decision:?}"
            );
            if let Some(window) = policy.max_window_ms {
                let first = failure.first_failure_at_ms.min(failure.at_ms);
                assert!(at_ms - first <= window, "{failure:?} gives {decision:?}");
            }
        }
        Decision::Snooze { at_ms, delay_ms } => {
            assert!(matches!(failure.outcome, Outcome::Snooze { .. }));
            assert!(delay_ms <= MAX_DELAY_MS);
            assert_eq!(at_ms, failure.at_ms.saturating_add(delay_ms));
        }
        Decision::Dead { reason } => match reason {
            DeadReason::NotRetryable => {
                assert_eq!(failure.outcome, Outcome::NotRetryable);
            }
            DeadReason::RetryLimit { limit } => {
                assert_eq!(limit, policy.retry_limit);
                assert!(failure.failure.max(1) > limit);
            }
            DeadReason::Window { max_window_ms } => {
                assert_eq!(Some(max_window_ms), policy.max_window_ms);
            }
        },
    }
    // The reason is shown to people; showing it must not fail either.
    if let Decision::Dead { reason } = decision {
        assert!(!reason.to_string().is_empty());
    }
}

/// The `duration` target: the bytes as a duration string, and (read as a number) as
/// milliseconds to format and read back.
pub fn duration(bytes: &[u8]) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        if let Ok(ms) = parse_duration("d", text) {
            assert!(ms <= MAX_DELAY_MS, "{text:?} gives {ms} ms");
            format_round_trip(ms);
        }
    }
    let mut raw = [0u8; 8];
    for (slot, byte) in raw.iter_mut().zip(bytes) {
        *slot = *byte;
    }
    format_round_trip(u64::from_le_bytes(raw) % (MAX_DELAY_MS + 1));
}

/// `format_duration` is a display form: below a minute it is exact; above, it keeps the three
/// largest non-zero units (no milliseconds), so reading it back gives at most `ms`, less by
/// under one of its smallest unit shown. Only the year unit, which `parse_duration` does not
/// take, may fail to read back.
fn format_round_trip(ms: u64) {
    let shown = format_duration(ms);
    let back = match parse_duration("d", &shown) {
        Ok(back) => back,
        Err(error) => {
            assert!(
                shown.contains('y'),
                "format_duration({ms}) = {shown:?} does not read back: {error}"
            );
            return;
        }
    };
    if ms < 60_000 {
        assert_eq!(back, ms, "format_duration({ms}) = {shown:?}");
        return;
    }
    let unit = match shown.chars().last() {
        Some('s') => 1_000,
        Some('m') => 60_000,
        Some('h') => 3_600_000,
        Some('d') => 86_400_000,
        other => panic!("format_duration({ms}) = {shown:?} ends in {other:?}"),
    };
    assert!(
        back <= ms && ms - back < unit,
        "format_duration({ms}) = {shown:?} reads back as {back}"
    );
}
