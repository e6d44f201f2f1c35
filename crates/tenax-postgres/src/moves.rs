//! Moving queues from one pool's database to another's (`tenax queues move`;
//! `migrations/0018_moves.sql`). The pooled store (`tenax-pools`) runs a move in this order;
//! this module holds each step's statements:
//!
//! 1. [`PostgresStore::fence_moved`] on the source: its queues are listed in `tenax_moved`, and
//!    triggers refuse any new row of them. It returns once every transaction that began before
//!    the fence has ended, so no row of them can be written there again.
//! 2. [`copy_moved`] from the source into the target: in one transaction on each, the rows of
//!    the fenced queues are locked on the source, copied whole (ids, leases, claims and all),
//!    committed on the target, then replaced on the source by forwards from their ids to the
//!    target. A step that fails leaves the source as it was and can be run again: the target's
//!    copy of a queue that is not placed there is nobody's, and is dropped first.
//!
//! Invariant: one move at a time runs (`tenax_moves_one`), so every queue of the source's
//! `tenax_moved` whose rows are still there is one of the move's.

use futures_util::{SinkExt as _, StreamExt as _};
use tenax_core::store::StoreError;

use super::catalogue::Sequence;
use super::statements::{Sql, statements};
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, fault};

/// What a move copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    pub below: MovedBelow,
    /// Jobs (finished ones too) and subscriptions; 0 when a run before copied them.
    pub jobs: u64,
    pub subscriptions: u64,
}

/// Past the largest id of each sequence a move took from its source: only ids below are ever
/// forwarded. 0: it took none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MovedBelow {
    pub jobs: i64,
    pub subscriptions: i64,
    pub batches: i64,
}

impl MovedBelow {
    /// The bound of `sequence`.
    pub fn of(&self, sequence: Sequence) -> i64 {
        match sequence {
            Sequence::Jobs => self.jobs,
            Sequence::Subscriptions => self.subscriptions,
            Sequence::Batches => self.batches,
        }
    }
}

/// What ties a queue of a move to a queue that does not move with it: one transaction writes
/// both, so they must share a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The queue that moves.
    pub queue: String,
    /// The queue it is tied to.
    pub other: String,
    /// How: "dependency", "parent", "batch", "dead-letter queue".
    pub how: &'static str,
}

/// Each table the rows of a queue live in, in the order they are copied and deleted: a
/// batch before its members (its triggers then find no batch to count against), a job's
/// finished copy before the job.
const TABLES: [(&str, Sql, Sql); 9] = [
    ("tenax_batches", COPY_OUT_BATCHES, COPY_IN_BATCHES),
    ("tenax_claims", COPY_OUT_CLAIMS, COPY_IN_CLAIMS),
    ("tenax_edges", COPY_OUT_EDGES, COPY_IN_EDGES),
    ("tenax_finished", COPY_OUT_FINISHED, COPY_IN_FINISHED),
    ("tenax_jobs", COPY_OUT_JOBS, COPY_IN_JOBS),
    (
        "tenax_subscriptions",
        COPY_OUT_SUBSCRIPTIONS,
        COPY_IN_SUBSCRIPTIONS,
    ),
    ("tenax_queues", COPY_OUT_QUEUES, COPY_IN_QUEUES),
    ("tenax_queue_starts", COPY_OUT_STARTS, COPY_IN_STARTS),
    ("tenax_schedules", COPY_OUT_SCHEDULES, COPY_IN_SCHEDULES),
];

