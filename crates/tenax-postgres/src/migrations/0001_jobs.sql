-- Tenax schema, version 1. Applied by `tenax migrate` (and at start), inside a transaction,
-- under the migration lock. Times are milliseconds since the Unix epoch; statuses are
-- 0 scheduled, 1 ready, 2 in_flight, 3 completed, 4 dead.

-- Unfinished jobs only (scheduled, ready, in flight): the table every take and ack touches is
-- kept small. Completed and dead jobs move to tenax_finished in the commit that ends them.
-- fillfactor leaves room on each page so that heartbeats and retries are HOT updates (the
-- lease columns are in no index).
CREATE TABLE tenax_jobs (
    id               bigint PRIMARY KEY,
    queue            text     NOT NULL,
    kind             text     NOT NULL,
    payload          text     NOT NULL,   -- the JSON text exactly as it was sent
    priority         integer  NOT NULL,
    unique_key       text,
    created_at       bigint   NOT NULL,
    expires_at       bigint,
    origin           text,
    parent           bigint,
    traceparent      text,
    policy           text,                -- canonical native JSON of the job's own policy
    status           smallint NOT NULL,
    run_at           bigint   NOT NULL,
    failures         integer  NOT NULL DEFAULT 0,
    first_failure_at bigint,
    last_delay       bigint,
    finished_at      bigint,
    dead_reason      text,
    errors           text[]   NOT NULL DEFAULT '{}',  -- each the JSON of one failure
    attempts         text[]   NOT NULL DEFAULT '{}',  -- each the JSON of one delivery attempt
    lease_token      bigint,              -- set only while in flight
    lease_expires_at bigint,
    taken_at         bigint,
    claim_id         bigint
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The ready set, in the order takes want it: one index range per queue.
CREATE INDEX tenax_jobs_ready ON tenax_jobs (queue, priority DESC, id) WHERE status = 1;
-- The scheduled set, by due time: promotion and the maintenance loop's next wake-up.
CREATE INDEX tenax_jobs_scheduled ON tenax_jobs (run_at) WHERE status = 0;
-- Jobs in flight (few), by claim: lease expiry scans it; heartbeats change no column in it.
CREATE INDEX tenax_jobs_in_flight ON tenax_jobs (claim_id) WHERE status = 2;
-- Jobs with an expiry (Zaqar messages).
CREATE INDEX tenax_jobs_expiring ON tenax_jobs (expires_at) WHERE expires_at IS NOT NULL;
-- One unfinished job per (queue, unique key): every row here is unfinished.
CREATE UNIQUE INDEX tenax_jobs_unique ON tenax_jobs (queue, unique_key) WHERE unique_key IS NOT NULL;
-- Listings and counts of one queue.
CREATE INDEX tenax_jobs_queue ON tenax_jobs (queue, id);

-- Completed and dead jobs, until retention removes them in short batches by finished_at.
CREATE TABLE tenax_finished (LIKE tenax_jobs INCLUDING DEFAULTS) WITH (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
ALTER TABLE tenax_finished ADD PRIMARY KEY (id);
CREATE INDEX tenax_finished_at ON tenax_finished (finished_at);
CREATE INDEX tenax_finished_expiring ON tenax_finished (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX tenax_finished_queue ON tenax_finished (queue, id);

-- Every job, for reads: both tables have the same columns.
CREATE VIEW tenax_all_jobs AS
    SELECT * FROM tenax_jobs
    UNION ALL
    SELECT * FROM tenax_finished;

-- Job ids: increasing, never reused (a sequence, not a counter row every enqueue updates).
CREATE SEQUENCE tenax_job_ids;

CREATE TABLE tenax_queues (
    name   text PRIMARY KEY,
    paused boolean NOT NULL,
    config text    NOT NULL
);

CREATE TABLE tenax_subscriptions (
    id           bigint PRIMARY KEY,
    queue        text    NOT NULL,
    enabled      boolean NOT NULL,
    endpoint_key text,               -- set when the endpoint must be unique in the queue
    body         text    NOT NULL
);
CREATE SEQUENCE tenax_subscription_ids;
CREATE UNIQUE INDEX tenax_subscriptions_endpoint ON tenax_subscriptions (queue, endpoint_key)
    WHERE endpoint_key IS NOT NULL;
CREATE INDEX tenax_subscriptions_queue ON tenax_subscriptions (queue, id);

-- Records of claims that have one (Zaqar claims): kept until their lease and grace are over.
CREATE TABLE tenax_claims (
    id      bigint PRIMARY KEY,
    record  text   NOT NULL,
    over_at bigint NOT NULL
);

CREATE TABLE tenax_tokens (
    id   bigint PRIMARY KEY,
    body text NOT NULL
);
CREATE SEQUENCE tenax_token_ids;
