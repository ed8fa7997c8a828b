-- Snodo task store, schema version 5: what the operators' queries read. Each task row gains
-- its tenant, tool, creation and update times in columns, indexed the way the embedded
-- stores key their listing (store/listing.rs): by tenant and status, or status alone, then
-- creation time and id, newest first. `tally` counts stored tasks per tenant, tool and
-- status, sharded like `live`.

-- No write commits between the backfill below and this migration's commit: a node of an
-- earlier build waits for it (and is then refused by the schema version).
LOCK TABLE tasks IN SHARE MODE;

ALTER TABLE tasks
    ADD COLUMN tenant     text,
    ADD COLUMN tool       text,
    ADD COLUMN created_at bigint,
    ADD COLUMN updated_at bigint;

UPDATE tasks SET
    tenant = split_part(scope, chr(31), 1),
    tool = left(coalesce(convert_from(work, 'UTF8')::jsonb #>> '{work,input,tool}',
                         convert_from(work, 'UTF8')::jsonb #>> '{work,type}'), 1024),
    created_at = (convert_from(body, 'UTF8')::jsonb #>> '{task,createdAt}')::bigint,
    updated_at = (convert_from(body, 'UTF8')::jsonb #>> '{task,lastUpdatedAt}')::bigint;

ALTER TABLE tasks
    ALTER COLUMN tenant SET NOT NULL,
    ALTER COLUMN tool SET NOT NULL,
    ALTER COLUMN created_at SET NOT NULL,
    ALTER COLUMN updated_at SET NOT NULL;

CREATE INDEX tasks_list_tenant ON tasks (tenant, status, created_at DESC, id DESC);
CREATE INDEX tasks_list_status ON tasks (status, created_at DESC, id DESC);

CREATE TABLE tally (
    tenant text     NOT NULL,
    tool   text     NOT NULL,
    status text     NOT NULL,
    shard  smallint NOT NULL,
    n      bigint   NOT NULL,
    PRIMARY KEY (tenant, tool, status, shard)
);
INSERT INTO tally (tenant, tool, status, shard, n)
    SELECT tenant, tool, status, 0, count(*) FROM tasks GROUP BY tenant, tool, status;
