//! The log lines of job outcomes: a line per job while outcomes are few, a summary every few
//! seconds under load.
//!
//! The rule: a line per outcome while there are at most [`BURST`] in a second (counted in fixed
//! one-second windows). The outcome past that switches to a summary line every
//! [`SUMMARY_EVERY`]; a summary window with at most `BURST` outcomes a second on average
//! switches back to a line per outcome. A line (or a summary) is at INFO, WARN when a job is
//! dead, ERROR when a job's type has no handler in this worker. The Python worker follows the
//! same rule.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::outcome::JobError;
use super::shown;
use crate::model::FailResult;
use crate::request::Outcome;

/// Outcomes in one second above which the worker logs summaries instead of a line per job.
pub(crate) const BURST: u32 = 10;

/// How often a summary line is written while the worker summarizes.
pub(crate) const SUMMARY_EVERY: Duration = Duration::from_secs(5);

/// How often the worker checks for a due summary (so that one comes after the load stops too).
pub(crate) const TICK: Duration = Duration::from_millis(500);

/// Who failed a job.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FailedBy {
    /// Its handler, after running this long.
    Handler(Duration),
    /// The worker, which has no handler for the job's type.
    NoHandler,
    /// Its handler, after running this long, which ended once a heartbeat said the job was
    /// cancelled: the failure is how the worker says it stopped.
    Cancelled(Duration),
}

/// How long a handler ran, in a log line: `0.4ms`, `35.2ms`, `2s 500ms` (as `tenax work`
/// shows its commands' run times).
fn run_time(ran: Duration) -> String {
    let ms = ran.as_secs_f64() * 1_000.0;
    if ms < 1_000.0 {
        format!("{ms:.1}ms")
    } else {
        shown(ran)
    }
}

/// The outcomes of one summary window.
#[derive(Debug)]
struct Tally {
    started: Instant,
    completed: u64,
    /// Total run time of the completed jobs.
    ran: Duration,
    longest: Duration,
    /// Failed, and will run again.
    retried: u64,
    snoozed: u64,
    dead: u64,
    /// Cancelled while they ran: their handlers stopped.
    cancelled: u64,
    /// Jobs of a type without a handler, by type.
    unknown: BTreeMap<String, u64>,
    last_failure: Option<String>,
}

impl Tally {
    fn new(started: Instant) -> Self {
        Self {
            started,
            completed: 0,
            ran: Duration::ZERO,
            longest: Duration::ZERO,
            retried: 0,
            snoozed: 0,
            dead: 0,
            cancelled: 0,
            unknown: BTreeMap::new(),
            last_failure: None,
        }
    }

    fn count(&self) -> u64 {
        self.completed + self.retried + self.snoozed + self.dead + self.cancelled
    }
}

/// What to do with one outcome.
#[derive(Debug, PartialEq, Eq)]
enum Record {
    /// Log its line.
    Line,
    /// It is the one past [`BURST`] in its second: say that summaries start, and count it.
    StartSummaries,
    /// Count it in the summary.
    Count,
}

/// Where the rule stands: the current one-second window, or the summary window.
#[derive(Debug, Default)]
struct Rule {
    second_started: Option<Instant>,
    in_second: u32,
    /// The window being summarized; None while each outcome gets a line.
    tally: Option<Tally>,
}

impl Rule {
    fn record(&mut self, now: Instant) -> Record {
        if self.tally.is_some() {
            return Record::Count;
        }
        if self
            .second_started
            .is_none_or(|s| now.duration_since(s) >= Duration::from_secs(1))
        {
            self.second_started = Some(now);
            self.in_second = 0;
        }
        self.in_second += 1;
        if self.in_second <= BURST {
            return Record::Line;
        }
        self.tally = Some(Tally::new(now));
        Record::StartSummaries
    }

    /// The summary window to write, when one is due at `now` (or, with `stopping`, whatever
    /// is left); the next one starts, unless the load fell to `BURST` a second or less.
    fn due(&mut self, now: Instant, stopping: bool) -> Option<(Tally, Duration)> {
        let window = now.duration_since(self.tally.as_ref()?.started);
        if window < SUMMARY_EVERY && !stopping {
            return None;
        }
        let tally = self.tally.take()?;
        let calm = tally.count() as f64 <= f64::from(BURST) * window.as_secs_f64();
        if !calm {
            self.tally = Some(Tally::new(now));
        }
        self.second_started = None;
        Some((tally, window))
    }
}

