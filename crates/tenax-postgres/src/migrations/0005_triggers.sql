-- Tenax schema, version 5: what starts a job's next run when it is not its schedule
-- (NULL: its schedule; 1: a replay; 2: an operator's run-now), and indexes for the dashboard.
ALTER TABLE tenax_jobs ADD COLUMN trigger smallint;
ALTER TABLE tenax_finished ADD COLUMN trigger smallint;
-- The view lists both tables' columns; it must be made again to show the new one.
CREATE OR REPLACE VIEW tenax_all_jobs AS
    SELECT * FROM tenax_jobs
    UNION ALL
    SELECT * FROM tenax_finished;
-- Pages of dead (or completed) jobs across queues, newest first, without reading the others.
CREATE INDEX tenax_finished_status ON tenax_finished (status, id);
