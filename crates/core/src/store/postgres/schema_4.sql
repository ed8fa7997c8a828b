-- Snodo task store, schema version 4: stored-task counts beside the live counts (a cap on
-- what a tenant keeps, terminal tasks included), and revocations (sessions ended with
-- DELETE, remembered by every node until they would have expired anyway).

-- No creation commits between the count below and this migration's commit: a node of an
-- earlier build that creates during the migration waits for it.
LOCK TABLE tasks IN SHARE MODE;

ALTER TABLE live ADD COLUMN stored bigint NOT NULL DEFAULT 0;
INSERT INTO live (scope, shard, n, stored)
    SELECT scope, 0, 0, count(*) FROM tasks GROUP BY scope
    ON CONFLICT (scope, shard) DO UPDATE SET stored = EXCLUDED.stored;

CREATE TABLE revoked (
    key   text   PRIMARY KEY,
    until bigint NOT NULL
);
CREATE INDEX revoked_until ON revoked (until);

-- Components stored by digest (SHA-256 hex), and deployments: which of them serve new
-- calls, newest revision current. `retired_at` is when the current deployment stopped
-- naming a component (or when it was stored, until one names it).
CREATE TABLE components (
    digest     text   PRIMARY KEY,
    bytes      bytea  NOT NULL,
    size       bigint NOT NULL,
    stored_at  bigint NOT NULL,
    retired_at bigint,
    signature  bytea
);
CREATE TABLE deployments (
    revision    bigint PRIMARY KEY,
    deployed_at bigint NOT NULL,
    components  text[] NOT NULL,
    note        text   NOT NULL
);

-- Live tasks per component digest, sharded like `live`; built from the live tasks' work.
CREATE TABLE pinned (
    digest text     NOT NULL,
    shard  smallint NOT NULL,
    n      bigint   NOT NULL,
    PRIMARY KEY (digest, shard)
);
INSERT INTO pinned (digest, shard, n)
    SELECT d, 0, count(*) FROM
        (SELECT convert_from(work, 'UTF8')::jsonb #>> '{work,componentDigest}' AS d
         FROM tasks WHERE live) w
    WHERE d IS NOT NULL GROUP BY d;
