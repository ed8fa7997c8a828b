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
