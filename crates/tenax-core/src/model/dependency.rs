//! Dependencies between jobs: a job may wait for others (its parents) and runs once every one of
//! them has completed. The rules of what a parent's end does to a waiting job live here, so that
//! every store applies the same ones in the commit that ends the parent.
//!
//! Invariant: a job waits only for jobs that existed before it (stored ones, or earlier jobs of
//! the same enqueue, which the engine orders parents first), so the edges never form a cycle.

use serde::{Deserialize, Serialize};

use super::JobId;

/// What a waiting job does when a job it waits for ends without completing: dies, is cancelled,
/// is deleted or expires.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OnParentDead {
    /// The waiting job is cancelled, and so are the jobs waiting for it.
    #[default]
    Cancel,
    /// The parent counts as done: the waiting job still runs once its other parents are.
    Run,
}

impl OnParentDead {
    pub fn is_default(&self) -> bool {
        *self == Self::Cancel
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Run => "run",
        }
    }
}

/// A job an enqueued job waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// A stored job.
    Job(JobId),
    /// An earlier job of the same enqueue, by its index there.
    Earlier(usize),
}

/// How a parent ended, as its waiting children see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentEnd {
    Completed,
    /// Dead, cancelled, deleted or expired: it will not complete (until replayed).
    Lost,
}

/// What a parent's end does to one waiting child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildMove {
    /// It still waits for other parents; `pending` is the count of them left.
    Wait { pending: u32 },
    /// Its last parent is done: it becomes ready (or scheduled, if its run time is ahead).
    Release,
    /// It will never run: it is cancelled (and so, in turn, are its own waiting children that
    /// cancel on a lost parent).
    Cancel,
}

/// The rule: a completed parent, or a lost one that the child runs past, takes one from the
/// parents the child waits for (`pending`, counted before this end); the last one releases it.
/// A lost parent cancels a child that asked to be cancelled, however many parents it still
/// waits for.
pub fn child_move(end: ParentEnd, on_parent_dead: OnParentDead, pending: u32) -> ChildMove {
    if end == ParentEnd::Lost && on_parent_dead == OnParentDead::Cancel {
        return ChildMove::Cancel;
    }
    match pending.saturating_sub(1) {
        0 => ChildMove::Release,
        pending => ChildMove::Wait { pending },
    }
}

/// Why a job was cancelled because of its parent, in words (its `dead_reason`).
pub fn lost_parent_reason(parent: JobId) -> String {
    format!("job {parent}, which it waits for, did not complete")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_completed_parent_releases_and_a_lost_one_cancels_unless_asked_to_run() {
        use ChildMove::*;
        use OnParentDead::{Cancel as C, Run as R};
        use ParentEnd::{Completed, Lost};
        assert_eq!(child_move(Completed, C, 1), Release);
        assert_eq!(child_move(Completed, C, 3), Wait { pending: 2 });
        assert_eq!(child_move(Lost, C, 3), Cancel);
        assert_eq!(child_move(Lost, C, 1), Cancel);
        assert_eq!(child_move(Lost, R, 1), Release);
        assert_eq!(child_move(Lost, R, 2), Wait { pending: 1 });
        // A count already at zero (a parent counted twice) releases rather than wrapping.
        assert_eq!(child_move(Completed, R, 0), Release);
    }
}
