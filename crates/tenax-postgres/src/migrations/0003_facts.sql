-- Tenax schema, version 3: one version of every queue's settings and subscribers together.
-- A change of them advances it in the same transaction. Servers cache what an enqueue needs of
-- a queue (its settings and subscribers), and store an enqueue's jobs only while the version
-- they read is still the current one: the check is part of the insert statement, so the cache
-- costs no round trip and can never make an enqueue miss a subscription made before it began.
CREATE TABLE tenax_facts (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint  NOT NULL
);
INSERT INTO tenax_facts (version) VALUES (1);
