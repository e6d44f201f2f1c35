-- Tenax schema, version 2: the servers using the database, so that limits users set for the
-- whole cluster (a subscription's concurrency and throttle, an endpoint's concurrency) can be
-- shared among them. Each server writes its row every second; a row not written for five
-- seconds is a server gone. Times are the database's own clock, so servers' clocks may differ.
CREATE TABLE tenax_servers (
    id      bigint PRIMARY KEY,
    seen_at timestamptz NOT NULL
);
