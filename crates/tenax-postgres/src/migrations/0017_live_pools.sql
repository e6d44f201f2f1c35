-- Tenax schema, version 17: pools registered and changed while servers run (docs/postgres.md,
-- "Pools"). As version 16, every database gets these; only the catalogue's hold rows.

-- The catalogue's version: advanced in the transaction of every change of the pools or the
-- flavors. Each server reads it every second and loads the pools again when it moved.
CREATE TABLE tenax_catalogue (
    version bigint NOT NULL
);
INSERT INTO tenax_catalogue (version) VALUES (0);

-- When a pool's database was named (registered, or its uri changed): the catalogue version of
-- that change, and the database's time. A pool takes new queues only once every server has
-- loaded that version (each says so in `tenax_servers.pools_seen`), or a few seconds after
-- (past the longest a server goes without reading the catalogue): until then, a server that
-- has not read it yet could not route that pool's ids.
ALTER TABLE tenax_pools
    ADD COLUMN named_version bigint      NOT NULL DEFAULT 0,
    ADD COLUMN named_at      timestamptz NOT NULL DEFAULT now();

-- The catalogue version this server's pools were last loaded at.
ALTER TABLE tenax_servers ADD COLUMN pools_seen bigint;
