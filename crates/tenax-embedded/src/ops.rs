//! The changes the embedded store makes to its file, how each is applied to the tables, and
//! how each is written in the write-ahead log (`wal`).
//!
//! Every op is deterministic given the tables it is applied to: replaying the log's ops in
//! order on the file as its last checkpoint left it gives the same tables as applying them the
//! first time did. (An error or attempt entry goes after the job's last one; a deletion looks up
//! where the job is. Both depend only on the tables.)
//!
//! Log encoding of an op: a tag byte, then its fields in order: integers as 8 (or 4) bytes
//! little-endian, byte strings and names as a 4-byte little-endian length and the bytes, an
//! optional integer as a byte 0 (none) or 1 followed by the integer.

use std::collections::HashMap;
use std::sync::Arc;

use redb::{ReadableTable, Table, WriteTransaction};
use tenax_core::clock::UnixMs;
use tenax_core::model::{BatchId, JobId, JobState, SubscriptionId};
use tenax_core::store::from_json_bytes;

use super::sorted::{Sorted, Writes, put_sorted, remove_sorted};
use super::tables::{
    ATTEMPTS, BATCHES, BodyHead, CHILDREN, COMPLETED, COMPLETED_AT, COMPLETED_COUNTS,
    COMPLETED_EXPIRING, ENDPOINTS, ERRORS, JOBS, META, NEXT_BATCH_ID, NEXT_ID,
    NEXT_SUBSCRIPTION_ID, NEXT_TOKEN_ID, POLICIES, QUEUES, SCHEDULES, STARTS, STATES,
    SUBSCRIPTIONS, TOKENS, WAL_LSN,
};

/// One change to the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    PutBody {
        id: JobId,
        body: Vec<u8>,
    },
    /// The state of a job that is not completed.
    PutState {
        id: JobId,
        state: Vec<u8>,
    },
    PutPolicy {
        id: JobId,
        policy: Vec<u8>,
    },
    PutError {
        id: JobId,
        attempt: u32,
        entry: Vec<u8>,
    },
    /// A job completed: its state leaves `states` for `completed` (see `tables`), and counts
    /// there from now on.
    Complete {
        id: JobId,
        queue: Arc<str>,
        finished_at_ms: UnixMs,
        expires_at_ms: Option<UnixMs>,
        state: Vec<u8>,
    },
    /// Removes a job, completed or not: body, state, policy, errors and attempts. A job that
    /// is not there (another request removed it first) is left alone.
    DeleteJob {
        id: JobId,
    },
    PutQueue {
        name: String,
        config: Vec<u8>,
    },
    SetNextId(JobId),
    DeleteQueue {
        name: String,
    },
    PutSubscription {
        id: SubscriptionId,
        subscription: Vec<u8>,
    },
    /// Removes a subscription's record (its deliveries are removed by `DeleteJob`s).
    DeleteSubscription {
        id: SubscriptionId,
        next_id: SubscriptionId,
    },
    /// Appends to a delivery's attempt log.
    PutAttempt {
        id: JobId,
        entry: Vec<u8>,
    },
    PutToken {
        id: u64,
        record: Vec<u8>,
    },
    DeleteToken {
        id: u64,
    },
    PutSchedule {
        name: String,
        schedule: Vec<u8>,
    },
    DeleteSchedule {
        name: String,
    },
    /// Adds `count` starts of a rate-limited queue to its bucket `[bucket_ms, bucket_ms +
    /// width_ms)`, and forgets the queue's buckets that end at or before `forget_before_ms`.
    Started {
        queue: String,
        bucket_ms: UnixMs,
        width_ms: u64,
        count: u64,
        forget_before_ms: UnixMs,
    },
    /// An endpoint's delivery state, by origin.
    PutEndpoint {
        origin: String,
        state: Vec<u8>,
    },
    /// The edges from each of `parents` to `child`, a job that waits for them.
    PutChildren {
        child: JobId,
        parents: Vec<JobId>,
    },
    /// A batch's record (raising the next batch id past it).
    PutBatch {
        id: BatchId,
        record: Vec<u8>,
    },
    /// Removes a batch's record.
    DeleteBatch {
        id: BatchId,
    },
}

/// How applied ops changed each queue's count of completed jobs.
pub type CountDeltas = HashMap<Arc<str>, i64>;

