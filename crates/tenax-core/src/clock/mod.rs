//! Time as a parameter: the engine and every background loop read "now" from a [`Clock`], so
//! tests move time instead of sleeping.
//!
//! Whose clock: a server on the embedded store decides by its own wall clock; servers sharing
//! a PostgreSQL database all decide by the database's ([`database`]), so that one server whose
//! clock is off cannot expire another's leases or run a job early.

pub mod database;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use self::database::DatabaseTime;

/// Milliseconds since the Unix epoch.
pub type UnixMs = u64;

#[derive(Debug, Clone)]
pub enum Clock {
    /// The wall clock.
    System,
    /// A clock that only moves when told to (tests).
    Manual(Arc<AtomicU64>),
    /// The database's clock, as this server estimates it from samples the store takes.
    Database(Arc<DatabaseTime>),
}

impl Clock {
    pub fn manual(start_ms: UnixMs) -> Self {
        Self::Manual(Arc::new(AtomicU64::new(start_ms)))
    }

    /// The database's clock, unsampled (this server's wall clock) until the store samples it.
    pub fn database() -> Self {
        Self::Database(Arc::new(DatabaseTime::new()))
    }

    /// The estimate of the database's clock, when this is one.
    pub fn database_time(&self) -> Option<&Arc<DatabaseTime>> {
        match self {
            Self::Database(time) => Some(time),
            _ => None,
        }
    }

    pub fn now_ms(&self) -> UnixMs {
        match self {
            Self::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            Self::Manual(now) => now.load(Ordering::SeqCst),
            Self::Database(time) => time.now_ms(),
        }
    }

    /// Moves a manual clock forward; does nothing to the others.
    pub fn advance_ms(&self, ms: u64) {
        if let Self::Manual(now) = self {
            now.fetch_add(ms, Ordering::SeqCst);
        }
    }

    pub fn is_manual(&self) -> bool {
        matches!(self, Self::Manual(_))
    }

    /// Sleeps toward the time `at_ms` on this clock, for at most `at_most`: the caller looks
    /// again when it wakes. A manual clock moves only when told, so it is looked at every few
    /// milliseconds.
    pub async fn sleep_toward(&self, at_ms: UnixMs, at_most: std::time::Duration) {
        let left = std::time::Duration::from_millis(at_ms.saturating_sub(self.now_ms()));
        let step = if self.is_manual() {
            std::time::Duration::from_millis(5)
        } else {
            at_most
        };
        tokio::time::sleep(left.min(step).min(at_most)).await;
    }
}

/// The latest time RFC 3339 can print: 9999-12-31T23:59:59.999Z.
pub const MAX_PRINTABLE_MS: UnixMs = 253_402_300_799_999;

/// How far ahead of now any time the API accepts may be: the same 100 years that caps every
/// delay, so a run-at time and a delay are bound by one rule.
pub const MAX_AHEAD_MS: u64 = tenax_policy::MAX_DELAY_MS;

/// Formats a Unix millisecond time as RFC 3339 UTC with milliseconds (`2026-11-21T11:25:37.000Z`).
///
/// Total: the API refuses times it could not print ([`check_time`]), and a time past
/// [`MAX_PRINTABLE_MS`] that reaches here anyway (data written before that rule) prints as the
/// last printable millisecond rather than failing the response.
pub fn rfc3339(ms: UnixMs) -> String {
    let time = UNIX_EPOCH + std::time::Duration::from_millis(ms.min(MAX_PRINTABLE_MS));
    humantime::format_rfc3339_millis(time).to_string()
}

/// The one rule for every point in time a request names (a run-at time, a retry time): not
/// more than [`MAX_AHEAD_MS`] after `now_ms`. The message is the rule, for a 400 naming the
/// field.
pub fn check_time(at_ms: UnixMs, now_ms: UnixMs) -> Result<UnixMs, String> {
    let latest = now_ms.saturating_add(MAX_AHEAD_MS).min(MAX_PRINTABLE_MS);
    if at_ms > latest {
        return Err(format!(
            "must be at most 100 years from now ({}), got {}",
            rfc3339(latest),
            describe_ms(at_ms)
        ));
    }
    Ok(at_ms)
}

/// A time in words for an error message: RFC 3339 when printable, else the raw number.
fn describe_ms(ms: UnixMs) -> String {
    if ms <= MAX_PRINTABLE_MS {
        rfc3339(ms)
    } else {
        format!("{ms} ms since 1970")
    }
}

/// Parses an RFC 3339 time into Unix milliseconds: with `Z` or any offset
/// (`2030-01-01T00:00:00+01:00` is 23:00 UTC the day before), with or without fractions; a time
/// without an offset (`2026-11-21 11:25:37`) is read as UTC. Times before 1970 are `None`.
pub fn parse_rfc3339(text: &str) -> Option<UnixMs> {
    if let Ok(at) = text.parse::<jiff::Timestamp>() {
        return u64::try_from(at.as_millisecond()).ok();
    }
    // What is left is a time without an offset, or a bad one: an offset that jiff refused
    // (`+25:00`) must not be read as UTC.
    let clock = text.get(10..).unwrap_or_default();
    if clock.contains(['+', '-', 'Z', 'z']) {
        return None;
    }
    let time = humantime::parse_rfc3339_weak(text).ok()?;
    let since = time.duration_since(UNIX_EPOCH).ok()?;
    u64::try_from(since.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_260_337_123), "2026-11-21T11:25:37.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            parse_rfc3339("2026-11-21T11:25:37.123Z"),
            Some(1_795_260_337_123)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
        // Any offset, read to UTC.
        let utc = parse_rfc3339("2029-12-31T23:00:00Z");
        assert!(utc.is_some());
        for text in [
            "2030-01-01T00:00:00+01:00",
            "2029-12-31T18:30:00-04:30",
            "2030-01-01T00:00:00.000+01:00",
            "2029-12-31T23:00:00+00:00",
            "2029-12-31 23:00:00",
        ] {
            assert_eq!(parse_rfc3339(text), utc, "{text}");
        }
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), None);
    }

    #[test]
    fn every_time_prints_and_far_ones_are_refused() {
        assert_eq!(rfc3339(MAX_PRINTABLE_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(MAX_PRINTABLE_MS + 1), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(u64::MAX), "9999-12-31T23:59:59.999Z");
        let now = 1_800_000_000_000;
        assert_eq!(check_time(now + MAX_AHEAD_MS, now), Ok(now + MAX_AHEAD_MS));
        let refused = check_time(253_402_300_800_000, now).unwrap_err();
        assert!(
            refused.starts_with("must be at most 100 years from now"),
            "{refused}"
        );
        assert!(
            refused.contains("253402300800000 ms since 1970"),
            "{refused}"
        );
        assert!(check_time(now + MAX_AHEAD_MS + 1, now).is_err());
        assert_eq!(check_time(0, now), Ok(0));
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = Clock::manual(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance_ms(500);
        assert_eq!(clock.now_ms(), 1_500);
    }
}
