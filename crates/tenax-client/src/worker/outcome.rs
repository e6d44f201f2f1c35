//! [`JobError`]: what a handler's error does to its job.

use std::error::Error as StdError;
use std::fmt;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::request::{Failure, Outcome};

/// The longest message a worker reports (the server takes up to 64 KiB).
const MAX_MESSAGE: usize = 8_000;

/// The error a handler returns: an [`Outcome`] for the job, a message and an optional JSON
/// detail recorded with it.
///
/// Any `std::error::Error` converts into one (so `?` works in a handler returning
/// `Result<(), JobError>`): a plain failure, retried by the job's policy, whose message is the
/// error with its chain of causes (`"sending: connection refused: ..."`) and whose detail is
/// `{"type", "chain"}`. An [`Outcome`] converts too, so a handler may return
/// `Err(Outcome::Snooze(d))` (or `Result<(), Outcome>`). To choose the outcome of an error,
/// use [`OutcomeExt`] on a `Result` or the constructors here:
///
/// ```
/// use std::time::Duration;
/// use tenax_client::{JobError, Outcome, OutcomeExt as _};
///
/// fn parse(text: &str) -> Result<u32, JobError> {
///     // A payload that will never parse: dead at once, with the parse error as the message.
///     let n: u32 = text.parse().not_retryable()?;
///     if n == 0 {
///         return Err(JobError::snooze(Duration::from_secs(30)));   // later, no attempt used
///     }
///     if n > 100 {
///         return Err(JobError::retry_in(Duration::from_secs(60)).with_message("too big for now"));
///     }
///     Ok(n)
/// }
/// assert_eq!(parse("x").unwrap_err().outcome(), Outcome::NotRetryable);
/// ```
pub struct JobError {
    outcome: Outcome,
    message: Option<String>,
    detail: Option<Value>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
    source_type: Option<&'static str>,
}

impl JobError {
    /// An error with this outcome and no message yet (the outcome in words, or its source's,
    /// is reported).
    pub fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            message: None,
            detail: None,
            source: None,
            source_type: None,
        }
    }

    /// A failure with this message: the job's policy decides when it runs again.
    pub fn retry(message: impl Into<String>) -> Self {
        Self::new(Outcome::Retry).with_message(message)
    }

    /// Dead at once, whatever the policy (it can be replayed).
    pub fn not_retryable(message: impl Into<String>) -> Self {
        Self::new(Outcome::NotRetryable).with_message(message)
    }

    /// Retry after `delay` instead of the policy's delay (uses an attempt).
    pub fn retry_in(delay: Duration) -> Self {
        Self::new(Outcome::RetryIn(delay))
    }

    /// Retry at `at` (uses an attempt).
    pub fn retry_at(at: SystemTime) -> Self {
        Self::new(Outcome::RetryAt(at))
    }

    /// Run again after `delay` without using an attempt: "not now" rather than "failed"
    /// (nothing is recorded on the job).
    pub fn snooze(delay: Duration) -> Self {
        Self::new(Outcome::Snooze(delay))
    }

    /// An error boxed elsewhere (`anyhow::Error` converts into one with `.into()`): a plain
    /// failure with its chain as the message.
    pub fn from_boxed(error: Box<dyn StdError + Send + Sync + 'static>) -> Self {
        Self {
            source: Some(error),
            ..Self::new(Outcome::Retry)
        }
    }

    /// The message recorded on the job.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// Any JSON recorded with the message (instead of the source's type and chain).
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }

    /// The error behind this one: its chain is the message when none was given.
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source_type = Some(std::any::type_name_of_val(&source));
        self.source = Some(Box::new(source));
        self
    }

    /// Chooses the outcome, keeping the message and source.
    pub fn with_outcome(mut self, outcome: Outcome) -> Self {
        self.outcome = outcome;
        self
    }

    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The message reported: the one given, else the source's chain, else the outcome in
    /// words.
    pub fn message(&self) -> String {
        let mut message = match (&self.message, &self.source) {
            (Some(message), _) => message.clone(),
            (None, Some(source)) => crate::error::chain(source.as_ref()),
            (None, None) => self.outcome.describe(),
        };
        if message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE - 3;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push('…');
        }
        message
    }

    /// The detail reported: the one given, else `{"type", "chain"}` of the source.
    pub fn detail(&self) -> Option<Value> {
        if let Some(detail) = &self.detail {
            return Some(detail.clone());
        }
        let source = self.source.as_ref()?;
        let mut chain = vec![source.to_string()];
        let mut cause = source.source();
        while let Some(next) = cause {
            chain.push(next.to_string());
            cause = next.source();
        }
        Some(match self.source_type {
            Some(kind) => json!({"type": kind, "chain": chain}),
            None => json!({"chain": chain}),
        })
    }

    /// The failure report for the server.
    pub fn to_failure(&self) -> Failure {
        let failure = if matches!(self.outcome, Outcome::Snooze(_))
            && self.message.is_none()
            && self.source.is_none()
        {
            Failure::snooze(Duration::ZERO)
        } else {
            Failure::new(self.message())
        };
        let failure = failure.outcome(self.outcome);
        match self.detail() {
            Some(detail) => failure.detail(detail),
            None => failure,
        }
    }

    /// The source error, if there is one.
    pub fn source(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl fmt::Display for JobError {
    /// The message, and the outcome when it is not a plain retry the message already says.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = self.message();
        let outcome = self.outcome.describe();
        if self.outcome == Outcome::Retry || message == outcome {
            f.write_str(&message)
        } else {
            write!(f, "{message} ({outcome})")
        }
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("outcome", &self.outcome)
            .field("message", &self.message())
            .field("detail", &self.detail)
            .field("source_type", &self.source_type)
            .finish()
    }
}

