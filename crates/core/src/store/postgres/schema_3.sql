-- Snodo task store, schema version 3: the outbound journal. Each entry is one response a
-- task's guest received, recorded before the guest saw it, at its position (the request's
-- sequence number within an attempt). Entries go with their task.

CREATE TABLE journal (
    task_id bytea   NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     integer NOT NULL,
    entry   bytea   NOT NULL,
    PRIMARY KEY (task_id, seq)
);
