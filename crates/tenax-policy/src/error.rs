//! The one error type of the policy library: every invalid input names the field and the rule.

use std::fmt;

/// A policy (or a duration inside one) that cannot be accepted.
///
/// `field` is a dotted path into the input as the user wrote it (`healthyRetryPolicy.numRetries`,
/// `jitter.percent`, `minimum_delay`), so that an HTTP 400 or a CLI error can point at it.
/// `rule` is a sentence fragment stating what the value must satisfy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyError {
    pub field: String,
    pub rule: String,
}

impl PolicyError {
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            rule: rule.into(),
        }
    }

    /// The same error, with `prefix.` put in front of the field path.
    pub fn within(mut self, prefix: &str) -> Self {
        self.field = if self.field.is_empty() {
            prefix.to_owned()
        } else {
            format!("{prefix}.{}", self.field)
        };
        self
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.rule)
        } else {
            write!(f, "{}: {}", self.field, self.rule)
        }
    }
}

pub type Result<T, E = PolicyError> = std::result::Result<T, E>;
