//! Which jobs an operation, listing or search applies to, and how a listing pages.

use crate::clock::UnixMs;
use crate::model::{ErrorEntry, Job, JobId, Status};

/// Which jobs an operation applies to.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Exactly these jobs (if given, the filter narrows them further).
    pub ids: Option<Vec<JobId>>,
    pub filter: JobFilter,
}

/// Which jobs a listing, count or selection keeps. Every condition given must hold.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub queue: Option<String>,
    pub status: Option<Status>,
    pub kind: Option<String>,
    /// Only jobs that finished (completed or died) at or after this time.
    pub finished_since_ms: Option<UnixMs>,
    /// Only unfinished jobs whose expiry has not come at this time (Zaqar's live messages).
    pub live_at_ms: Option<UnixMs>,
    /// Leave out scheduled jobs (Zaqar's delayed messages).
    pub not_scheduled: bool,
    /// Only jobs a claim (or streaming take) holds (`true`), or that none holds (`false`), at
    /// the given time: Zaqar's claimed and free messages.
    pub claimed_at: Option<(bool, UnixMs)>,
    /// Leave out jobs enqueued by this origin (a Zaqar client's own messages).
    pub not_origin: Option<String>,
}

impl JobFilter {
    /// Jobs of `queue`.
    pub fn queue(queue: impl Into<String>) -> Self {
        Self {
            queue: Some(queue.into()),
            ..Self::default()
        }
    }
}

/// Which way a listing runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Oldest (lowest id) first.
    #[default]
    Ascending,
    /// Newest first.
    Descending,
}

/// One page of a listing: up to `limit` jobs past `after` (in the page's order).
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub after: Option<JobId>,
    pub limit: usize,
    pub order: Order,
}

impl Page {
    /// The first `limit` jobs after `after`, oldest first.
    pub fn after(after: Option<JobId>, limit: usize) -> Self {
        Self {
            after,
            limit,
            order: Order::Ascending,
        }
    }
}

/// What a bounded search found: the jobs that matched, and how far it looked.
#[derive(Debug, Clone, Default)]
pub struct Searched {
    pub jobs: Vec<Job>,
    /// The last job looked at, whether it matched or not: the next search continues after it.
    /// `None` when nothing was looked at.
    pub looked_to: Option<JobId>,
    /// How many jobs were looked at.
    pub looked_at: usize,
    /// No job matching the filter lies past `looked_to`: the search is complete.
    pub exhausted: bool,
}

/// Text to find in jobs: case-insensitive, in a job's payload (its JSON text as stored) or in
/// one of its errors (the message, or the detail's JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextQuery {
    /// The text, lower-cased.
    pub lower: String,
    /// The text as JSON writes it inside a string, lower-cased: how it appears in the JSON text
    /// of an error's detail.
    pub escaped: String,
}

impl TextQuery {
    pub fn new(text: &str) -> Self {
        let lower = text.to_lowercase();
        let quoted = serde_json::to_string(&lower).unwrap_or_default();
        let escaped = quoted
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(&lower)
            .to_owned();
        Self { lower, escaped }
    }

    /// Whether `job` holds the text.
    pub fn matches(&self, payload: &str, errors: &[ErrorEntry]) -> bool {
        payload.to_lowercase().contains(&self.lower)
            || errors.iter().any(|error| {
                error.message.to_lowercase().contains(&self.lower)
                    || error.detail.as_ref().is_some_and(|detail| {
                        detail.to_string().to_lowercase().contains(&self.escaped)
                    })
            })
    }
}
