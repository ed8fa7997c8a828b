-- Snodo task store, schema version 9: the operators' audit.
--
-- One row per operator action, keyed as the embedded stores key it (the time counted down,
-- then the record's id), so the primary key's order is newest first and the oldest rows,
-- which appends sweep past the retention, sit at its end.
CREATE TABLE audit (
    k bytea PRIMARY KEY,
    at bigint NOT NULL,
    body bytea NOT NULL
);