/// The log lines of job outcomes, shared by a worker's tasks.
#[derive(Debug)]
pub(crate) struct OutcomeLog {
    rule: Mutex<Rule>,
    /// The types the worker handles, quoted, for the lines of types it does not.
    handled: String,
}

impl OutcomeLog {
    pub(crate) fn new(handled: String) -> Self {
        Self {
            rule: Mutex::default(),
            handled,
        }
    }

    /// A completion the server confirmed; `ran` is how long the handler ran.
    pub(crate) fn completed(&self, job: u64, kind: &str, ran: Duration) {
        self.record(
            |tally| {
                tally.completed += 1;
                tally.ran += ran;
                tally.longest = tally.longest.max(ran);
            },
            || tracing::info!(job, kind = %kind, elapsed = %run_time(ran), "the job completed"),
        );
    }

    /// A failure the server recorded.
    pub(crate) fn failed(
        &self,
        job: u64,
        kind: &str,
        by: FailedBy,
        error: &JobError,
        result: &FailResult,
    ) {
        let snoozed = matches!(error.outcome(), Outcome::Snooze(_));
        let message = error.message();
        let delay = result.delay().map(|d| tracing::field::display(shown(d)));
        let reason = result.dead_reason.as_deref();
        self.record(
            |tally| {
                if result.is_cancelled() {
                    tally.cancelled += 1;
                    return;
                }
                if snoozed {
                    tally.snoozed += 1;
                    return;
                }
                if result.is_dead() {
                    tally.dead += 1;
                } else {
                    tally.retried += 1;
                }
                tally.last_failure = Some(format!("job {job} ({kind}): {message}"));
                if let FailedBy::NoHandler = by {
                    *tally.unknown.entry(kind.to_owned()).or_default() += 1;
                }
            },
            || match by {
                FailedBy::Cancelled(ran) | FailedBy::Handler(ran) if result.is_cancelled() => {
                    tracing::info!(
                        job, kind = %kind, elapsed = %run_time(ran),
                        "the job was cancelled; its handler stopped"
                    );
                }
                FailedBy::Cancelled(ran) => tracing::warn!(
                    job, kind = %kind, elapsed = %run_time(ran), status = %result.status,
                    "the job was cancelled, but the server did not finish it as cancelled"
                ),
                FailedBy::NoHandler if result.is_cancelled() => {
                    tracing::info!(job, kind = %kind, "the job was cancelled");
                }
                FailedBy::NoHandler if result.is_dead() => tracing::error!(
                    job, kind = %kind, handled = %self.handled, error = %message, reason,
                    "no handler for the job's type: the job is dead"
                ),
                FailedBy::NoHandler => tracing::error!(
                    job, kind = %kind, handled = %self.handled, error = %message, delay,
                    "no handler for the job's type: it runs again later"
                ),
                FailedBy::Handler(_) if snoozed => {
                    tracing::info!(job, kind = %kind, delay, "the job was snoozed");
                }
                FailedBy::Handler(ran) if result.is_dead() => tracing::warn!(
                    job, kind = %kind, elapsed = %run_time(ran), error = %message, reason,
                    "the job failed and is dead"
                ),
                FailedBy::Handler(ran) => tracing::info!(
                    job, kind = %kind, elapsed = %run_time(ran), error = %message, delay,
                    "the job failed; it runs again later"
                ),
            },
        );
    }

    /// Writes the summary when one is due.
    pub(crate) fn tick(&self) {
        let due = self.lock().due(Instant::now(), false);
        if let Some((tally, window)) = due {
            summarize(&tally, window, &self.handled);
        }
    }

    /// Writes the summary of what is not summarized yet (when the worker stops).
    pub(crate) fn flush(&self) {
        let due = self.lock().due(Instant::now(), true);
        if let Some((tally, window)) = due {
            summarize(&tally, window, &self.handled);
        }
    }

