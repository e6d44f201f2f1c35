-- Tenax schema, version 13: job dependencies (docs/postgres.md#dependencies). Number 12 is left
-- for another change (schema.rs: a database migrated past a free number applies it later).
--
-- A job's parents (the jobs it waits for, in the order given, duplicates removed) and what it
-- does when one of them will not complete (0: it is cancelled; 1: it runs anyway) are its own,
-- kept in both tables for its view. `pending` is set only while it waits (status 6): how many of
-- its parents have not ended yet. `has_children` is set on a parent in the transaction that
-- links a child to it (under the lock of the parent's row) and never cleared: the statements
-- that end a job return it, and only a job that has it makes them look at tenax_edges. A job
-- without children costs no statement more than before.
ALTER TABLE tenax_jobs ADD COLUMN after_ids bigint[];
ALTER TABLE tenax_jobs ADD COLUMN on_parent_dead smallint NOT NULL DEFAULT 0;
ALTER TABLE tenax_jobs ADD COLUMN pending integer;
ALTER TABLE tenax_jobs ADD COLUMN has_children boolean NOT NULL DEFAULT false;
ALTER TABLE tenax_finished ADD COLUMN after_ids bigint[];
ALTER TABLE tenax_finished ADD COLUMN on_parent_dead smallint NOT NULL DEFAULT 0;
ALTER TABLE tenax_finished ADD COLUMN pending integer;
ALTER TABLE tenax_finished ADD COLUMN has_children boolean NOT NULL DEFAULT false;

-- The view's `*` was expanded when it was made: made again, it has the new columns.
CREATE OR REPLACE VIEW tenax_all_jobs AS
    SELECT * FROM tenax_jobs
    UNION ALL
    SELECT * FROM tenax_finished;

-- Who waits (or waited) for whom: one row per (parent, child), written with the child. Kept
-- while the parent is stored (a completed parent keeps its edges for the workflow's view);
-- deleted with it. Every read is by parent (a parent's end, and the workflow's view): the
-- primary key is the only index. A child's parents are its `after_ids`; an edge whose child is
-- gone stays until its parent goes, and is never read as one (the reads join the child).
CREATE TABLE tenax_edges (
    parent bigint NOT NULL,
    child  bigint NOT NULL,
    PRIMARY KEY (parent, child)
);
