-- Snodo task store, schema version 7: schedules. One row per schedule, its body the JSON
-- every adapter keeps, its revision the compare-and-set's witness. `swap_schedule` is the
-- one way a row changes: by an operator's statement, or inside the transaction that
-- creates a firing's task, where it is the first change so the row's lock comes before
-- the task's insert (two nodes firing at once queue on the row, and the second finds it
-- moved). A row not at `expected` raises SN409 with "<revision or ->" as its message; a
-- new row past `max_rows` raises SN413.
CREATE TABLE schedules (
    name text PRIMARY KEY,
    revision bigint NOT NULL,
    body bytea NOT NULL
);

CREATE FUNCTION swap_schedule(n text, expected bigint, new_body bytea, new_revision bigint,
                              max_rows bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    cur bigint;
BEGIN
    SELECT revision INTO cur FROM schedules WHERE name = n FOR UPDATE;
    IF cur IS DISTINCT FROM expected THEN
        RAISE EXCEPTION USING ERRCODE = 'SN409', MESSAGE = coalesce(cur::text, '-');
    END IF;
    IF new_body IS NULL THEN
        DELETE FROM schedules WHERE name = n;
    ELSIF cur IS NULL THEN
        IF (SELECT count(*) FROM schedules) >= max_rows THEN
            RAISE EXCEPTION USING ERRCODE = 'SN413', MESSAGE = 'too many schedules';
        END IF;
        INSERT INTO schedules (name, revision, body) VALUES (n, new_revision, new_body)
            ON CONFLICT (name) DO NOTHING;
        IF NOT FOUND THEN
            -- Made by another transaction since this one looked.
            SELECT revision INTO cur FROM schedules WHERE name = n;
            RAISE EXCEPTION USING ERRCODE = 'SN409', MESSAGE = coalesce(cur::text, '-');
        END IF;
    ELSE
        UPDATE schedules SET revision = new_revision, body = new_body WHERE name = n;
    END IF;
END
$$;
