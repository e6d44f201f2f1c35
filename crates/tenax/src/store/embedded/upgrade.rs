//! Bringing a file of an older format up to this one, at open.
//!
//! Format 1 kept completed jobs in `states`, with every other job, and memory held them all.
//! Format 2 moves them to the tables of completed jobs (see `tables`). The move is done in
//! chunks, each its own durable commit, so that a large history does not make one enormous
//! transaction; a chunk moves its jobs and counts them in the same commit, so an interrupted
//! upgrade simply goes on at the next open (the format is stamped only once all are moved).

use redb::{Database, ReadableTable};

use super::fault;
use super::tables::{
    BodyHead, COMPLETED, COMPLETED_AT, COMPLETED_COUNTS, COMPLETED_EXPIRING, JOBS, STATES,
};
use crate::model::{JobState, Status};
use crate::store::{StoreError, from_json_bytes};

/// Completed jobs moved per commit.
const CHUNK: usize = 50_000;

/// Moves every completed job out of `states`.
pub(super) fn completed_out_of_states(db: &Database) -> Result<(), StoreError> {
    let what = "moving completed jobs out of the states table (format 1 to 2)";
    let mut after = 0u64;
    let mut moved_total = 0usize;
    loop {
        let tx = db.begin_write().map_err(fault(what))?;
        let (moved, last, done) = {
            let mut states = tx.open_table(STATES).map_err(fault(what))?;
            let jobs = tx.open_table(JOBS).map_err(fault(what))?;
            let mut completed = tx.open_table(COMPLETED).map_err(fault(what))?;
            let mut at = tx.open_table(COMPLETED_AT).map_err(fault(what))?;
            let mut expiring = tx.open_table(COMPLETED_EXPIRING).map_err(fault(what))?;
            let mut counts = tx.open_table(COMPLETED_COUNTS).map_err(fault(what))?;
            // Ids of completed jobs past `after`, at most a chunk, and where the scan stopped.
            let mut found: Vec<(u64, JobState)> = Vec::new();
            let mut last = after;
            let mut done = true;
            for row in states.range(after..).map_err(fault(what))? {
                let (id, bytes) = row.map_err(fault(what))?;
                last = id.value();
                let state: JobState = from_json_bytes("job state", bytes.value())?;
                if state.status == Status::Completed {
                    found.push((id.value(), state));
                    if found.len() >= CHUNK {
                        done = false;
                        break;
                    }
                }
            }
            for (id, state) in &found {
                let Some(body) = jobs.get(id).map_err(fault(what))? else {
                    // A state without a body cannot be read back; it was never a whole job.
                    states.remove(id).map_err(fault(what))?;
                    continue;
                };
                let head: BodyHead = from_json_bytes("job body", body.value())?;
                drop(body);
                let queue = head.queue.as_str();
                let bytes = crate::store::to_json_bytes(state);
                completed
                    .insert((queue, *id), bytes.as_slice())
                    .map_err(fault(what))?;
                at.insert((state.finished_at_ms.unwrap_or(0), *id), queue)
                    .map_err(fault(what))?;
                if let Some(expires) = head.expires_at_ms {
                    expiring
                        .insert((expires, *id), queue)
                        .map_err(fault(what))?;
                }
                let count = counts
                    .get(queue)
                    .map_err(fault(what))?
                    .map_or(0, |v| v.value());
                counts.insert(queue, count + 1).map_err(fault(what))?;
                states.remove(id).map_err(fault(what))?;
            }
            (found.len(), last, done)
        };
        tx.commit().map_err(fault(what))?;
        moved_total += moved;
        if done {
            break;
        }
        // The scan stopped on the last job it moved: the next one starts past it.
        after = last + 1;
    }
    if moved_total > 0 {
        tracing::info!(
            jobs = moved_total,
            "moved completed jobs to their own tables (store format 2)"
        );
    }
    Ok(())
}
