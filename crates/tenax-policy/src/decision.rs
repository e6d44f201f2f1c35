//! The question the engine asks after every failure, and the answers.

use serde::{Deserialize, Serialize};

/// What a failure report (or a delivery outcome) says about the next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Retry by the policy (the usual case).
    #[default]
    Retry,
    /// Dead at once, whatever the policy allows.
    NotRetryable,
    /// Retry at this time (ms since the Unix epoch). Uses an attempt and obeys the limit and the
    /// window: a worker cannot keep a job alive forever by always asking for a later time.
    RetryAt { at_ms: u64 },
    /// Retry after this delay. Uses an attempt and obeys the limit and the window.
    RetryIn { delay_ms: u64 },
    /// Run again after this delay without using an attempt (the job was not ready, not failing).
    Snooze { delay_ms: u64 },
}

/// "This job has failed for the r-th time at time t": the input to [`crate::RetryPolicy::decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// r ≥ 1: how many failures the job has had, this one included. Retry r follows it.
    pub failure: u32,
    /// When this failure happened (ms since the Unix epoch).
    pub at_ms: u64,
    /// When the first failure happened; the window is measured from here.
    pub first_failure_at_ms: u64,
    /// The delay actually used before the previous retry (decorrelated jitter grows from it).
    pub previous_delay_ms: Option<u64>,
    pub outcome: Outcome,
}

impl Failure {
    /// The first failure of a job, at `at_ms`, asking for a normal retry.
    pub fn first(at_ms: u64) -> Self {
        Self {
            failure: 1,
            at_ms,
            first_failure_at_ms: at_ms,
            previous_delay_ms: None,
            outcome: Outcome::Retry,
        }
    }
}

/// The answer: when to run again, or dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Run retry `retry` at `at_ms` (`delay_ms` after the failure).
    Retry {
        retry: u32,
        at_ms: u64,
        delay_ms: u64,
    },
    /// Run again at `at_ms` without using an attempt.
    Snooze { at_ms: u64, delay_ms: u64 },
    /// No more retries.
    Dead { reason: DeadReason },
}

/// Why a job or delivery is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DeadReason {
    /// The failure said so.
    NotRetryable,
    /// All `limit` retries are used.
    RetryLimit { limit: u32 },
    /// The next retry would start more than `max_window_ms` after the first failure.
    Window { max_window_ms: u64 },
}

impl std::fmt::Display for DeadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotRetryable => write!(f, "the failure was marked not retryable"),
            Self::RetryLimit { limit: 0 } => write!(f, "the policy allows no retries"),
            Self::RetryLimit { limit: 1 } => write!(f, "its one retry was used"),
            Self::RetryLimit { limit } => write!(f, "all {limit} retries were used"),
            Self::Window { max_window_ms } => write!(
                f,
                "the next retry would start more than {} after the first failure",
                crate::duration::format_duration(*max_window_ms)
            ),
        }
    }
}