impl<E: StdError + Send + Sync + 'static> From<E> for JobError {
    fn from(error: E) -> Self {
        Self {
            source_type: Some(std::any::type_name::<E>()),
            source: Some(Box::new(error)),
            ..Self::new(Outcome::Retry)
        }
    }
}

impl From<Outcome> for JobError {
    fn from(outcome: Outcome) -> Self {
        Self::new(outcome)
    }
}

/// Chooses the outcome of a `Result`'s error, keeping it as the message and source:
/// `smtp.send(&mail).await.retry_in(Duration::from_secs(60))?`.
pub trait OutcomeExt<T> {
    /// The error, with this outcome.
    fn or_outcome(self, outcome: Outcome) -> Result<T, JobError>;

    /// Dead at once.
    fn not_retryable(self) -> Result<T, JobError>
    where
        Self: Sized,
    {
        self.or_outcome(Outcome::NotRetryable)
    }

    /// Retry after `delay` (uses an attempt).
    fn retry_in(self, delay: Duration) -> Result<T, JobError>
    where
        Self: Sized,
    {
        self.or_outcome(Outcome::RetryIn(delay))
    }

    /// Retry at `at` (uses an attempt).
    fn retry_at(self, at: SystemTime) -> Result<T, JobError>
    where
        Self: Sized,
    {
        self.or_outcome(Outcome::RetryAt(at))
    }

    /// Run again after `delay` without using an attempt.
    fn snooze(self, delay: Duration) -> Result<T, JobError>
    where
        Self: Sized,
    {
        self.or_outcome(Outcome::Snooze(delay))
    }
}

impl<T, E: Into<JobError>> OutcomeExt<T> for Result<T, E> {
    fn or_outcome(self, outcome: Outcome) -> Result<T, JobError> {
        self.map_err(|error| error.into().with_outcome(outcome))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("sending the mail")]
    struct Sending(#[source] std::io::Error);

    #[test]
    fn any_error_is_a_retry_with_its_chain() {
        let error: JobError = Sending(std::io::Error::other("connection refused")).into();
        assert_eq!(error.outcome(), Outcome::Retry);
        assert_eq!(error.message(), "sending the mail: connection refused");
        let detail = error.detail().expect("a detail");
        assert_eq!(
            detail["chain"],
            json!(["sending the mail", "connection refused"])
        );
        assert!(
            detail["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("Sending")),
            "{detail}"
        );
    }

    #[test]
    fn outcomes_keep_their_cause() {
        let parsed: Result<u32, _> = "x".parse::<u32>();
        let error = parsed.not_retryable().expect_err("an error");
        assert_eq!(error.outcome(), Outcome::NotRetryable);
        assert_eq!(error.message(), "invalid digit found in string");
        let error: JobError = Outcome::Snooze(Duration::from_secs(5)).into();
        assert_eq!(error.message(), "snoozed for 5s");
        let failure = error.to_failure();
        assert_eq!(failure, Failure::snooze(Duration::from_secs(5)));
    }

    #[test]
    fn long_messages_are_cut_on_a_character() {
        let error = JobError::retry("é".repeat(MAX_MESSAGE));
        let message = error.message();
        assert!(message.len() <= MAX_MESSAGE && message.ends_with('…'));
    }
}
