//! Replaying dead jobs: what to replay, what was replayed, and why others were not.

use crate::model::{JobId, Selection, Status, StoredPolicy};

/// What a replay did: the jobs it made ready, and why it left others as they were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replayed {
    pub ids: Vec<JobId>,
    /// Jobs the selection named by id that were not replayed, and every selected dead job that
    /// could not be, in id order.
    pub skipped: Vec<(JobId, NotReplayed)>,
}

/// Why a job was not replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReplayed {
    /// There is no such job (never was, or purged).
    NotFound,
    /// It is not dead.
    NotDead(Status),
    /// It does not match the selection's queue or type.
    NotSelected,
    /// Its unique key is held by another unfinished job of its queue: replaying it would make
    /// two unfinished jobs share the key.
    KeyHeld { key: String, holder: JobId },
}

impl NotReplayed {
    /// The reason in words.
    pub fn describe(&self) -> String {
        match self {
            Self::NotFound => "there is no such job".into(),
            Self::NotDead(status) => format!("it is {}, not dead", status.name()),
            Self::NotSelected => "it does not match the queue or type of the selection".into(),
            Self::KeyHeld { key, holder } => {
                format!("its unique key {key:?} is held by unfinished job {holder} of its queue")
            }
        }
    }
}

/// Dead jobs back to ready.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    pub selection: Selection,
    /// A new policy for the replayed jobs.
    pub policy: Option<StoredPolicy>,
    /// Forget earlier failures: the replayed job starts again from retry 1.
    pub reset_attempts: bool,
}
