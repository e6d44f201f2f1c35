//! A schedule's timetable: a cron expression read in an IANA time zone, and the ticks it gives.
//! Pure: no clock, no I/O; times are Unix milliseconds.
//!
//! The expression has five fields (minute, hour, day of month, month, day of week) or six (a
//! leading second), or is one of `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
//! `@hourly`. It is matched against the wall clock of the time zone, by `croner`, whose rules
//! for daylight-saving changes are Vixie cron's:
//!
//! - A *fixed-time* expression (second, minute and hour each one value, as `30 2 * * *`):
//!   - on a spring-forward day, a time inside the skipped hour runs once, at the first instant
//!     after the gap (03:00 when 02:00 jumps to 03:00);
//!   - on a fall-back day, a time inside the repeated hour runs once, on its first pass.
//! - Any other expression (a wildcard, a step, a list or a range in those fields, as
//!   `*/15 * * * *` or `0 2,14 * * *`) follows the real clock: wall times inside a skipped hour
//!   do not exist that day and have no tick; in a repeated hour, each matching wall time ticks
//!   on both passes (an interval schedule keeps its interval in real time).
//!
//! Ticks are whole seconds. Every tick is strictly after the one before it.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::clock::UnixMs;

/// A parsed expression in its time zone.
#[derive(Debug, Clone)]
pub struct Timetable {
    cron: Cron,
    zone: TimeZone,
}

/// Why an expression or a time zone was refused: the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimetableError {
    /// `cron` or `timezone`.
    pub field: &'static str,
    pub rule: String,
}

/// One tick, as shown to a person checking an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    pub at_ms: UnixMs,
    /// The wall-clock time in the schedule's zone, with its offset (`2027-03-28T03:00:00+02:00`).
    pub local: String,
    /// The expression names a wall time that does not exist that day (a spring-forward gap):
    /// the tick is the first instant after the gap.
    pub shifted: bool,
}

/// The most fields an expression may have: a leading second and the five of cron.
const MAX_FIELDS: usize = 6;

/// The fields of a five-field expression, each with what it may hold; a six-field one has
/// [`SECOND`] first.
const FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31 (or L, W)"),
    ("month", "1-12 (or JAN-DEC)"),
    ("day-of-week", "0-7 (or SUN-SAT, L, #)"),
];
const SECOND: (&str, &str) = ("second", "0-59");

fn parse(text: &str) -> Result<Cron, croner::errors::CronError> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(text)
}

/// The rule an expression that croner refused breaks, naming its field when one is to blame:
/// each field is tried alone, every other one a `*`, and the first that fails is named with
/// what it may hold and what it held (`field 2 (hour) must be 0-23 ..., got "25"`). An
/// expression whose fields each pass alone (or a nickname) is refused as a whole.
fn explain(text: &str, error: &croner::errors::CronError) -> String {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let names: Vec<(&str, &str)> = if fields.len() == MAX_FIELDS {
        std::iter::once(SECOND).chain(FIELDS).collect()
    } else {
        FIELDS.to_vec()
    };
    if fields.len() == names.len() {
        for (position, (field, (name, allowed))) in fields.iter().zip(&names).enumerate() {
            let mut alone = vec!["*"; fields.len()];
            alone[position] = field;
            if parse(&alone.join(" ")).is_err() {
                return format!(
                    "field {} ({name}) must be {allowed}, or a list, range or step of them, \
                     got {field:?}",
                    position + 1
                );
            }
        }
    }
    format!("is not a valid cron expression: {error}")
}

impl Timetable {
    /// Reads `expression` in the IANA time zone `zone` (`UTC`, `Europe/Berlin`, ...).
    pub fn new(expression: &str, zone: &str) -> Result<Self, TimetableError> {
        let cron_error = |rule: String| TimetableError {
            field: "cron",
            rule,
        };
        let text = expression.trim();
        if text.is_empty() {
            return Err(cron_error(
                "must be a cron expression of five or six fields, or @hourly, @daily, \
                 @weekly, @monthly, @yearly"
                    .into(),
            ));
        }
        if text.len() > 256 {
            return Err(cron_error("must be at most 256 characters".into()));
        }
        let fields = text.split_whitespace().count();
        if !text.starts_with('@') && !(5..=MAX_FIELDS).contains(&fields) {
            return Err(cron_error(format!(
                "must have five fields (minute hour day-of-month month day-of-week) or six (a \
                 leading second), got {fields}"
            )));
        }
        let cron = parse(text).map_err(|e| cron_error(explain(text, &e)))?;
        let zone_name = zone.trim();
        let zone = if zone_name.is_empty() {
            None
        } else {
            TimeZone::get(zone_name).ok()
        };
        let Some(zone) = zone else {
            return Err(TimetableError {
                field: "timezone",
                rule: format!(
                    "must be an IANA time zone name such as \"UTC\" or \"Europe/Berlin\", got \
                     {zone_name:?}"
                ),
            });
        };
        let timetable = Self { cron, zone };
        Ok(timetable)
    }