/// Declares [`Tables`]: each table opened on its first use in the transaction, not before
/// (opening costs a lookup and an allocation, and a commit of one job touches two or three of
/// the tables).
macro_rules! tables {
    ($($name:ident: $definition:ident => ($key:ty, $value:ty),)*) => {
        /// The tables of one write transaction, each opened when first used, and the blind
        /// writes to the job tables not yet written (see `sorted`).
        pub struct Tables<'t> {
            tx: &'t WriteTransaction,
            $($name: Option<Table<'t, $key, $value>>,)*
            gathered: Gathered,
        }

        impl<'t> Tables<'t> {
            pub fn open(tx: &'t WriteTransaction) -> Self {
                Self {
                    tx,
                    $($name: None,)*
                    gathered: Gathered::default(),
                }
            }

            $(
                fn $name(&mut self) -> Result<&mut Table<'t, $key, $value>, redb::Error> {
                    let table = match self.$name.take() {
                        Some(table) => table,
                        None => self.tx.open_table($definition)?,
                    };
                    Ok(self.$name.insert(table))
                }
            )*
        }
    };
}

tables! {
    jobs: JOBS => (u64, &'static [u8]),
    states: STATES => (u64, &'static [u8]),
    policies: POLICIES => (u64, &'static [u8]),
    errors: ERRORS => ((u64, u32), &'static [u8]),
    queues: QUEUES => (&'static str, &'static [u8]),
    meta: META => (&'static str, u64),
    subscriptions: SUBSCRIPTIONS => (u64, &'static [u8]),
    attempts: ATTEMPTS => ((u64, u32), &'static [u8]),
    tokens: TOKENS => (u64, &'static [u8]),
    endpoints: ENDPOINTS => (&'static str, &'static [u8]),
    completed: COMPLETED => ((&'static str, u64), &'static [u8]),
    completed_at: COMPLETED_AT => ((u64, u64), &'static str),
    completed_expiring: COMPLETED_EXPIRING => ((u64, u64), &'static str),
    completed_counts: COMPLETED_COUNTS => (&'static str, u64),
    schedules: SCHEDULES => (&'static str, &'static [u8]),
    starts: STARTS => ((&'static str, u64), (u64, u64)),
    children: CHILDREN => ((u64, u64), ()),
    batches: BATCHES => (u64, &'static [u8]),
}

impl Tables<'_> {
    /// Applies `ops` in order, adding their change of the completed counts to `deltas` (the
    /// counts table itself is changed by [`Tables::add_counts`]). The job tables' blind writes
    /// are gathered and written sorted at the end (`sorted`).
    pub fn apply_all(
        &mut self,
        ops: impl IntoIterator<Item = Op>,
        deltas: &mut CountDeltas,
    ) -> Result<(), redb::Error> {
        for op in ops {
            self.apply(op, deltas)?;
        }
        self.flush()
    }

    /// Applies one op; a blind write to a job table is only gathered.
    fn apply(&mut self, op: Op, deltas: &mut CountDeltas) -> Result<(), redb::Error> {
        op.add_known_delta(deltas);
        match op {
            Op::PutBody { id, body } => self.gathered.jobs.put(id.0, body),
            Op::PutState { id, state } => self.gathered.states.put(id.0, state),
            Op::PutPolicy { id, policy } => self.gathered.policies.put(id.0, policy),
            Op::PutError {
                id: JobId(id),
                attempt,
                entry,
            } => {
                // After the job's last entry, never over it: a replay with reset attempts
                // numbers failures from 1 again, and the earlier history is kept.
                let last = last_key(self.errors()?, id)?;
                let key = last.map_or(attempt, |last| attempt.max(last.saturating_add(1)));
                self.errors()?.insert((id, key), entry.as_slice())?;
            }
            Op::Complete {
                id: JobId(id),
                queue,
                finished_at_ms,
                expires_at_ms,
                state,
            } => {
                let gathered = &mut self.gathered;
                gathered.states.remove(id);
                gathered.completed.put((queue.clone(), id), state);
                gathered
                    .completed_at
                    .put((finished_at_ms, id), queue.clone());
                if let Some(at) = expires_at_ms {
                    gathered.completed_expiring.put((at, id), queue);
                }
            }
            Op::DeleteJob { id: JobId(id) } => {
                // It reads the job tables: they must hold every earlier write first.
                self.flush()?;
                if self.states()?.remove(id)?.is_none() {
                    if let Some(queue) = self.remove_completed(id)? {
                        *deltas.entry(Arc::from(queue)).or_default() -= 1;
                    }
                }
                self.jobs()?.remove(id)?;
                self.policies()?.remove(id)?;
                self.errors()?
                    .retain_in((id, 0)..=(id, u32::MAX), |_, _| false)?;
                self.attempts()?
                    .retain_in((id, 0)..=(id, u32::MAX), |_, _| false)?;
                // Its edges to its children go with it (a child's to it stay in its `after`).
                self.children()?
                    .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)?;
            }
            Op::PutQueue { name, config } => {
                self.queues()?.insert(name.as_str(), config.as_slice())?;
            }
            Op::DeleteQueue { name } => {
                self.queues()?.remove(name.as_str())?;
                let name = name.as_str();
                self.starts()?
                    .retain_in((name, 0)..=(name, u64::MAX), |_, _| false)?;
            }
            Op::PutSchedule { name, schedule } => {
                self.schedules()?
                    .insert(name.as_str(), schedule.as_slice())?;
            }
            Op::DeleteSchedule { name } => {
                self.schedules()?.remove(name.as_str())?;
            }
            Op::Started {
                queue,
                bucket_ms,
                width_ms,
                count,
                forget_before_ms,
            } => {
                let queue = queue.as_str();
                let (width, held) = self
                    .starts()?
                    .get((queue, bucket_ms))?
                    .map_or((width_ms, 0), |v| v.value());
                // A bucket made under another period keeps the wider width: it counts longer.
                self.starts()?.insert(
                    (queue, bucket_ms),
                    (width.max(width_ms), held.saturating_add(count)),
                )?;
                self.starts()?
                    .retain_in((queue, 0)..(queue, forget_before_ms), |key, value| {
                        key.1.saturating_add(value.0) > forget_before_ms
                    })?;
            }
            Op::SetNextId(next) => raise(self.meta()?, NEXT_ID, next.0)?,
            Op::PutSubscription {
                id: SubscriptionId(id),
                subscription,
            } => {
                raise(self.meta()?, NEXT_SUBSCRIPTION_ID, id.saturating_add(1))?;
                self.subscriptions()?.insert(id, subscription.as_slice())?;
            }
            Op::DeleteSubscription {
                id: SubscriptionId(id),
                next_id,
            } => {
                // The counter is kept past the deleted id, so ids are never reused.
                raise(self.meta()?, NEXT_SUBSCRIPTION_ID, next_id.0)?;
                self.subscriptions()?.remove(id)?;
            }
            Op::PutToken { id, record } => {
                raise(self.meta()?, NEXT_TOKEN_ID, id.saturating_add(1))?;
                self.tokens()?.insert(id, record.as_slice())?;
            }
            // The counter stays past the deleted id: ids are never reused.
            Op::DeleteToken { id } => {
                self.tokens()?.remove(id)?;
            }
            Op::PutAttempt {
                id: JobId(id),
                entry,
            } => {
                let n = last_key(self.attempts()?, id)?.map_or(1, |last| last.saturating_add(1));
                self.attempts()?.insert((id, n), entry.as_slice())?;
            }
            Op::PutEndpoint { origin, state } => {
                self.endpoints()?
                    .insert(origin.as_str(), state.as_slice())?;
            }
            Op::PutChildren { child, parents } => {
                let children = self.children()?;
                for parent in parents {
                    children.insert((parent.0, child.0), ())?;
                }
            }
            Op::PutBatch {
                id: BatchId(id),
                record,
            } => {
                raise(self.meta()?, NEXT_BATCH_ID, id.saturating_add(1))?;
                self.batches()?.insert(id, record.as_slice())?;
            }
            // The counter stays past the deleted id: ids are never reused.
            Op::DeleteBatch { id: BatchId(id) } => {
                self.batches()?.remove(id)?;
            }
        }
        Ok(())
    }

    /// Writes the gathered blind writes, each table's in key order.
    fn flush(&mut self) -> Result<(), redb::Error> {
        let gathered = &mut self.gathered;
        if gathered.is_empty() {
            return Ok(());
        }
        let jobs = gathered.jobs.take_sorted();
        let states = gathered.states.take_sorted();
        let policies = gathered.policies.take_sorted();
        let completed = gathered.completed.take_sorted();
        let completed_at = gathered.completed_at.take_sorted();
        let completed_expiring = gathered.completed_expiring.take_sorted();
        write_ids(self.jobs()?, jobs)?;
        write_ids(self.states()?, states)?;
        write_ids(self.policies()?, policies)?;
        let (puts, removals) = completed;
        let table = self.completed()?;
        for (queue, id) in &removals {
            table.remove((&**queue, *id))?;
        }
        put_sorted(
            table,
            puts.iter()
                .map(|((queue, id), state)| ((&**queue, *id), state.as_slice())),
        )?;
        write_queue_index(self.completed_at()?, completed_at)?;
        write_queue_index(self.completed_expiring()?, completed_expiring)?;
        Ok(())
    }

    /// Forgets job `id` if it is completed; returns its queue if it was. Its body (still in
    /// `jobs`) says which queue to look in.
    fn remove_completed(&mut self, id: u64) -> Result<Option<String>, redb::Error> {
        let Some(body) = self.jobs()?.get(id)? else {
            return Ok(None);
        };
        let head: BodyHead = from_json_bytes("job body", body.value())
            .map_err(|e| redb::Error::Corrupted(e.to_string()))?;
        drop(body);
        let Some(row) = self.completed()?.remove((head.queue.as_str(), id))? else {
            return Ok(None);
        };
        let state: JobState = from_json_bytes("job state", row.value())
            .map_err(|e| redb::Error::Corrupted(e.to_string()))?;
        drop(row);
        self.completed_at()?
            .remove((state.finished_at_ms.unwrap_or(0), id))?;
        if let Some(at) = head.expires_at_ms {
            self.completed_expiring()?.remove((at, id))?;
        }
        Ok(Some(head.queue))
    }

    /// Adds `deltas` to the queues' counts of completed jobs; a count of 0 has no row.
    pub fn add_counts(&mut self, deltas: &CountDeltas) -> Result<(), redb::Error> {
        for (queue, delta) in deltas {
            let current = self
                .completed_counts()?
                .get(&**queue)?
                .map_or(0, |v| v.value());
            match current.saturating_add_signed(*delta) {
                0 => self.completed_counts()?.remove(&**queue).map(drop)?,
                count => self.completed_counts()?.insert(&**queue, count).map(drop)?,
            }
        }
        Ok(())
    }

    /// Records that the log's records up to `lsn` are applied.
    pub fn set_log_position(&mut self, lsn: u64) -> Result<(), redb::Error> {
        self.meta()?.insert(WAL_LSN, lsn)?;
        Ok(())
    }
}

/// The job tables' blind writes not yet written (see `sorted`): only `apply` adds to them, and
/// `flush` writes them before anything reads these tables.
#[derive(Default)]
struct Gathered {
    jobs: Writes<u64, Vec<u8>>,
    states: Writes<u64, Vec<u8>>,
    policies: Writes<u64, Vec<u8>>,
    completed: Writes<(Arc<str>, u64), Vec<u8>>,
    completed_at: Writes<(u64, u64), Arc<str>>,
    completed_expiring: Writes<(u64, u64), Arc<str>>,
}

impl Gathered {
    fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.states.is_empty()
            && self.policies.is_empty()
            && self.completed.is_empty()
            && self.completed_at.is_empty()
            && self.completed_expiring.is_empty()
    }
}

/// Writes a table keyed by job id: sorted removals, then sorted puts (each key has one or the
/// other).
fn write_ids(
    table: &mut Table<'_, u64, &'static [u8]>,
    (puts, removals): Sorted<u64, Vec<u8>>,
) -> Result<(), redb::Error> {
    remove_sorted(table, &removals)?;
    put_sorted(
        table,
        puts.iter().map(|(id, value)| (*id, value.as_slice())),
    )
}

/// Writes a `(time, job id) -> queue` table.
fn write_queue_index(
    table: &mut Table<'_, (u64, u64), &'static str>,
    (puts, removals): Sorted<(u64, u64), Arc<str>>,
) -> Result<(), redb::Error> {
    for key in removals {
        table.remove(key)?;
    }
    put_sorted(table, puts.iter().map(|(key, queue)| (*key, &**queue)))
}

/// The last `n` of a job's `(id, n)` rows.
fn last_key(
    table: &Table<'_, (u64, u32), &'static [u8]>,
    id: u64,
) -> Result<Option<u32>, redb::StorageError> {
    let mut rows = table.range((id, 0)..=(id, u32::MAX))?;
    Ok(match rows.next_back() {
        Some(row) => Some(row?.0.value().1),
        None => None,
    })
}

/// Raises a counter in `meta` to `value`; never lowers it.
fn raise(
    meta: &mut Table<'_, &'static str, u64>,
    name: &str,
    value: u64,
) -> Result<(), redb::StorageError> {
    let current = meta.get(name)?.map_or(0, |v| v.value());
    if current < value {
        meta.insert(name, value)?;
    }
    Ok(())
}

// The log encoding.

const PUT_BODY: u8 = 1;
const PUT_STATE: u8 = 2;
const PUT_POLICY: u8 = 3;
const PUT_ERROR: u8 = 4;
const COMPLETE: u8 = 5;
const DELETE_JOB: u8 = 6;
const PUT_QUEUE: u8 = 7;
const SET_NEXT_ID: u8 = 8;
const DELETE_QUEUE: u8 = 9;
const PUT_SUBSCRIPTION: u8 = 10;
const DELETE_SUBSCRIPTION: u8 = 11;
const PUT_ATTEMPT: u8 = 12;
const PUT_TOKEN: u8 = 13;
const DELETE_TOKEN: u8 = 14;
const PUT_SCHEDULE: u8 = 15;
const DELETE_SCHEDULE: u8 = 16;
const STARTED: u8 = 17;
const PUT_ENDPOINT: u8 = 18;
// 19 and 20 are cancellation's (unused: its marks live in memory).
const PUT_CHILDREN: u8 = 21;
// 22 is unused.
const PUT_BATCH: u8 = 23;
const DELETE_BATCH: u8 = 24;

impl Op {
    /// Whether the op may wait to be applied to the file (`unapplied`): how it changes the
    /// completed counts is known without the tables. A deletion's is not (it depends on whether
    /// the job was completed).
    pub fn can_wait(&self) -> bool {
        !matches!(self, Op::DeleteJob { .. })
    }

    /// Adds how the op changes the completed counts to `deltas`, for an op that [can
    /// wait](Op::can_wait) (a deletion's change is found as it is applied).
    pub fn add_known_delta(&self, deltas: &mut CountDeltas) {
        if let Op::Complete { queue, .. } = self {
            *deltas.entry(queue.clone()).or_default() += 1;
        }
    }

    /// Appends the op's log encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        fn int(out: &mut Vec<u8>, n: u64) {
            out.extend_from_slice(&n.to_le_bytes());
        }
        fn bytes(out: &mut Vec<u8>, b: &[u8]) {
            let len = u32::try_from(b.len()).expect("a field under 4 GiB");
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(b);
        }
        fn tagged(out: &mut Vec<u8>, tag: u8, id: u64, b: &[u8]) {
            out.push(tag);
            int(out, id);
            bytes(out, b);
        }
        match self {
            Op::PutBody { id, body } => tagged(out, PUT_BODY, id.0, body),
            Op::PutState { id, state } => tagged(out, PUT_STATE, id.0, state),
            Op::PutPolicy { id, policy } => tagged(out, PUT_POLICY, id.0, policy),
            Op::PutError { id, attempt, entry } => {
                out.push(PUT_ERROR);
                int(out, id.0);
                out.extend_from_slice(&attempt.to_le_bytes());
                bytes(out, entry);
            }
            Op::Complete {
                id,
                queue,
                finished_at_ms,
                expires_at_ms,
                state,
            } => {
                out.push(COMPLETE);
                int(out, id.0);
                bytes(out, queue.as_bytes());
                int(out, *finished_at_ms);
                match expires_at_ms {
                    Some(at) => {
                        out.push(1);
                        int(out, *at);
                    }
                    None => out.push(0),
                }
                bytes(out, state);
            }
            Op::DeleteJob { id } => {
                out.push(DELETE_JOB);
                int(out, id.0);
            }
            Op::PutQueue { name, config } => {
                out.push(PUT_QUEUE);
                bytes(out, name.as_bytes());
                bytes(out, config);
            }
            Op::SetNextId(next) => {
                out.push(SET_NEXT_ID);
                int(out, next.0);
            }
            Op::DeleteQueue { name } => {
                out.push(DELETE_QUEUE);
                bytes(out, name.as_bytes());
            }
            Op::PutSubscription { id, subscription } => {
                tagged(out, PUT_SUBSCRIPTION, id.0, subscription);
            }
            Op::DeleteSubscription { id, next_id } => {
                out.push(DELETE_SUBSCRIPTION);
                int(out, id.0);
                int(out, next_id.0);
            }
            Op::PutAttempt { id, entry } => tagged(out, PUT_ATTEMPT, id.0, entry),
            Op::PutToken { id, record } => tagged(out, PUT_TOKEN, *id, record),
            Op::DeleteToken { id } => {
                out.push(DELETE_TOKEN);
                int(out, *id);
            }
            Op::PutSchedule { name, schedule } => {
                out.push(PUT_SCHEDULE);
                bytes(out, name.as_bytes());
                bytes(out, schedule);
            }
            Op::DeleteSchedule { name } => {
                out.push(DELETE_SCHEDULE);
                bytes(out, name.as_bytes());
            }
            Op::Started {
                queue,
                bucket_ms,
                width_ms,
                count,
                forget_before_ms,
            } => {
                out.push(STARTED);
                bytes(out, queue.as_bytes());
                int(out, *bucket_ms);
                int(out, *width_ms);
                int(out, *count);
                int(out, *forget_before_ms);
            }
            Op::PutEndpoint { origin, state } => {
                out.push(PUT_ENDPOINT);
                bytes(out, origin.as_bytes());
                bytes(out, state);
            }
            Op::PutChildren { child, parents } => {
                out.push(PUT_CHILDREN);
                int(out, child.0);
                int(out, parents.len() as u64);
                for parent in parents {
                    int(out, parent.0);
                }
            }
            Op::PutBatch { id, record } => tagged(out, PUT_BATCH, id.0, record),
            Op::DeleteBatch { id } => {
                out.push(DELETE_BATCH);
                int(out, id.0);
            }
        }
    }

    /// Reads every op of a log record's payload, in order.
    pub fn decode_all(mut bytes: &[u8]) -> Result<Vec<Op>, String> {
        let mut ops = Vec::new();
        while !bytes.is_empty() {
            ops.push(Self::decode(&mut bytes)?);
        }
        Ok(ops)
    }

    fn decode(input: &mut &[u8]) -> Result<Op, String> {
        let mut reader = Reader(input);
        let tag = reader.byte()?;
        let op = match tag {
            PUT_BODY => Op::PutBody {
                id: JobId(reader.int()?),
                body: reader.bytes()?,
            },
            PUT_STATE => Op::PutState {
                id: JobId(reader.int()?),
                state: reader.bytes()?,
            },
            PUT_POLICY => Op::PutPolicy {
                id: JobId(reader.int()?),
                policy: reader.bytes()?,
            },
            PUT_ERROR => Op::PutError {
                id: JobId(reader.int()?),
                attempt: reader.int32()?,
                entry: reader.bytes()?,
            },
            COMPLETE => Op::Complete {
                id: JobId(reader.int()?),
                queue: Arc::from(reader.text()?),
                finished_at_ms: reader.int()?,
                expires_at_ms: match reader.byte()? {
                    0 => None,
                    1 => Some(reader.int()?),
                    other => return Err(format!("an optional integer marked {other}")),
                },
                state: reader.bytes()?,
            },
            DELETE_JOB => Op::DeleteJob {
                id: JobId(reader.int()?),
            },
            PUT_QUEUE => Op::PutQueue {
                name: reader.text()?,
                config: reader.bytes()?,
            },
            SET_NEXT_ID => Op::SetNextId(JobId(reader.int()?)),
            DELETE_QUEUE => Op::DeleteQueue {
                name: reader.text()?,
            },
            PUT_SUBSCRIPTION => Op::PutSubscription {
                id: SubscriptionId(reader.int()?),
                subscription: reader.bytes()?,
            },
            DELETE_SUBSCRIPTION => Op::DeleteSubscription {
                id: SubscriptionId(reader.int()?),
                next_id: SubscriptionId(reader.int()?),
            },
            PUT_ATTEMPT => Op::PutAttempt {
                id: JobId(reader.int()?),
                entry: reader.bytes()?,
            },
            PUT_TOKEN => Op::PutToken {
                id: reader.int()?,
                record: reader.bytes()?,
            },
            DELETE_TOKEN => Op::DeleteToken { id: reader.int()? },
            PUT_SCHEDULE => Op::PutSchedule {
                name: reader.text()?,
                schedule: reader.bytes()?,
            },
            DELETE_SCHEDULE => Op::DeleteSchedule {
                name: reader.text()?,
            },
            STARTED => Op::Started {
                queue: reader.text()?,
                bucket_ms: reader.int()?,
                width_ms: reader.int()?,
                count: reader.int()?,
                forget_before_ms: reader.int()?,
            },
            PUT_ENDPOINT => Op::PutEndpoint {
                origin: reader.text()?,
                state: reader.bytes()?,
            },
            PUT_CHILDREN => {
                let child = JobId(reader.int()?);
                let count = reader.int()?;
                // Each parent is 8 bytes: a count past what is left is a damaged record, not
                // an allocation to make.
                if count > (reader.0.len() / 8) as u64 {
                    return Err(format!("{count} parents where fewer bytes are left"));
                }
                let parents = (0..count)
                    .map(|_| reader.int().map(JobId))
                    .collect::<Result<_, _>>()?;
                Op::PutChildren { child, parents }
            }
            PUT_BATCH => Op::PutBatch {
                id: BatchId(reader.int()?),
                record: reader.bytes()?,
            },
            DELETE_BATCH => Op::DeleteBatch {
                id: BatchId(reader.int()?),
            },
            other => return Err(format!("an unknown op {other}")),
        };
        Ok(op)
    }
}

/// Reads fields off the front of a slice.
struct Reader<'a, 'b>(&'a mut &'b [u8]);

impl Reader<'_, '_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err(format!(
                "a field of {n} bytes where {} are left",
                self.0.len()
            ));
        }
        let (head, rest) = self.0.split_at(n);
        *self.0 = rest;
        Ok(head)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn int(&mut self) -> Result<u64, String> {
        let bytes = self.take(8)?;
        Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| "8 bytes")?))
    }

    fn int32(&mut self) -> Result<u32, String> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes(bytes.try_into().map_err(|_| "4 bytes")?))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let len = self.int32()? as usize;
        Ok(self.take(len)?.to_vec())
    }

    fn text(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|_| "a name that is not UTF-8".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_op() -> Vec<Op> {
        vec![
            Op::PutBody {
                id: JobId(1),
                body: b"{\"queue\":\"q\"}".to_vec(),
            },
            Op::PutState {
                id: JobId(2),
                state: b"{}".to_vec(),
            },
            Op::PutPolicy {
                id: JobId(3),
                policy: Vec::new(),
            },
            Op::PutError {
                id: JobId(4),
                attempt: 7,
                entry: b"e".to_vec(),
            },
            Op::Complete {
                id: JobId(5),
                queue: Arc::from("caf\u{e9}"),
                finished_at_ms: 1_700_000_000_000,
                expires_at_ms: Some(u64::MAX),
                state: b"s".to_vec(),
            },
            Op::Complete {
                id: JobId(u64::MAX),
                queue: Arc::from(""),
                finished_at_ms: 0,
                expires_at_ms: None,
                state: Vec::new(),
            },
            Op::DeleteJob { id: JobId(6) },
            Op::PutQueue {
                name: "q".into(),
                config: b"{}".to_vec(),
            },
            Op::SetNextId(JobId(8)),
            Op::DeleteQueue { name: "q".into() },
            Op::PutSubscription {
                id: SubscriptionId(9),
                subscription: b"{}".to_vec(),
            },
            Op::DeleteSubscription {
                id: SubscriptionId(9),
                next_id: SubscriptionId(10),
            },
            Op::PutAttempt {
                id: JobId(11),
                entry: b"a".to_vec(),
            },
            Op::PutToken {
                id: 12,
                record: b"t".to_vec(),
            },
            Op::DeleteToken { id: 13 },
            Op::PutSchedule {
                name: "nightly".into(),
                schedule: b"{}".to_vec(),
            },
            Op::DeleteSchedule {
                name: "nightly".into(),
            },
            Op::Started {
                queue: "limited".into(),
                bucket_ms: 1_800_000_000_000,
                width_ms: 1_000,
                count: 7,
                forget_before_ms: u64::MAX,
            },
            Op::PutEndpoint {
                origin: "https://h\u{e9}.example:8443".into(),
                state: b"{}".to_vec(),
            },
            Op::PutChildren {
                child: JobId(14),
                parents: vec![JobId(1), JobId(u64::MAX)],
            },
            Op::PutChildren {
                child: JobId(15),
                parents: Vec::new(),
            },
            Op::PutBatch {
                id: BatchId(14),
                record: b"{}".to_vec(),
            },
            Op::DeleteBatch { id: BatchId(14) },
        ]
    }

    #[test]
    fn every_op_reads_back_as_written() {
        let ops = every_op();
        let mut bytes = Vec::new();
        for op in &ops {
            op.encode(&mut bytes);
        }
        assert_eq!(Op::decode_all(&bytes).unwrap(), ops);
    }

    /// Starts add to their bucket and forget the queue's buckets that end before the period;
    /// deleting the queue forgets them all.
    #[test]
    fn starts_add_up_and_old_buckets_go() {
        let dir = tempfile::tempdir().expect("a directory");
        let db = redb::Database::create(dir.path().join("t.redb")).expect("a file");
        let rows = |db: &redb::Database| -> Vec<((String, u64), (u64, u64))> {
            use redb::{ReadableDatabase, ReadableTable};
            let tx = db.begin_read().expect("read");
            let table = tx.open_table(STARTS).expect("table");
            table
                .iter()
                .expect("rows")
                .map(|row| {
                    let (k, v) = row.expect("row");
                    let (queue, bucket) = k.value();
                    ((queue.to_owned(), bucket), v.value())
                })
                .collect()
        };
        let apply = |ops: Vec<Op>| {
            let tx = db.begin_write().expect("write");
            {
                let mut tables = Tables::open(&tx);
                let mut deltas = CountDeltas::new();
                tables.apply_all(ops, &mut deltas).expect("applied");
            }
            tx.commit().expect("committed");
        };
        let started = |queue: &str, bucket_ms, count, forget_before_ms| Op::Started {
            queue: queue.into(),
            bucket_ms,
            width_ms: 1_000,
            count,
            forget_before_ms,
        };
        apply(vec![
            started("q", 10_000, 2, 0),
            started("q", 10_000, 3, 0),
            started("q", 11_000, 1, 0),
            started("other", 10_000, 7, 0),
        ]);
        assert_eq!(
            rows(&db),
            [
                (("other".into(), 10_000), (1_000, 7)),
                (("q".into(), 10_000), (1_000, 5)),
                (("q".into(), 11_000), (1_000, 1)),
            ]
        );
        // [10 000, 11 000) ends at the horizon: forgotten; [11 000, 12 000) does not.
        apply(vec![started("q", 70_000, 1, 11_000)]);
        assert_eq!(
            rows(&db),
            [
                (("other".into(), 10_000), (1_000, 7)),
                (("q".into(), 11_000), (1_000, 1)),
                (("q".into(), 70_000), (1_000, 1)),
            ]
        );
        apply(vec![Op::DeleteQueue { name: "q".into() }]);
        assert_eq!(rows(&db), [(("other".into(), 10_000), (1_000, 7))]);
    }

    #[test]
    fn a_cut_record_is_refused_not_misread() {
        let mut bytes = Vec::new();
        for op in every_op() {
            op.encode(&mut bytes);
        }
        for cut in 1..bytes.len() {
            if let Ok(ops) = Op::decode_all(&bytes[..cut]) {
                // A cut exactly between two ops reads as the ops before it.
                let mut again = Vec::new();
                for op in &ops {
                    op.encode(&mut again);
                }
                assert_eq!(again, bytes[..cut]);
            }
        }
        assert!(Op::decode_all(&[99]).unwrap_err().contains("unknown op"));
    }
}
