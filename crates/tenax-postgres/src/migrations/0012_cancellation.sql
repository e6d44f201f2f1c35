-- Tenax schema, version 12: cancellation (docs/workflows.md#cancellation).
--
-- Status 5 is cancelled: a job stopped by an operator, finished (in tenax_finished), kept and
-- purged as dead jobs are, replayable. A job in flight is not cancelled at once: its lease is
-- marked (cancel_requested), on its row, so every node sees the mark; its worker learns it on
-- its next heartbeat, and a failure or an expiry of the marked lease ends the job cancelled.
-- Every transition out of flight, and every take, clears the mark. tenax_finished has the
-- column too, so that the two tables keep the same columns (tenax_all_jobs).
ALTER TABLE tenax_jobs ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
ALTER TABLE tenax_finished ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;

-- Cancelled jobs by queue, so that the metrics count them as they count dead ones
-- (tenax_finished_dead) without reading every finished job kept for retention.
CREATE INDEX tenax_finished_cancelled ON tenax_finished (queue) WHERE status = 5;

-- The view's `*` was expanded when it was made: made again, it has the new column.
CREATE OR REPLACE VIEW tenax_all_jobs AS
    SELECT * FROM tenax_jobs
    UNION ALL
    SELECT * FROM tenax_finished;
