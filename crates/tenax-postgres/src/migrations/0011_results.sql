-- Tenax schema, version 11: job results (docs/workflows.md#results).
--
-- What a worker answered when it completed a job, as JSON text, kept with the completed job
-- for its retention; sealed (as the payload, with other associated data) when the job's
-- payload is. Only a completion sets it: unfinished and dead jobs have none.
ALTER TABLE tenax_jobs ADD COLUMN result text;
ALTER TABLE tenax_finished ADD COLUMN result text;

-- The view's `*` was expanded when it was made: made again, it has the new column.
CREATE OR REPLACE VIEW tenax_all_jobs AS
    SELECT * FROM tenax_jobs
    UNION ALL
    SELECT * FROM tenax_finished;
