-- Tenax schema, version 9: the cluster's figures, the same on every server (docs/postgres.md).
--
-- What each server says of itself, written with its row every second as JSON: the version it
-- runs, when it started, where it listens, whether it leads the maintenance, and the workers it
-- has seen lately (at most 1000). NULL for a server of an earlier version.
ALTER TABLE tenax_servers ADD COLUMN about text;

-- The activity per minute: jobs enqueued, completed, failed and dead, webhook attempts
-- delivered and failed. Each server adds what it counted every few seconds (an upsert that
-- adds), so a minute's row holds the sums of every server's; `minute` is the minute's start
-- (ms since 1970, by the database's clock as the servers estimate it). The leading server
-- deletes the rows over a day old: at most 1 441 rows.
CREATE TABLE tenax_activity (
    minute          bigint PRIMARY KEY,
    enqueued        bigint NOT NULL,
    completed       bigint NOT NULL,
    failed          bigint NOT NULL,
    dead            bigint NOT NULL,
    delivered       bigint NOT NULL,
    delivery_failed bigint NOT NULL
);