    /// A description of the expression in English words.
    pub fn describe(&self) -> String {
        self.cron.describe()
    }

    /// The first tick strictly after `after_ms`, if any (an expression such as `0 0 30 2 *`
    /// never matches; none is sought past the year 4999).
    pub fn next_after(&self, after_ms: UnixMs) -> Option<UnixMs> {
        let start = self.zoned(after_ms / 1_000 * 1_000)?;
        let next = self.cron.find_next_occurrence(&start, false).ok()?;
        millis(&next)
    }

    /// The last tick at or before `at_ms`, if any.
    pub fn last_at_or_before(&self, at_ms: UnixMs) -> Option<UnixMs> {
        let start = self.zoned(at_ms / 1_000 * 1_000)?;
        let previous = self.cron.find_previous_occurrence(&start, true).ok()?;
        millis(&previous)
    }

    /// Up to `count` ticks strictly after `after_ms`, as a person checks them.
    pub fn ticks_after(&self, after_ms: UnixMs, count: usize) -> Vec<Tick> {
        let mut ticks = Vec::with_capacity(count.min(1_000));
        let mut from = after_ms;
        while ticks.len() < count {
            let Some(at_ms) = self.next_after(from) else {
                break;
            };
            ticks.push(self.tick(at_ms));
            from = at_ms;
        }
        ticks
    }

    /// How many ticks fall in `(after_ms, through_ms]`, counting at most `most`.
    pub fn count_between(&self, after_ms: UnixMs, through_ms: UnixMs, most: u64) -> u64 {
        let mut count = 0;
        let mut from = after_ms;
        while count < most {
            match self.next_after(from) {
                Some(at) if at <= through_ms => {
                    count += 1;
                    from = at;
                }
                _ => break,
            }
        }
        count
    }

    /// A tick as a person reads it: its local time, and whether a gap moved it.
    pub fn tick(&self, at_ms: UnixMs) -> Tick {
        let zoned = self.zoned(at_ms);
        let local = zoned
            .as_ref()
            .map(|z| z.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string())
            .unwrap_or_default();
        let shifted = zoned
            .as_ref()
            .is_some_and(|z| !self.cron.is_time_matching(z).unwrap_or(true));
        Tick {
            at_ms,
            local,
            shifted,
        }
    }

    fn zoned(&self, ms: UnixMs) -> Option<jiff::Zoned> {
        let ms = i64::try_from(ms).ok()?;
        Some(
            Timestamp::from_millisecond(ms)
                .ok()?
                .to_zoned(self.zone.clone()),
        )
    }
}

