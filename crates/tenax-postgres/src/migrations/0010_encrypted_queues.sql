-- Tenax schema, version 10: encrypted queues (docs/security.md#encrypted-queues).
--
-- Whether a job's payload is sealed with the store's data key is the job's own: a column of
-- its row, never a mark in the payload (which a user's payload could imitate). Rows written
-- before are plain.
ALTER TABLE tenax_jobs ADD COLUMN payload_sealed boolean NOT NULL DEFAULT false;
ALTER TABLE tenax_finished ADD COLUMN payload_sealed boolean NOT NULL DEFAULT false;

-- The view's `*` was expanded when it was made: made again, it has the new column.
CREATE OR REPLACE VIEW tenax_all_jobs AS
    SELECT * FROM tenax_jobs
    UNION ALL
    SELECT * FROM tenax_finished;

-- The data key that seals payloads, itself sealed by the secrets key (its JSON box: the key id
-- and the sealed bytes, never the key in clear). One row at most: every server opens the same.
CREATE TABLE tenax_payload_key (
    single boolean PRIMARY KEY DEFAULT true CHECK (single),
    body   text    NOT NULL
);
