-- Tenax schema, version 15: what a take costs PostgreSQL (docs/benchmarks.md, issue 31).
--
-- 1. The head of a queue's ready set, read by one function. A take's statement is prepared
-- once per connection and run with a generic plan, in which its limit (a parameter) is
-- unknown: PostgreSQL then assumes a tenth of the rows it expects. On a table not analysed
-- yet (a fresh database, or the first minute after a burst) it expected a handful of ready
-- jobs and chose a bitmap scan of the whole ready set and a sort, every take; once analysed,
-- it expected a tenth of the backlog taken and joined the picked ids to tenax_jobs by a hash
-- of the whole table. Either way each take cost as much as the backlog: 60 ms of PostgreSQL
-- per take of 1000 from a backlog of 200 000, instead of 10.
--
-- The function fixes both choices whatever the statistics: inside it sorting is disabled, so
-- the only plan left is the ordered range of tenax_jobs_ready (best first, one queue, stopping
-- after `n` rows it could lock); and its declared row estimate (ROWS 100) keeps the caller's
-- join to tenax_jobs a nested loop over the primary key. PL/pgSQL keeps the plan of its
-- query per session, as a prepared statement would, so a take of one job pays no planning.
-- `FOR UPDATE SKIP LOCKED` locks each row it returns until the caller's transaction ends, as
-- the subquery it replaces did.
CREATE FUNCTION tenax_ready_head(q text, n bigint, now_ms bigint)
RETURNS TABLE (id bigint, priority integer)
LANGUAGE plpgsql VOLATILE ROWS 100
SET enable_sort = off
AS $$
BEGIN
    RETURN QUERY
    SELECT j.id, j.priority FROM tenax_jobs j
    WHERE j.status = 1 AND j.queue = q AND (j.expires_at IS NULL OR j.expires_at > now_ms)
    ORDER BY j.priority DESC, j.id
    LIMIT n
    FOR UPDATE SKIP LOCKED;
END $$;

-- 2. Jobs in flight by claim: only Zaqar claims set claim_id, so only their jobs need an
-- entry. A plain take (claim_id NULL) wrote one for nothing, in the same update that writes
-- the row's other index entries (a take changes status: it cannot be a HOT update). Every
-- query by claim says `claim_id = $n`, which implies the new condition. The scans of every
-- job in flight (lease expiry, the next wake-up) use tenax_jobs_in_flight_queue, which has
-- them all. tenax_jobs holds only unfinished jobs: the build reads a small table.
DROP INDEX tenax_jobs_in_flight;
CREATE INDEX tenax_jobs_in_flight ON tenax_jobs (claim_id)
    WHERE status = 2 AND claim_id IS NOT NULL;