fn millis(zoned: &jiff::Zoned) -> Option<UnixMs> {
    u64::try_from(zoned.timestamp().as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Milliseconds of a UTC wall time.
    fn utc(text: &str) -> UnixMs {
        let ts: Timestamp = text.parse().expect("a timestamp");
        u64::try_from(ts.as_millisecond()).expect("after 1970")
    }

    fn locals(table: &Timetable, after: &str, n: usize) -> Vec<String> {
        table
            .ticks_after(utc(after), n)
            .into_iter()
            .map(|t| t.local)
            .collect()
    }

    #[test]
    fn five_and_six_fields_and_names() {
        let every_minute = Timetable::new("* * * * *", "UTC").unwrap();
        assert_eq!(
            every_minute.next_after(utc("2027-01-15T08:00:00Z")),
            Some(utc("2027-01-15T08:01:00Z"))
        );
        // Not a whole second: the next tick is still the next whole minute.
        assert_eq!(
            every_minute.next_after(utc("2027-01-15T08:00:00.5Z")),
            Some(utc("2027-01-15T08:01:00Z"))
        );
        let seconds = Timetable::new("*/10 * * * * *", "UTC").unwrap();
        assert_eq!(
            seconds.next_after(utc("2027-01-15T08:00:05Z")),
            Some(utc("2027-01-15T08:00:10Z"))
        );
        let hourly = Timetable::new("@hourly", "UTC").unwrap();
        assert_eq!(
            hourly.next_after(utc("2027-01-15T08:00:00Z")),
            Some(utc("2027-01-15T09:00:00Z"))
        );
        assert_eq!(
            hourly.last_at_or_before(utc("2027-01-15T09:00:00Z")),
            Some(utc("2027-01-15T09:00:00Z"))
        );
        assert_eq!(
            hourly.count_between(
                utc("2027-01-15T08:00:00Z"),
                utc("2027-01-15T12:00:00Z"),
                100
            ),
            4
        );
        assert_eq!(
            hourly.count_between(utc("2027-01-15T08:00:00Z"), utc("2027-01-15T12:00:00Z"), 3),
            3
        );
    }

    #[test]
    fn bad_expressions_and_zones_name_the_field() {
        for (cron, zone, field, words) in [
            ("", "UTC", "cron", "five or six fields"),
            ("* * * *", "UTC", "cron", "got 4"),
            ("* * * * * * *", "UTC", "cron", "got 7"),
            ("61 * * * *", "UTC", "cron", "field 1 (minute) must be 0-59"),
            ("0 25 * * *", "UTC", "cron", "field 2 (hour) must be 0-23"),
            (
                "0 0 32 * *",
                "UTC",
                "cron",
                "field 3 (day-of-month) must be 1-31",
            ),
            ("0 0 * 13 *", "UTC", "cron", "got \"13\""),
            ("0 0 * * MON-XYZ", "UTC", "cron", "field 5 (day-of-week)"),
            (
                "75 * * * * *",
                "UTC",
                "cron",
                "field 1 (second) must be 0-59",
            ),
            ("* 75 * * * *", "UTC", "cron", "field 2 (minute)"),
            ("@sometimes", "UTC", "cron", "not a valid cron expression"),
            ("* * * * *", "Mars/Olympus", "timezone", "IANA time zone"),
            ("* * * * *", "", "timezone", "IANA time zone"),
        ] {
            let error = Timetable::new(cron, zone).unwrap_err();
            assert_eq!(error.field, field, "{cron:?} {zone:?}: {error:?}");
            assert!(error.rule.contains(words), "{cron:?}: {}", error.rule);
        }
        let never = Timetable::new("0 0 30 2 *", "UTC").unwrap();
        assert_eq!(never.next_after(utc("2027-01-15T08:00:00Z")), None);
    }

    /// Europe/Berlin springs forward on 2027-03-28: 02:00 CET becomes 03:00 CEST (01:00 UTC).
    #[test]
    fn a_skipped_hour_runs_a_fixed_time_once_after_the_gap() {
        let daily = Timetable::new("30 2 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            locals(&daily, "2027-03-26T12:00:00Z", 3),
            [
                "2027-03-27T02:30:00+01:00",
                "2027-03-28T03:00:00+02:00",
                "2027-03-29T02:30:00+02:00",
            ]
        );
        let ticks = daily.ticks_after(utc("2027-03-26T12:00:00Z"), 3);
        assert_eq!(
            ticks.iter().map(|t| t.shifted).collect::<Vec<_>>(),
            [false, true, false]
        );
        assert_eq!(ticks[1].at_ms, utc("2027-03-28T01:00:00Z"));
        // Interval expressions follow the real clock: no wall time of the gap ticks.
        let quarter = Timetable::new("*/30 * * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            locals(&quarter, "2027-03-28T00:00:00Z", 3),
            [
                "2027-03-28T01:30:00+01:00",
                "2027-03-28T03:00:00+02:00",
                "2027-03-28T03:30:00+02:00",
            ]
        );
    }

    /// Europe/Berlin falls back on 2027-10-31: 03:00 CEST becomes 02:00 CET (01:00 UTC).
    #[test]
    fn a_repeated_hour_runs_a_fixed_time_once() {
        let daily = Timetable::new("30 2 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            locals(&daily, "2027-10-29T12:00:00Z", 3),
            [
                "2027-10-30T02:30:00+02:00",
                "2027-10-31T02:30:00+02:00",
                "2027-11-01T02:30:00+01:00",
            ]
        );
        // An interval keeps its interval in real time through both passes.
        let half = Timetable::new("*/30 * * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            locals(&half, "2027-10-30T23:45:00Z", 5),
            [
                "2027-10-31T02:00:00+02:00",
                "2027-10-31T02:30:00+02:00",
                "2027-10-31T02:00:00+01:00",
                "2027-10-31T02:30:00+01:00",
                "2027-10-31T03:00:00+01:00",
            ]
        );
    }
}