/// How long a fence waits for the transactions that began before it.
const OLDER_TRANSACTIONS_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl PostgresStore {
    /// Step 1 of a move out of this database: `queues` take no new row here from now on (they
    /// went to pool `target`), and once this returns, none that began before does either.
    pub async fn fence_moved(&self, queues: &[String], target: u8) -> Result<(), StoreError> {
        let what = "fencing the queues that move";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        for refusal in [
            &REFUSE_JOBS,
            &REFUSE_QUEUES,
            &REFUSE_SUBSCRIPTIONS,
            &REFUSE_SCHEDULES,
        ] {
            execute(&tx, refusal, &[]).await.map_err(fault(what))?;
        }
        execute(&tx, &FENCE, &[&queues, &i16::from(target)])
            .await
            .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        // A transaction that began before the fence may have passed the triggers already: its
        // row is written before the copy locks the queues' rows, or never.
        let rows = query(&client, &OLDER_TRANSACTIONS, &[])
            .await
            .map_err(fault(what))?;
        let older: Vec<String> = rows.first().map(|row| row.get(0)).unwrap_or_default();
        let began = std::time::Instant::now();
        loop {
            let rows = query(&client, &STILL_RUNNING, &[&older])
                .await
                .map_err(fault(what))?;
            if rows.first().is_none_or(|row| row.get::<_, i64>(0) == 0) {
                return Ok(());
            }
            if began.elapsed() > OLDER_TRANSACTIONS_WAIT {
                return Err(StoreError::unavailable(
                    what,
                    std::io::Error::other(
                        "transactions that began before the fence are still running after a \
                         minute: run the move again",
                    ),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// What ties `queues` to queues that do not move with them, in this database.
    pub async fn move_links(&self, queues: &[String]) -> Result<Vec<Link>, StoreError> {
        let client = self.client().await?;
        let mut links = Vec::new();
        for (statement, how) in [
            (&LINKED_BY_EDGES, "dependency"),
            (&LINKED_BY_PARENTS, "parent"),
            (&LINKED_BY_BATCHES, "batch"),
            (&LINKED_BY_DEAD_LETTERS, "dead-letter queue"),
        ] {
            let rows = query(&client, statement, &[&queues])
                .await
                .map_err(fault("looking for what ties the queues to others"))?;
            links.extend(rows.iter().map(|row| Link {
                queue: row.get(0),
                other: row.get(1),
                how,
            }));
        }
        Ok(links)
    }

    /// The pool `id` of `sequence` went to when it moved out of this database, if it did.
    pub async fn forwarded(&self, sequence: Sequence, id: u64) -> Result<Option<u8>, StoreError> {
        let client = self.client().await?;
        let id = i64::try_from(id).unwrap_or(i64::MAX);
        let rows = query(&client, &FORWARD, &[&(sequence as i16), &id])
            .await
            .map_err(fault("looking where an id moved to"))?;
        Ok(rows
            .first()
            .map(|row| u8::try_from(row.get::<_, i16>(0)).unwrap_or(0)))
    }
}

/// Step 2 of a move: copies the rows of the queues fenced on `source` into `target` (pool
/// number `target_number`), then leaves forwards to them on `source`. `queues` are the fenced
/// ones (what the target drops first and takes). Copies nothing if a run before did.
pub async fn copy_moved(
    source: &PostgresStore,
    target: &PostgresStore,
    queues: &[String],
    target_number: u8,
) -> Result<Copied, StoreError> {
    let what = "moving the queues' rows";
    let mut from = source.client().await?;
    let from = from.transaction().await.map_err(fault(what))?;
    // Locked until this transaction ends: two runs of one move (asked again while the first
    // still ran) copy one after the other, and the second finds the rows copied.
    let fenced = query(&from, &LOCK_FENCED, &[&queues])
        .await
        .map_err(fault(what))?;
    if !fenced.is_empty() && fenced.iter().all(|row| row.get::<_, bool>(0)) {
        // Copied and forwarded by a run before, which stopped short of the catalogue: the
        // target holds the rows now, and the forwards bound what moved.
        let bounds = query(&from, &FORWARDED_BOUNDS, &[&i16::from(target_number)])
            .await
            .map_err(fault(what))?;
        return Ok(Copied {
            below: bounds.first().map_or_else(MovedBelow::default, below_of),
            ..Copied::default()
        });
    }
    for lock in [
        &LOCK_JOBS,
        &LOCK_FINISHED,
        &LOCK_BATCHES,
        &LOCK_CLAIMS,
        &LOCK_SUBSCRIPTIONS,
        &LOCK_QUEUES,
        &LOCK_SCHEDULES,
    ] {
        execute(&from, lock, &[]).await.map_err(fault(what))?;
    }
    let mut to = target.client().await?;
    let to = to.transaction().await.map_err(fault(what))?;
    for (table, _, _) in TABLES {
        if columns(&from, table).await? != columns(&to, table).await? {
            return Err(StoreError::Refused(format!(
                "{table} has other columns in the two pools' databases: run the same version \
                 of Tenax on both (`tenax migrate`)"
            )));
        }
    }
    // What a move that failed half-way left of them, and their fence if they once left.
    for statement in [&DROP_STRAYS, &UNFENCE] {
        execute(&to, statement, &[&queues])
            .await
            .map_err(fault(what))?;
    }
    let mut copied = Copied::default();
    for (table, out, into) in TABLES {
        let rows = from.copy_out(out.text()).await.map_err(fault(what))?;
        let sink = to.copy_in(into.text()).await.map_err(fault(what))?;
        futures_util::pin_mut!(rows, sink);
        while let Some(chunk) = rows.next().await {
            sink.send(chunk.map_err(fault(what))?)
                .await
                .map_err(fault(what))?;
        }
        let count = sink.finish().await.map_err(fault(what))?;
        match table {
            "tenax_jobs" | "tenax_finished" => copied.jobs += count,
            "tenax_subscriptions" => copied.subscriptions += count,
            _ => {}
        }
    }
    // Ids of the target's that went out and now come back are its own again.
    execute(&to, &ARRIVED, &[&queues])
        .await
        .map_err(fault(what))?;
    execute(&to, &super::facts::ADVANCE, &[])
        .await
        .map_err(fault(what))?;
    let bounds = query(&from, &BOUNDS, &[]).await.map_err(fault(what))?;
    copied.below = bounds.first().map_or_else(MovedBelow::default, below_of);
    to.commit().await.map_err(fault(what))?;
    target.announce(Wakeup::Ready);
    execute(&from, &FORWARD_ALL, &[&i16::from(target_number)])
        .await
        .map_err(fault(what))?;
    for statement in [
        &DELETE_BATCHES,
        &DELETE_CLAIMS,
        &DELETE_EDGES,
        &DELETE_FINISHED,
        &DELETE_JOBS,
        &DELETE_SUBSCRIPTIONS,
        &DELETE_QUEUES,
        &DELETE_STARTS,
        &DELETE_SCHEDULES,
    ] {
        execute(&from, statement, &[]).await.map_err(fault(what))?;
    }
    for statement in [&MARK_COPIED, &super::facts::ADVANCE] {
        execute(&from, statement, &[]).await.map_err(fault(what))?;
    }
    from.commit().await.map_err(fault(what))?;
    Ok(copied)
}

fn below_of(row: &tokio_postgres::Row) -> MovedBelow {
    MovedBelow {
        jobs: row.get(0),
        subscriptions: row.get(1),
        batches: row.get(2),
    }
}

/// A table's columns with their types, in order: the copy is binary, column by column.
async fn columns<C: deadpool_postgres::GenericClient>(
    client: &C,
    table: &str,
) -> Result<String, StoreError> {
    let rows = query(client, &COLUMNS, &[&table])
        .await
        .map_err(fault("reading a table's columns"))?;
    Ok(rows.first().map(|row| row.get(0)).unwrap_or_default())
}

/// The fenced queues' rows of a table: `moving!("tenax_jobs", "queue")`. COPY takes no
/// parameters; the fenced queues are the ones the source lists in `tenax_moved` (one move at a
/// time runs, and the rows of the queues of the moves before are gone).
macro_rules! moving {
    ($column:literal) => {
        concat!($column, " IN (SELECT queue FROM tenax_moved)")
    };
}

/// A job id of the fenced queues: `id_moving!("parent")`.
macro_rules! id_moving {
    ($column:literal) => {
        concat!(
            $column,
            " IN (SELECT id FROM tenax_all_jobs WHERE queue IN (SELECT queue FROM tenax_moved))"
        )
    };
}

/// A batch all of whose queues are fenced (a batch of some only is refused before).
macro_rules! batch_moving {
    () => {
        "queues <@ ARRAY(SELECT queue FROM tenax_moved) AND cardinality(queues) > 0"
    };
}

statements! {
    /// The triggers that refuse a moved queue's rows, made by the first move out of a database
    /// (every insert pays for them: a database no queue ever left has none).
    REFUSE_JOBS = "CREATE OR REPLACE TRIGGER tenax_refuse_moved BEFORE INSERT ON tenax_jobs
                   FOR EACH ROW EXECUTE FUNCTION tenax_refuse_moved_queue()";
    REFUSE_QUEUES = "CREATE OR REPLACE TRIGGER tenax_refuse_moved BEFORE INSERT ON tenax_queues
                   FOR EACH ROW EXECUTE FUNCTION tenax_refuse_moved_name()";
    REFUSE_SUBSCRIPTIONS = "CREATE OR REPLACE TRIGGER tenax_refuse_moved
                   BEFORE INSERT ON tenax_subscriptions
                   FOR EACH ROW EXECUTE FUNCTION tenax_refuse_moved_queue()";
    REFUSE_SCHEDULES = "CREATE OR REPLACE TRIGGER tenax_refuse_moved
                   BEFORE INSERT ON tenax_schedules
                   FOR EACH ROW EXECUTE FUNCTION tenax_refuse_moved_schedule()";
    FENCE = "INSERT INTO tenax_moved (queue, pool) SELECT unnest($1::text[]), $2
             ON CONFLICT (queue) DO UPDATE SET pool = excluded.pool";
    /// Every transaction running now (but this one), by virtual id: each holds its own.
    OLDER_TRANSACTIONS = "SELECT coalesce(array_agg(virtualxid), '{}') FROM pg_locks
             WHERE locktype = 'virtualxid' AND granted AND pid <> pg_backend_pid()";
    STILL_RUNNING = "SELECT count(*) FROM pg_locks
             WHERE locktype = 'virtualxid' AND granted AND virtualxid = ANY($1)";
    COLUMNS = "SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', '
                                 ORDER BY attnum)
             FROM pg_attribute
             WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped";
    LINKED_BY_EDGES = "SELECT DISTINCT CASE WHEN p.queue = ANY($1) THEN p.queue ELSE c.queue END,
                                       CASE WHEN p.queue = ANY($1) THEN c.queue ELSE p.queue END
             FROM tenax_edges e
             JOIN tenax_all_jobs p ON p.id = e.parent
             JOIN tenax_all_jobs c ON c.id = e.child
             WHERE (p.queue = ANY($1)) <> (c.queue = ANY($1))";
    LINKED_BY_PARENTS = "SELECT DISTINCT CASE WHEN p.queue = ANY($1) THEN p.queue ELSE c.queue END,
                                         CASE WHEN p.queue = ANY($1) THEN c.queue ELSE p.queue END
             FROM tenax_all_jobs c
             JOIN tenax_all_jobs p ON p.id = c.parent
             WHERE (p.queue = ANY($1)) <> (c.queue = ANY($1))";
    LINKED_BY_BATCHES = "SELECT DISTINCT q.queue, o.queue
             FROM tenax_batches b, unnest(b.queues) q(queue), unnest(b.queues) o(queue)
             WHERE b.queues && $1 AND q.queue = ANY($1) AND NOT o.queue = ANY($1)";
    LINKED_BY_DEAD_LETTERS = "SELECT name, config::json->'dead_letter'->>'queue'
             FROM tenax_queues
             WHERE name = ANY($1) AND NOT config::json->'dead_letter'->>'queue' = ANY($1)
             UNION
             SELECT config::json->'dead_letter'->>'queue', name
             FROM tenax_queues
             WHERE NOT name = ANY($1) AND config::json->'dead_letter'->>'queue' = ANY($1)";
    /// Whether each of `$1` was copied out by a run before; locked for the copy.
    LOCK_FENCED = "SELECT copied FROM tenax_moved WHERE queue = ANY($1) FOR UPDATE";
    MARK_COPIED = "UPDATE tenax_moved SET copied = true WHERE NOT copied";
    FORWARDED_BOUNDS = "SELECT coalesce(max(id) FILTER (WHERE sequence = 0), -1) + 1,
                               coalesce(max(id) FILTER (WHERE sequence = 1), -1) + 1,
                               coalesce(max(id) FILTER (WHERE sequence = 2), -1) + 1
             FROM tenax_forwards WHERE pool = $1";
    FORWARD = "SELECT pool FROM tenax_forwards WHERE sequence = $1 AND id = $2";
    LOCK_JOBS = concat!("SELECT 1 FROM tenax_jobs WHERE ", moving!("queue"), " FOR UPDATE");
    LOCK_FINISHED = concat!("SELECT 1 FROM tenax_finished WHERE ", moving!("queue"), " FOR UPDATE");
    LOCK_BATCHES = concat!("SELECT 1 FROM tenax_batches WHERE ", batch_moving!(), " FOR UPDATE");
    LOCK_CLAIMS = concat!("SELECT 1 FROM tenax_claims WHERE ", moving!("(record::json->>'queue')"),
                          " FOR UPDATE");
    LOCK_SUBSCRIPTIONS = concat!("SELECT 1 FROM tenax_subscriptions WHERE ", moving!("queue"),
                                 " FOR UPDATE");
    LOCK_QUEUES = concat!("SELECT 1 FROM tenax_queues WHERE ", moving!("name"), " FOR UPDATE");
    LOCK_SCHEDULES = concat!("SELECT 1 FROM tenax_schedules WHERE ",
                             moving!("(body::json->'job'->>'queue')"), " FOR UPDATE");
    COPY_OUT_BATCHES = concat!("COPY (SELECT * FROM tenax_batches WHERE ", batch_moving!(),
                               ") TO STDOUT (FORMAT binary)");
    COPY_IN_BATCHES = "COPY tenax_batches FROM STDIN (FORMAT binary)";
    COPY_OUT_CLAIMS = concat!("COPY (SELECT * FROM tenax_claims WHERE ",
                              moving!("(record::json->>'queue')"), ") TO STDOUT (FORMAT binary)");
    COPY_IN_CLAIMS = "COPY tenax_claims FROM STDIN (FORMAT binary)";
    COPY_OUT_EDGES = concat!("COPY (SELECT * FROM tenax_edges WHERE ", id_moving!("parent"),
                             " OR ", id_moving!("child"), ") TO STDOUT (FORMAT binary)");
    COPY_IN_EDGES = "COPY tenax_edges FROM STDIN (FORMAT binary)";
    COPY_OUT_FINISHED = concat!("COPY (SELECT * FROM tenax_finished WHERE ", moving!("queue"),
                                ") TO STDOUT (FORMAT binary)");
    COPY_IN_FINISHED = "COPY tenax_finished FROM STDIN (FORMAT binary)";
    COPY_OUT_JOBS = concat!("COPY (SELECT * FROM tenax_jobs WHERE ", moving!("queue"),
                            ") TO STDOUT (FORMAT binary)");
    COPY_IN_JOBS = "COPY tenax_jobs FROM STDIN (FORMAT binary)";
    COPY_OUT_SUBSCRIPTIONS = concat!("COPY (SELECT * FROM tenax_subscriptions WHERE ",
                                     moving!("queue"), ") TO STDOUT (FORMAT binary)");
    COPY_IN_SUBSCRIPTIONS = "COPY tenax_subscriptions FROM STDIN (FORMAT binary)";
    COPY_OUT_QUEUES = concat!("COPY (SELECT * FROM tenax_queues WHERE ", moving!("name"),
                              ") TO STDOUT (FORMAT binary)");
    COPY_IN_QUEUES = "COPY tenax_queues FROM STDIN (FORMAT binary)";
    COPY_OUT_STARTS = concat!("COPY (SELECT * FROM tenax_queue_starts WHERE ", moving!("queue"),
                              ") TO STDOUT (FORMAT binary)");
    COPY_IN_STARTS = "COPY tenax_queue_starts FROM STDIN (FORMAT binary)";
    COPY_OUT_SCHEDULES = concat!("COPY (SELECT * FROM tenax_schedules WHERE ",
                                 moving!("(body::json->'job'->>'queue')"),
                                 ") TO STDOUT (FORMAT binary)");
    COPY_IN_SCHEDULES = "COPY tenax_schedules FROM STDIN (FORMAT binary)";
    /// On the target, before the copy: what a move that failed half-way left of `$1`.
    DROP_STRAYS = "WITH jobs AS (
                 DELETE FROM tenax_jobs WHERE queue = ANY($1) RETURNING id
             ), finished AS (
                 DELETE FROM tenax_finished WHERE queue = ANY($1) RETURNING id
             ), edges AS (
                 DELETE FROM tenax_edges WHERE parent IN (SELECT id FROM jobs UNION ALL
                                                           SELECT id FROM finished)
                     OR child IN (SELECT id FROM jobs UNION ALL SELECT id FROM finished)
             ), claims AS (
                 DELETE FROM tenax_claims WHERE (record::json->>'queue') = ANY($1)
             ), batches AS (
                 DELETE FROM tenax_batches WHERE queues <@ $1 AND cardinality(queues) > 0
             ), subscriptions AS (
                 DELETE FROM tenax_subscriptions WHERE queue = ANY($1)
             ), starts AS (
                 DELETE FROM tenax_queue_starts WHERE queue = ANY($1)
             ), schedules AS (
                 DELETE FROM tenax_schedules WHERE (body::json->'job'->>'queue') = ANY($1)
             )
             DELETE FROM tenax_queues WHERE name = ANY($1)";
    /// On the target, before the copy: queues that once left it may come back.
    UNFENCE = "DELETE FROM tenax_moved WHERE queue = ANY($1)";
    /// On the target, after the copy: ids that once left it are its own again.
    ARRIVED = "DELETE FROM tenax_forwards f
             WHERE (f.sequence = 0 AND f.id IN (SELECT id FROM tenax_all_jobs
                                                WHERE queue = ANY($1)))
                OR (f.sequence = 1 AND f.id IN (SELECT id FROM tenax_subscriptions
                                                WHERE queue = ANY($1)))
                OR (f.sequence = 2 AND f.id IN (SELECT id FROM tenax_batches
                                                WHERE queues <@ $1 AND cardinality(queues) > 0))";
    BOUNDS = concat!(
        "SELECT coalesce((SELECT max(id) + 1 FROM tenax_all_jobs WHERE ", moving!("queue"), "), 0),
                coalesce((SELECT max(id) + 1 FROM tenax_subscriptions WHERE ", moving!("queue"),
                "), 0),
                coalesce((SELECT max(id) + 1 FROM tenax_batches WHERE ", batch_moving!(), "), 0)"
    );
    /// On the source: where each moved id went.
    FORWARD_ALL = concat!(
        "INSERT INTO tenax_forwards (sequence, id, pool)
             SELECT 0, id, $1::smallint FROM tenax_all_jobs WHERE ", moving!("queue"), "
             UNION ALL
             SELECT 1, id, $1::smallint FROM tenax_subscriptions WHERE ", moving!("queue"), "
             UNION ALL
             SELECT 2, id, $1::smallint FROM tenax_batches WHERE ", batch_moving!(), "
         ON CONFLICT (sequence, id) DO UPDATE SET pool = excluded.pool"
    );
    DELETE_BATCHES = concat!("DELETE FROM tenax_batches WHERE ", batch_moving!());
    DELETE_CLAIMS = concat!("DELETE FROM tenax_claims WHERE ", moving!("(record::json->>'queue')"));
    DELETE_EDGES = concat!("DELETE FROM tenax_edges WHERE ", id_moving!("parent"), " OR ",
                           id_moving!("child"));
    DELETE_FINISHED = concat!("DELETE FROM tenax_finished WHERE ", moving!("queue"));
    DELETE_JOBS = concat!("DELETE FROM tenax_jobs WHERE ", moving!("queue"));
    DELETE_SUBSCRIPTIONS = concat!("DELETE FROM tenax_subscriptions WHERE ", moving!("queue"));
    DELETE_QUEUES = concat!("DELETE FROM tenax_queues WHERE ", moving!("name"));
    DELETE_STARTS = concat!("DELETE FROM tenax_queue_starts WHERE ", moving!("queue"));
    DELETE_SCHEDULES = concat!("DELETE FROM tenax_schedules WHERE ",
                               moving!("(body::json->'job'->>'queue')"));
    // The catalogue's record of moves.
    UNFINISHED = "SELECT id, queues, fenced, source, target FROM tenax_moves
             WHERE finished_at IS NULL";
    /// Nothing when another move is not finished (`tenax_moves_one`).
    BEGIN = "INSERT INTO tenax_moves (queues, fenced, source, target) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING
             RETURNING id";
    PLACE_MOVED = "INSERT INTO tenax_placements (queue, pool) SELECT unnest($1::text[]), $2
             ON CONFLICT (queue) DO UPDATE SET pool = excluded.pool";
    FINISH = "UPDATE tenax_moves SET finished_at = now(), jobs_below = $2,
                 subscriptions_below = $3, batches_below = $4
             WHERE id = $1";
    MOVED_FROM = "SELECT source, bool_or(finished_at IS NULL),
                 coalesce(max(jobs_below), 0), coalesce(max(subscriptions_below), 0),
                 coalesce(max(batches_below), 0)
             FROM tenax_moves GROUP BY source";
    ALL_LOADED = concat!(
        "SELECT NOT EXISTS (
             SELECT 1 FROM tenax_servers
             WHERE seen_at > now() - interval '", super::servers::alive!(), "'
               AND coalesce(pools_seen, -1) < $1)"
    );
}

/// A move as the catalogue records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveRecord {
    pub id: i64,
    /// The queues placed, not their deliveries' (which follow their subscriptions' ids).
    pub queues: Vec<String>,
    /// Those and their deliveries' queues: what the source fences.
    pub fenced: Vec<String>,
    pub source: u8,
    pub target: u8,
}

/// Where ids of a pool may have moved to: below these, or anywhere while a move out of it is
/// not finished (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MovedFrom {
    pub source: u8,
    pub below: Option<MovedBelow>,
}

impl PostgresStore {
    /// The catalogue's move that is not finished, if one is.
    pub async fn unfinished_move(&self) -> Result<Option<MoveRecord>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &UNFINISHED, &[])
            .await
            .map_err(fault("reading the unfinished move"))?;
        Ok(rows.first().map(|row| MoveRecord {
            id: row.get(0),
            queues: row.get(1),
            fenced: row.get(2),
            source: u8::try_from(row.get::<_, i16>(3)).unwrap_or(0),
            target: u8::try_from(row.get::<_, i16>(4)).unwrap_or(0),
        }))
    }

    /// Records in the catalogue that `record`'s queues begin to move (its id is given here):
    /// from the next load on, servers look up every id of its source in the source's
    /// forwards. `None` if another move is not finished (one runs at a time).
    pub async fn begin_move(
        &self,
        mut record: MoveRecord,
    ) -> Result<Option<MoveRecord>, StoreError> {
        let what = "recording a move";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let rows = query(
            &tx,
            &BEGIN,
            &[
                &record.queues,
                &record.fenced,
                &i16::from(record.source),
                &i16::from(record.target),
            ],
        )
        .await
        .map_err(fault(what))?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        record.id = row.get(0);
        self.commit_change(tx, what).await?;
        Ok(Some(record))
    }

    /// Records that `record` is done: its queues are placed on its target, and the ids below
    /// `below` of its source are looked up in the source's forwards.
    pub async fn finish_move(
        &self,
        record: &MoveRecord,
        below: MovedBelow,
    ) -> Result<(), StoreError> {
        let what = "recording a finished move";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        execute(
            &tx,
            &PLACE_MOVED,
            &[&record.queues, &i16::from(record.target)],
        )
        .await
        .map_err(fault(what))?;
        execute(
            &tx,
            &FINISH,
            &[
                &record.id,
                &below.jobs,
                &below.subscriptions,
                &below.batches,
            ],
        )
        .await
        .map_err(fault(what))?;
        self.commit_change(tx, what).await
    }

    /// For each pool queues ever moved out of, below which ids they may have gone.
    pub async fn moved_from(&self) -> Result<Vec<MovedFrom>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &MOVED_FROM, &[])
            .await
            .map_err(fault("reading the moves"))?;
        Ok(rows
            .iter()
            .map(|row| MovedFrom {
                source: u8::try_from(row.get::<_, i16>(0)).unwrap_or(0),
                below: (!row.get::<_, bool>(1)).then(|| MovedBelow {
                    jobs: row.get(2),
                    subscriptions: row.get(3),
                    batches: row.get(4),
                }),
            })
            .collect())
    }

    /// Whether every live server has loaded the pools at catalogue version `version` or later.
    pub async fn all_loaded(&self, version: i64) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &ALL_LOADED, &[&version])
            .await
            .map_err(fault("reading which pools the servers loaded"))?;
        Ok(rows.first().is_some_and(|row| row.get(0)))
    }
}
