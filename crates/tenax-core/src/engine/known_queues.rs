//! Queues that exist, and the names closest to one that does not: so that a misspelt queue is
//! a clear refusal (`queue "emials" does not exist; the closest: "emails"`) instead of a queue
//! created by a pause, or a worker that waits forever on a queue nobody enqueues to.
//!
//! A queue exists when it has settings or jobs, subscriptions, or a schedule that enqueues to
//! it. Queues are made by use, so this is a look at the store, not a registry: a queue whose
//! jobs were all purged and that has nothing else is gone.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Engine, EngineError, Missing};
use crate::model::subscription::is_internal_queue;

/// At most this many close names are offered.
const SUGGESTIONS: usize = 3;

/// How long a worker's look at the queues is reused before the store is asked again.
const FRESH_FOR: Duration = Duration::from_secs(10);

/// Queues named by takes that a warning was logged for, at most: past that, no more
/// warnings (a client inventing names must not fill the memory).
const WARNED_AT_MOST: usize = 1_000;

/// The names among `known` closest to `name`, closest first: within an edit distance of a
/// third of the name's length (at least 2), as a typo would be.
pub fn closest(name: &str, known: &BTreeSet<String>) -> Vec<String> {
    let limit = (name.chars().count() / 3).max(2);
    let mut near: Vec<(usize, &String)> = known
        .iter()
        .map(|other| (strsim::damerau_levenshtein(name, other), other))
        .filter(|(distance, _)| *distance <= limit)
        .collect();
    near.sort();
    near.into_iter()
        .take(SUGGESTIONS)
        .map(|(_, other)| other.clone())
        .collect()
}

/// What the take path remembers: the queues seen lately, and those already warned of.
#[derive(Debug, Default)]
pub struct TakeWarnings {
    inner: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    known: BTreeSet<String>,
    looked_at: Option<Instant>,
    warned: HashSet<String>,
}

impl Engine {
    /// Every queue that exists now (see the module's doc).
    pub async fn known_queues(&self) -> Result<BTreeSet<String>, EngineError> {
        let mut known: BTreeSet<String> =
            self.queues().await?.into_iter().map(|(n, _)| n).collect();
        known.extend(self.subscriptions(None).await?.into_iter().map(|s| s.queue));
        known.extend(self.schedules().await?.into_iter().map(|s| s.job.queue));
        Ok(known)
    }

    /// `Ok` when `name` exists; otherwise [`Missing::Queue`] with the names closest to it
    /// among those `visible` admits. A refusal must not name what the asker may not see: a
    /// token scoped to project `p1` asking for `p1:ordres` must not learn of `p2:orders`.
    pub async fn require_queue(
        &self,
        name: &str,
        visible: impl Fn(&str) -> bool,
    ) -> Result<(), EngineError> {
        let mut known = self.known_queues().await?;
        if known.contains(name) {
            return Ok(());
        }
        known.retain(|queue| visible(queue));
        Err(EngineError::NotFound(Missing::Queue {
            name: name.to_owned(),
            closest: closest(name, &known),
        }))
    }

    /// Logs a warning, once per queue, for each of `queues` that a take waited on and that has
    /// never existed: a worker on `emials` would otherwise wait in silence. Called when a take
    /// found nothing; the store is asked at most every [`FRESH_FOR`].
    pub async fn warn_of_unknown_queues(&self, queues: &[String]) {
        // The subscriptions' own queues of deliveries are the runners', never misspelt.
        let queues: Vec<&String> = queues.iter().filter(|q| !is_internal_queue(q)).collect();
        let stale = {
            let seen = self.take_warnings.inner.lock();
            if queues
                .iter()
                .all(|q| seen.known.contains(*q) || seen.warned.contains(*q))
            {
                return;
            }
            seen.looked_at.is_none_or(|at| at.elapsed() >= FRESH_FOR)
        };
        if stale {
            let Ok(known) = self.known_queues().await else {
                return;
            };
            let mut seen = self.take_warnings.inner.lock();
            seen.known = known;
            seen.looked_at = Some(Instant::now());
        }
        let mut seen = self.take_warnings.inner.lock();
        for queue in queues {
            if seen.known.contains(queue)
                || seen.warned.contains(queue)
                || seen.warned.len() >= WARNED_AT_MOST
            {
                continue;
            }
            let near = closest(queue, &seen.known);
            if near.is_empty() {
                tracing::warn!(
                    queue = %queue,
                    "a worker takes from queue {queue:?}, which has never existed: nothing has \
                     been enqueued to it"
                );
            } else {
                tracing::warn!(
                    queue = %queue,
                    "a worker takes from queue {queue:?}, which has never existed; did you mean \
                     {}?",
                    quoted(&near)
                );
            }
            seen.warned.insert(queue.clone());
        }
    }
}

/// Names in quotes, joined: `"a", "b" or "c"`.
pub fn quoted(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn typos_find_their_queue_and_strangers_find_none() {
        let known = names(&["emails", "exports", "payments", "reports"]);
        assert_eq!(closest("emials", &known), ["emails"]);
        assert_eq!(closest("report", &known), ["reports"]);
        assert_eq!(closest("paymnets", &known), ["payments"]);
        assert!(closest("invoices", &known).is_empty());
        assert!(closest("x", &known).is_empty());
    }

    #[test]
    fn the_closest_come_first_and_at_most_three() {
        let known = names(&["aa", "ab", "ac", "ad", "abc"]);
        let near = closest("ab", &known);
        assert_eq!(near.len(), 3);
        assert_eq!(near[0], "ab");
    }

    #[test]
    fn names_are_quoted_and_joined() {
        assert_eq!(quoted(&[]), "");
        assert_eq!(quoted(&["a".into()]), "\"a\"");
        assert_eq!(
            quoted(&["a".into(), "b".into(), "c".into()]),
            "\"a\", \"b\" or \"c\""
        );
    }
}
