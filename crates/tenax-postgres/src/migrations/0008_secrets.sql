-- Tenax schema, version 8: the key that seals the subscriptions' secrets (docs/security.md).
-- Only the key's id is kept, never the key: a server whose key file lacks it refuses to start,
-- rather than fail to read (or, worse, sign with) what the others sealed. One row at most.
CREATE TABLE tenax_secrets_key (
    single boolean PRIMARY KEY DEFAULT true CHECK (single),
    key_id text    NOT NULL
);
