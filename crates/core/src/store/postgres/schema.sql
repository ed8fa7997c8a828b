-- Snodo task store, schema version 1. Applied by `snodo migrate` (or at start) inside the
-- configured schema; every statement is idempotent within a migration's transaction.

CREATE TABLE meta (
    key   text PRIMARY KEY,
    value bytea NOT NULL
);

-- One row per task. What SQL must find or change without decoding lives in columns; the
-- rest of the task is `body` (versioned JSON, claim taken out) and `work` (written once).
CREATE TABLE tasks (
    id               bytea PRIMARY KEY,
    scope            text NOT NULL,
    status           text NOT NULL,
    live             boolean NOT NULL,
    due_at           bigint,
    expires_at       bigint,
    claim_generation bigint,
    claim_token      bigint,
    claim_epoch      bigint,
    claim_expires_at bigint,
    claim_owner      text,
    body             bytea NOT NULL,
    work             bytea NOT NULL
);

-- The claim queue: what is due, oldest first (`FOR UPDATE SKIP LOCKED` walks it).
CREATE INDEX tasks_due ON tasks (due_at, id) WHERE due_at IS NOT NULL;
-- The reap queue.
CREATE INDEX tasks_expiry ON tasks (expires_at, id) WHERE expires_at IS NOT NULL;
-- A restarting node finds the claims its previous life held.
CREATE INDEX tasks_claim_owner ON tasks (claim_owner) WHERE claim_owner IS NOT NULL;

-- Live (non-terminal) tasks per scope, spread over shards so creations and finishes of one
-- tenant do not queue on one row; the count is the sum of a scope's shards.
CREATE TABLE live (
    scope text NOT NULL,
    shard smallint NOT NULL,
    n     bigint NOT NULL,
    PRIMARY KEY (scope, shard)
);
