-- Tenax schema: batches with callbacks (docs/workflows.md#batches).
--
-- A batch counts its members in the transaction that finishes each one, whatever finishes it,
-- and enqueues its callbacks in the transaction that finishes it: the one place that counts is
-- tenax_batch_member_finished() below, a trigger on the deletion of a member from
-- tenax_jobs (every way out of it: completion, death, deletion, expiry, a queue's deletion).
-- The batch's row is locked by the UPDATE that counts, so two servers finishing its last two
-- members at once are serialised: one of them sees pending reach 0 and enqueues the callbacks.
-- Outcomes, as tenax_core::model::Outcome codes: 0 completed, 1 dead, 2 deleted, 3 cancelled.

CREATE TABLE tenax_batches (
    id              bigint PRIMARY KEY,
    description     text,
    on_complete     text,                 -- a JobTemplate as JSON, or NULL
    on_success      text,
    queues          text[]   NOT NULL,    -- the queues of its members and callbacks
    state           smallint NOT NULL,    -- 0 open, 1 closed, 2 finished
    total           bigint   NOT NULL DEFAULT 0,
    pending         bigint   NOT NULL DEFAULT 0,
    completed       bigint   NOT NULL DEFAULT 0,
    dead            bigint   NOT NULL DEFAULT 0,
    deleted         bigint   NOT NULL DEFAULT 0,
    cancelled       bigint   NOT NULL DEFAULT 0,
    created_at      bigint   NOT NULL,
    finished_at     bigint,
    on_complete_job bigint,
    on_success_job  bigint
);
CREATE SEQUENCE tenax_batch_ids;

-- The batch a job is a member of. A member that finishes keeps it in tenax_finished (the
-- trigger copies it there, since the moves name their columns).
ALTER TABLE tenax_jobs ADD COLUMN batch_id bigint;
ALTER TABLE tenax_finished ADD COLUMN batch_id bigint;

-- The view's `*` was expanded when it was made: made again, it has the new column.
CREATE OR REPLACE VIEW tenax_all_jobs AS
    SELECT * FROM tenax_jobs
    UNION ALL
    SELECT * FROM tenax_finished;

-- Enqueues one callback of a finishing batch: ready at once, its payload the batch's counts
-- and the template's payload. Returns its id.
CREATE FUNCTION tenax_batch_callback(b tenax_batches, template text, now_ms bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    t json := template::json;
    new_id bigint := nextval('tenax_job_ids');
BEGIN
    INSERT INTO tenax_jobs (id, queue, kind, payload, priority, created_at, policy, status,
                            run_at, payload_sealed)
    VALUES (
        new_id, t->>'queue', t->>'type',
        '{"batch":' || json_strip_nulls(json_build_object(
            'id', b.id, 'description', b.description, 'total', b.total,
            'completed', b.completed, 'dead', b.dead, 'deleted', b.deleted,
            'cancelled', b.cancelled,
            'succeeded', b.pending = 0 AND b.completed = b.total))::text
            || ',"payload":' || (t->'payload')::text || '}',
        coalesce((t->>'priority')::integer, 0), now_ms,
        CASE WHEN t->'policy' IS NULL OR json_typeof(t->'policy') = 'null' THEN NULL
             ELSE (t->'policy')::text END,
        1, now_ms, false);
    RETURN new_id;
END $$;

-- Finishes batch `batch` if it is due (closed, nothing pending): enqueues its callbacks and
-- marks it finished. Its row must be locked by the caller's transaction.
CREATE FUNCTION tenax_batch_settle(batch bigint, now_ms bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    b tenax_batches;
    complete_job bigint;
    success_job bigint;
BEGIN
    SELECT * INTO b FROM tenax_batches WHERE id = batch FOR UPDATE;
    IF NOT FOUND OR b.state <> 1 OR b.pending <> 0 THEN
        RETURN;
    END IF;
    IF b.on_complete IS NOT NULL THEN
        complete_job := tenax_batch_callback(b, b.on_complete, now_ms);
    END IF;
    IF b.on_success IS NOT NULL AND b.completed = b.total THEN
        success_job := tenax_batch_callback(b, b.on_success, now_ms);
    END IF;
    UPDATE tenax_batches SET state = 2, finished_at = now_ms,
        on_complete_job = complete_job, on_success_job = success_job
    WHERE id = batch;
    IF complete_job IS NOT NULL OR success_job IS NOT NULL THEN
        PERFORM pg_notify('tenax_ready', '');
    END IF;
END $$;

-- A member left tenax_jobs: completed, dead or cancelled (it is in tenax_finished now, by the
-- same statement), else deleted. Counted once, unless its batch has finished.
CREATE FUNCTION tenax_batch_member_finished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    finished_status smallint;
    outcome smallint;
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
BEGIN
    UPDATE tenax_finished SET batch_id = OLD.batch_id WHERE id = OLD.id
        RETURNING status INTO finished_status;
    outcome := CASE finished_status WHEN 3 THEN 0 WHEN 4 THEN 1 WHEN 5 THEN 3 ELSE 2 END;
    UPDATE tenax_batches SET
        pending = pending - 1,
        completed = completed + (outcome = 0)::integer,
        dead = dead + (outcome = 1)::integer,
        deleted = deleted + (outcome = 2)::integer,
        cancelled = cancelled + (outcome = 3)::integer
    WHERE id = OLD.batch_id AND state <> 2;
    IF FOUND THEN
        PERFORM tenax_batch_settle(OLD.batch_id, now_ms);
    END IF;
    RETURN NULL;
END $$;

-- A dead or cancelled member left tenax_finished: replayed (it is in tenax_jobs again, by the same
-- statement), it is pending again while its batch is unfinished; else (deleted, purged) it
-- was counted when it died.
CREATE FUNCTION tenax_batch_member_replayed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE tenax_jobs SET batch_id = OLD.batch_id WHERE id = OLD.id;
    IF FOUND THEN
        UPDATE tenax_batches SET pending = pending + 1,
            dead = dead - (OLD.status = 4)::integer,
            cancelled = cancelled - (OLD.status = 5)::integer
        WHERE id = OLD.batch_id AND state <> 2;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tenax_batch_member_finished AFTER DELETE ON tenax_jobs
    FOR EACH ROW WHEN (OLD.batch_id IS NOT NULL)
    EXECUTE FUNCTION tenax_batch_member_finished();
CREATE TRIGGER tenax_batch_member_replayed AFTER DELETE ON tenax_finished
    FOR EACH ROW WHEN (OLD.batch_id IS NOT NULL AND OLD.status IN (4, 5))
    EXECUTE FUNCTION tenax_batch_member_replayed();
