//! Time as a parameter: the engine and every background loop read "now" from a [`Clock`], so
//! tests move time instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type UnixMs = u64;

#[derive(Debug, Clone)]
pub enum Clock {
    /// The wall clock.
    System,
    /// A clock that only moves when told to (tests).
    Manual(Arc<AtomicU64>),
}

impl Clock {
    pub fn manual(start_ms: UnixMs) -> Self {
        Self::Manual(Arc::new(AtomicU64::new(start_ms)))
    }

    pub fn now_ms(&self) -> UnixMs {
        match self {
            Self::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            Self::Manual(now) => now.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock forward; does nothing to the system clock.
    pub fn advance_ms(&self, ms: u64) {
        if let Self::Manual(now) = self {
            now.fetch_add(ms, Ordering::SeqCst);
        }
    }

    pub fn is_manual(&self) -> bool {
        matches!(self, Self::Manual(_))
    }
}

/// Formats a Unix millisecond time as RFC 3339 UTC with milliseconds (`2026-11-21T11:25:37.000Z`).
pub fn rfc3339(ms: UnixMs) -> String {
    let time = UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(time).to_string()
}

/// Parses an RFC 3339 time (`2026-11-21T11:25:37Z`, fractions and offsets-free `Z` form) into
/// Unix milliseconds.
pub fn parse_rfc3339(text: &str) -> Option<UnixMs> {
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
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = Clock::manual(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance_ms(500);
        assert_eq!(clock.now_ms(), 1_500);
    }
}
