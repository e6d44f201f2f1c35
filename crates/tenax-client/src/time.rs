//! Times and durations as the API spells them.
//!
//! Requests carry integer milliseconds (a duration, or a time since 1970): exact, and accepted
//! by every field. Answers carry RFC 3339 UTC times with milliseconds, read here into
//! [`SystemTime`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds of a duration (saturating; below a millisecond counts as 0).
pub(crate) fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds since 1970 of a time (0 for a time before 1970).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, duration_ms)
}

/// Reads an RFC 3339 time (`2026-11-21T12:00:00.000Z`).
pub(crate) fn parse(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text).ok()
}

/// Formats a time as RFC 3339 UTC with milliseconds.
pub(crate) fn format(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// `#[serde(with = "rfc3339")]`: a time as RFC 3339 UTC with milliseconds, the API's spelling
/// both ways (a time read and written back is the text the server sent).
pub(crate) mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        time: &SystemTime,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format(*time))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {text:?}")))
    }
}

/// `#[serde(with = "rfc3339_opt")]`: [`rfc3339`] or `null`.
pub(crate) mod rfc3339_opt {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        time: &Option<SystemTime>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match time {
            Some(time) => super::rfc3339::serialize(time, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<SystemTime>, D::Error> {
        match Option::<String>::deserialize(deserializer)? {
            None => Ok(None),
            Some(text) => super::parse(&text)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {text:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_through_rfc3339() {
        let time = UNIX_EPOCH + Duration::from_millis(1_795_260_337_123);
        assert_eq!(format(time), "2026-11-21T11:25:37.123Z");
        assert_eq!(parse("2026-11-21T11:25:37.123Z"), Some(time));
        assert_eq!(unix_ms(time), 1_795_260_337_123);
        assert_eq!(parse("soon"), None);
        assert_eq!(duration_ms(Duration::from_micros(1_500)), 1);
    }
}
