-- Tenax schema, version 18: queues moved between pools (`tenax queues move`; docs/postgres.md,
-- "Moving queues"). Every database gets these tables; `tenax_moves` holds rows only in the
-- catalogue, `tenax_moved` and `tenax_forwards` only in a database queues were moved out of.

-- Queues moved out of this database, and the pool each went to. Nothing of such a queue is
-- stored here again: the first move out of a database adds triggers (`tenax_refuse_moved_*`)
-- that refuse it, so that a server still routing the queue here by an old placement fails
-- (and tries again, by the catalogue) instead of writing where no one reads. A queue moved
-- back in leaves this table.
CREATE TABLE tenax_moved (
    queue  text     PRIMARY KEY,
    pool   smallint NOT NULL,
    -- Whether its rows were copied out (and forwarded): a move run again does not copy twice.
    copied boolean  NOT NULL DEFAULT false
);

-- The ids that left this database with their queues (jobs keep their ids when they move, and
-- an id names its first pool in its residue): a call naming one is sent where it went.
CREATE TABLE tenax_forwards (
    sequence smallint NOT NULL,   -- 0 jobs, 1 subscriptions, 2 batches
    id       bigint   NOT NULL,
    pool     smallint NOT NULL,
    PRIMARY KEY (sequence, id)
);

-- The refusal of a moved queue's row (SQLSTATE TXMOV, which the store answers as
-- unavailable: the caller tries again and is routed by the catalogue).
CREATE FUNCTION tenax_refuse_moved(q text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    gone_to smallint;
BEGIN
    SELECT pool INTO gone_to FROM tenax_moved WHERE queue = q;
    IF FOUND THEN
        RAISE EXCEPTION 'queue % moved to pool %', q, gone_to USING ERRCODE = 'TXMOV';
    END IF;
END $$;

CREATE FUNCTION tenax_refuse_moved_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenax_refuse_moved(NEW.queue);
    RETURN NEW;
END $$;

CREATE FUNCTION tenax_refuse_moved_name() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenax_refuse_moved(NEW.name);
    RETURN NEW;
END $$;

-- A schedule lives on the pool of the queue its ticks enqueue into.
CREATE FUNCTION tenax_refuse_moved_schedule() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenax_refuse_moved(NEW.body::json->'job'->>'queue');
    RETURN NEW;
END $$;

-- The moves, in the catalogue. A move is resumed (by running it again) until it is finished;
-- while it is not, its queues take no writes. Ids below a finished move's bounds, and every id
-- of its source while it is not finished, are looked up in the source's `tenax_forwards`.
CREATE TABLE tenax_moves (
    id                  bigserial   PRIMARY KEY,
    queues              text[]      NOT NULL,   -- placed on the target when it is done
    fenced              text[]      NOT NULL,   -- those and their deliveries' queues
    source              smallint    NOT NULL,
    target              smallint    NOT NULL,
    jobs_below          bigint,
    subscriptions_below bigint,
    batches_below       bigint,
    started_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz
);
CREATE UNIQUE INDEX tenax_moves_one ON tenax_moves ((true)) WHERE finished_at IS NULL;