    fn record(&self, count: impl FnOnce(&mut Tally), line: impl FnOnce()) {
        let mut rule = self.lock();
        let record = rule.record(Instant::now());
        // A window being summarized counts the outcome (the one that starts it too).
        if let Some(tally) = rule.tally.as_mut() {
            count(tally);
        }
        drop(rule);
        match record {
            Record::Line => line(),
            Record::StartSummaries => tracing::info!(
                "more than {BURST} job outcomes a second: a summary every {} instead of a line per job",
                shown(SUMMARY_EVERY)
            ),
            Record::Count => {}
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rule> {
        // The rule holds counts only: one a panic interrupted is still worth using.
        self.rule
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Writes one summary line, at the level of its gravest outcome.
fn summarize(tally: &Tally, window: Duration, handled: &str) {
    if tally.count() == 0 {
        return;
    }
    let mean = tally
        .ran
        .checked_div(u32::try_from(tally.completed).unwrap_or(u32::MAX))
        .unwrap_or_default();
    let unknown = tally
        .unknown
        .iter()
        .map(|(kind, n)| format!("{kind:?} ({n})"))
        .collect::<Vec<_>>()
        .join(", ");
    macro_rules! summary {
        ($level:ident, $($fields:tt)*) => {
            tracing::$level!(
                window = %format_args!("{:.1}s", window.as_secs_f64()),
                completed = tally.completed,
                mean = %run_time(mean),
                longest = %run_time(tally.longest),
                retried = tally.retried,
                snoozed = tally.snoozed,
                dead = tally.dead,
                cancelled = tally.cancelled,
                last_failure = tally.last_failure.as_deref(),
                $($fields)*
            )
        };
    }
    if !tally.unknown.is_empty() {
        summary!(
            error,
            unknown = %unknown,
            handled = %handled,
            "job outcomes, with types this worker has no handler for"
        );
    } else if tally.dead > 0 {
        summary!(warn, "job outcomes, with dead jobs");
    } else {
        summary!(info, "job outcomes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(rule: &mut Rule, now: Instant, n: u32) -> Vec<Record> {
        (0..n).map(|_| rule.record(now)).collect()
    }

    #[test]
    fn past_ten_outcomes_a_second_a_summary_comes_every_five_seconds() {
        let start = Instant::now();
        let at = |seconds: f64| start + Duration::from_secs_f64(seconds);
        let mut rule = Rule::default();
        assert!(
            lines(&mut rule, at(0.0), BURST)
                .iter()
                .all(|r| *r == Record::Line)
        );
        // A new second: a line each again, until the one past the burst.
        assert!(
            lines(&mut rule, at(1.0), BURST)
                .iter()
                .all(|r| *r == Record::Line)
        );
        assert_eq!(rule.record(at(1.5)), Record::StartSummaries);
        rule.tally.as_mut().expect("summarizing").completed += 1;
        for _ in 0..100 {
            assert_eq!(rule.record(at(3.0)), Record::Count);
            rule.tally.as_mut().expect("summarizing").completed += 1;
        }
        assert!(rule.due(at(6.0), false).is_none(), "not due yet");
        let (tally, window) = rule.due(at(6.5), false).expect("due");
        assert_eq!((tally.completed, window), (101, Duration::from_secs(5)));
        // 101 in 5 s is above 10 a second: the next window started. A calm one ends it.
        assert_eq!(rule.record(at(7.0)), Record::Count);
        rule.tally.as_mut().expect("summarizing").completed += 1;
        let (tally, _) = rule.due(at(11.5), false).expect("due");
        assert_eq!(tally.completed, 1);
        assert_eq!(rule.record(at(11.6)), Record::Line);
    }

    #[test]
    fn the_summary_left_is_written_at_the_stop() {
        let now = Instant::now();
        let mut rule = Rule::default();
        assert!(rule.due(now, true).is_none(), "nothing to summarize");
        lines(&mut rule, now, BURST + 3);
        let (tally, _) = rule.due(now, true).expect("the rest");
        assert!(tally.started == now);
    }
}
