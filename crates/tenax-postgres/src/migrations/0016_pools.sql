-- Tenax schema, version 16: the catalogue of a pooled deployment (docs/postgres.md, "Pools").
-- Every database gets these tables; only the catalogue's (`--database-url`) holds rows.
--
-- A pool is a database of its own that holds the jobs, messages, leases, claims, deliveries,
-- subscriptions and queue settings of the queues placed on it. Its number (1 to 63) is the
-- residue of every id its sequences hand out (job, subscription and batch ids), so that a call
-- that names an id finds its pool without a lookup; the catalogue's own database is pool 0.
CREATE TABLE tenax_pools (
    name    text     PRIMARY KEY,
    number  smallint NOT NULL UNIQUE CHECK (number BETWEEN 1 AND 63),
    uri     text     NOT NULL,   -- sealed: it may hold a password
    weight  integer  NOT NULL CHECK (weight >= 0),
    flavor  text,
    options text     NOT NULL    -- a JSON object, kept as it was given
);

-- Flavors: a named group of pools a queue may ask for (`_flavor`), with its capabilities.
CREATE TABLE tenax_flavors (
    name text PRIMARY KEY,
    body text NOT NULL           -- the flavor as JSON: pool_list, capabilities
);

-- Which pool holds each queue: set once, when the queue is first used, and changed only by
-- `tenax queues move`. A queue without a row is on pool 0 (the catalogue) until placed.
CREATE TABLE tenax_placements (
    queue text     PRIMARY KEY,
    pool  smallint NOT NULL
);

-- Where each id sequence of this database began to hand out ids by pool. In the catalogue,
-- every id below is its own (handed out before there were pools), whatever its remainder; a
-- pool's sequences begin past the catalogue's, so that no id of theirs is below it.
CREATE TABLE tenax_stripes (
    sequence text   PRIMARY KEY,
    since    bigint NOT NULL
);
