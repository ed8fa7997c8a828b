-- Snodo task store, schema version 2: the server key moves out of `meta` into a table of
-- its own, which no one but the table's owner (the serving role) may read. A role granted
-- SELECT on the task tables for reporting does not see the key that seals MRTR
-- requestState (docs/postgres.md, "Grants").

CREATE TABLE server_key (
    id    boolean PRIMARY KEY DEFAULT true CHECK (id),
    value bytea NOT NULL
);
REVOKE ALL ON server_key FROM PUBLIC;

INSERT INTO server_key (value) SELECT value FROM meta WHERE key = 'server_key';
DELETE FROM meta WHERE key = 'server_key';
