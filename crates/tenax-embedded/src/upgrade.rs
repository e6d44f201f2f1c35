//! Bringing a file of an older format up to this one, at open.
//!
//! Format 1 kept completed jobs in `states`, with every other job, and memory held them all.
//! Format 2 moves them to the tables of completed jobs (see `tables`). The move is done in
//! chunks, each its own durable commit, so that a large history does not make one enormous
//! transaction; a chunk moves its jobs and counts them in the same commit, so an interrupted
//! upgrade simply goes on at the next open (the format is stamped only once all are moved).

use redb::{Database, ReadableTable};
use tenax_core::model::{JobState, Status};
use tenax_core::store::{StoreError, from_json_bytes};

use super::fault;
use super::tables::{
    BodyHead, COMPLETED, COMPLETED_AT, COMPLETED_COUNTS, COMPLETED_EXPIRING, JOBS, STATES,
};

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
                let bytes = tenax_core::store::to_json_bytes(state);
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

#[cfg(test)]
mod tests {
    use redb::ReadableDatabase;
    use tenax_core::model::JobId;
    use tenax_core::store::{JobReads as _, QueueStore as _};

    use super::*;
    use crate::disk::SimulatedDisk;
    use crate::tables::{FORMAT_VERSION, FORMAT_VERSION_KEY, META, NEXT_ID};
    use crate::{EmbeddedOptions, EmbeddedStore};

    fn body(queue: &str) -> Vec<u8> {
        format!(
            r#"{{"queue":"{queue}","type":"t","payload":{{"n":1}},"priority":0,"created_at_ms":10}}"#
        )
        .into_bytes()
    }

    fn state(status: Status, finished: Option<u64>) -> Vec<u8> {
        let mut state = JobState::new(10, 10);
        state.status = status;
        state.finished_at_ms = finished;
        tenax_core::store::to_json_bytes(&state)
    }

    /// A file as format 1 left it: completed jobs among the others in `states`.
    fn format_1(disk: &SimulatedDisk) {
        let db = Database::builder()
            .create_with_backend(disk.file(crate::FILE_NAME))
            .expect("a new file");
        let tx = db.begin_write().expect("a write");
        {
            let mut jobs = tx.open_table(JOBS).expect("jobs");
            let mut states = tx.open_table(STATES).expect("states");
            let mut meta = tx.open_table(META).expect("meta");
            for (id, queue, status, finished) in [
                (1, "a", Status::Ready, None),
                (2, "a", Status::Completed, Some(50)),
                (3, "b", Status::Completed, Some(60)),
                (4, "a", Status::Dead, Some(70)),
            ] {
                jobs.insert(id, body(queue).as_slice()).expect("a body");
                states
                    .insert(id, state(status, finished).as_slice())
                    .expect("a state");
            }
            meta.insert(FORMAT_VERSION_KEY, 1).expect("stamped");
            meta.insert(NEXT_ID, 5).expect("the next id");
        }
        tx.commit().expect("committed");
    }

    #[tokio::test]
    async fn a_format_1_file_keeps_its_completed_jobs_on_disk_only() {
        let disk = SimulatedDisk::new();
        format_1(&disk);
        let options = EmbeddedOptions {
            log_bytes: 64 * 1024,
            ..EmbeddedOptions::default()
        };
        let store = EmbeddedStore::open_simulated(&disk, &options, 100).expect("it opens");
        let completed = store.get_job(JobId(2)).await.expect("read").expect("there");
        assert_eq!(completed.state.status, Status::Completed);
        assert_eq!(completed.state.finished_at_ms, Some(50));
        assert_eq!(completed.spec.queue, "a");
        let a = store.queue_counts("a").await.expect("counts");
        assert_eq!((a.ready, a.completed, a.dead), (1, 1, 1));
        assert_eq!(store.queue_counts("b").await.expect("counts").completed, 1);
        let queues: Vec<String> = store
            .queues()
            .await
            .expect("queues")
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(queues, ["a", "b"]);
        store.writer.shutdown();
        // On disk: `states` holds only what is not completed, and the format is the current one.
        let tx = store.db.begin_read().expect("a read");
        let states = tx.open_table(STATES).expect("states");
        let ids: Vec<u64> = states
            .iter()
            .expect("rows")
            .map(|row| row.expect("a row").0.value())
            .collect();
        assert_eq!(ids, [1, 4]);
        let meta = tx.open_table(META).expect("meta");
        let format = meta
            .get(FORMAT_VERSION_KEY)
            .expect("read")
            .expect("stamped");
        assert_eq!(format.value(), FORMAT_VERSION);
    }
}
