//! How a command fails: bad input (exit status 2, like clap's own usage errors) or anything else
//! (exit status 1).

use std::fmt;

#[derive(Debug)]
pub enum CliError {
    /// The user's input is wrong; the message names the field and the rule.
    Invalid(String),
    /// The input was fine but the command could not complete (I/O, network, ...).
    Failed(anyhow::Error),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Invalid(_) => 2,
            Self::Failed(_) => 1,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(message) => write!(f, "{message}"),
            // `{:#}` prints the whole context chain on one line.
            Self::Failed(error) => write!(f, "{error:#}"),
        }
    }
}

impl From<tenax_policy::PolicyError> for CliError {
    fn from(error: tenax_policy::PolicyError) -> Self {
        Self::Invalid(error.to_string())
    }
}

impl From<anyhow::Error> for CliError {
    fn from(error: anyhow::Error) -> Self {
        Self::Failed(error)
    }
}

impl From<crate::offline::OfflineError> for CliError {
    fn from(error: crate::offline::OfflineError) -> Self {
        match error {
            crate::offline::OfflineError::Invalid(message) => Self::Invalid(message),
            crate::offline::OfflineError::Failed(error) => Self::Failed(error),
        }
    }
}
