-- Snodo task store, schema version 8: the outbox and webhook subscriptions.
--
-- `webhooks` holds one row per subscription, changed only by `swap_webhook` (a
-- compare-and-set on its revision, as `swap_schedule` for schedules): SN409 with
-- "<revision or ->" when the row is not at `expected`, SN413 past `max_rows`.
--
-- `outbox_events` holds the events written in the commit of the transition each reports.
-- Their numbers come from the one row of `outbox_seq`, bumped by `outbox_append` as the
-- last statement of the writing transaction: the row's lock is held until the commit, so
-- numbers are taken in commit order and a reader that saw event n never later meets a
-- smaller one committed after it (a sequence would hand out numbers in start order).
CREATE TABLE webhooks (
    name text PRIMARY KEY,
    revision bigint NOT NULL,
    body bytea NOT NULL
);

CREATE FUNCTION swap_webhook(n text, expected bigint, new_body bytea, new_revision bigint,
                             max_rows bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    cur bigint;
BEGIN
    SELECT revision INTO cur FROM webhooks WHERE name = n FOR UPDATE;
    IF cur IS DISTINCT FROM expected THEN
        RAISE EXCEPTION USING ERRCODE = 'SN409', MESSAGE = coalesce(cur::text, '-');
    END IF;
    IF new_body IS NULL THEN
        DELETE FROM webhooks WHERE name = n;
    ELSIF cur IS NULL THEN
        IF (SELECT count(*) FROM webhooks) >= max_rows THEN
            RAISE EXCEPTION USING ERRCODE = 'SN413', MESSAGE = 'too many webhooks';
        END IF;
        INSERT INTO webhooks (name, revision, body) VALUES (n, new_revision, new_body)
            ON CONFLICT (name) DO NOTHING;
        IF NOT FOUND THEN
            SELECT revision INTO cur FROM webhooks WHERE name = n;
            RAISE EXCEPTION USING ERRCODE = 'SN409', MESSAGE = coalesce(cur::text, '-');
        END IF;
    ELSE
        UPDATE webhooks SET revision = new_revision, body = new_body WHERE name = n;
    END IF;
END
$$;

CREATE TABLE outbox_seq (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    n bigint NOT NULL
);
INSERT INTO outbox_seq (one, n) VALUES (true, 0);

CREATE TABLE outbox_events (
    seq bigint PRIMARY KEY,
    at bigint NOT NULL,
    body bytea NOT NULL
);

CREATE FUNCTION outbox_append(bodies bytea[], ats bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
BEGIN
    UPDATE outbox_seq SET n = n + cardinality(bodies) RETURNING n INTO last;
    INSERT INTO outbox_events (seq, at, body)
        SELECT last - cardinality(bodies) + u.i, u.at, u.body
        FROM unnest(bodies, ats) WITH ORDINALITY AS u(body, at, i);
END
$$;
