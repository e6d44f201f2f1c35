-- Tenax schema, version 6: per-queue limits and schedules.

-- A queue with a concurrency or rate limit: takes of it count under a lock of its row
-- (store/postgres/limits.rs); takes of other queues pass by with one look at this column.
ALTER TABLE tenax_queues ADD COLUMN limited boolean NOT NULL DEFAULT false;

-- A limited queue's jobs in flight, counted by each take of it. Partial: only jobs in flight
-- (few: at most the workers' concurrency) are in it.
CREATE INDEX tenax_jobs_in_flight_queue ON tenax_jobs (queue) WHERE status = 2;

-- Recent starts of rate-limited queues, in buckets (the rate limit's period / 60 wide). Only
-- takes of the queue write its rows, under the lock of its queue row, so completions never
-- touch them: no counter row that every acknowledgement would update.
CREATE TABLE tenax_queue_starts (
    queue  text   NOT NULL,
    bucket bigint NOT NULL,   -- the bucket's start
    width  bigint NOT NULL,
    count  bigint NOT NULL,
    PRIMARY KEY (queue, bucket)
);

-- Schedules: the whole schedule as JSON, and the columns the maintenance loop looks by. Each
-- tick's record is guarded by `revision`, in the transaction that enqueues its job.
CREATE TABLE tenax_schedules (
    name      text    PRIMARY KEY,
    paused    boolean NOT NULL,
    next_tick bigint,
    revision  bigint  NOT NULL,
    body      text    NOT NULL
);
CREATE INDEX tenax_schedules_due ON tenax_schedules (next_tick) WHERE NOT paused;
