//! What flags are read into before anything is sent: durations, times and JSON arguments. The
//! server reads the same spellings, so a flag means what the field of the API means.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::ValueEnum;
use serde_json::Value;
use tenax_client::JobStatus;

use super::CliError;

/// A job's or a delivery's status, as a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Status {
    Scheduled,
    Ready,
    #[value(name = "in_flight")]
    InFlight,
    Completed,
    Dead,
    Cancelled,
    Waiting,
}

impl From<Status> for JobStatus {
    fn from(status: Status) -> Self {
        match status {
            Status::Scheduled => Self::Scheduled,
            Status::Ready => Self::Ready,
            Status::InFlight => Self::InFlight,
            Status::Completed => Self::Completed,
            Status::Dead => Self::Dead,
            Status::Cancelled => Self::Cancelled,
            Status::Waiting => Self::Waiting,
        }
    }
}

/// A duration flag (clap value parser): milliseconds, or a number with a unit (`"30s"`,
/// `"1h30m"`).
pub fn duration(text: &str) -> Result<Duration, String> {
    tenax_policy::parse_duration("", text)
        .map(Duration::from_millis)
        .map_err(|e| e.rule)
}

/// A time flag (clap value parser): RFC 3339 (`2026-11-21T00:00:00Z`), or milliseconds since
/// 1970.
pub fn time(text: &str) -> Result<SystemTime, String> {
    let text = text.trim();
    let ms = match text.parse::<u64>() {
        Ok(ms) => ms,
        Err(_) => tenax_core::clock::parse_rfc3339(text).ok_or_else(|| {
            format!("must be an RFC 3339 time such as 2026-11-21T00:00:00Z, got {text:?}")
        })?,
    };
    Ok(UNIX_EPOCH + Duration::from_millis(ms))
}

/// A JSON argument given on the command line, or `@path` to a file holding it.
pub fn json_argument(flag: &str, argument: &str) -> Result<Value, CliError> {
    let text = match argument.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CliError::Invalid(format!("{flag}: cannot read {path}: {e}")))?,
        None => argument.to_owned(),
    };
    serde_json::from_str(&text)
        .map_err(|e| CliError::Invalid(format!("{flag}: not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_times_read_as_the_api_reads_them() {
        assert_eq!(duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(duration("1500"), Ok(Duration::from_millis(1500)));
        assert!(duration("soon").is_err());
        let at = UNIX_EPOCH + Duration::from_secs(1_795_219_200);
        assert_eq!(time("2026-11-21T00:00:00Z"), Ok(at));
        assert_eq!(time("1795219200000"), Ok(at));
        assert!(time("yesterday").unwrap_err().contains("RFC 3339"));
    }
}
