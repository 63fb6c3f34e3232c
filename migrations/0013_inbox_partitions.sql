-- The inbox at a year of traffic: what grows is split from what must stay.
--
-- 1. The dedupe key moves to inbox_event_keys, a narrow table kept forever.
--    A partitioned table cannot hold a unique key that leaves out its
--    partition key, and (provider, event_id) must stay unique across all
--    time: a provider retrying a month-old event, or an event whose payload
--    was dropped long ago, is still a duplicate. The ingest statement
--    inserts the key and the event together; the key's insert decides, as
--    the old unique constraint did.
-- 2. inbox_events is partitioned by month of received_at, so that old
--    payloads leave by detaching a partition (PAYGATE_PAYLOAD_RETENTION),
--    not by a DELETE that scans and bloats. The existing rows stay where
--    they are: the old table becomes the partition for everything before
--    next month, and monthly partitions follow. A DEFAULT partition catches
--    any row no monthly partition covers, so an insert never fails for a
--    partition not yet created.
-- 3. Counts by status are kept in inbox_status_counts, updated by statement
--    triggers in the transaction that changes the rows, so /v1/ops/stats and
--    /metrics read a few dozen rows however large the inbox grows.

CREATE TABLE inbox_event_keys (
    provider    text        NOT NULL,
    event_id    text        NOT NULL,
    -- The event's received_at: the partition its row lives in, so a lookup
    -- by key visits one partition.
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, event_id)
);

INSERT INTO inbox_event_keys (provider, event_id, received_at)
    SELECT provider, event_id, received_at FROM inbox_events;

-- A key removed or renamed would let a retry apply twice: refused, for the
-- owner too (the app has neither right, see paygate_grant_app below). Only
-- received_at may move, with its event's row: that is how tests date an
-- event; nothing in paygate moves one.
CREATE FUNCTION inbox_event_keys_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND (NEW.provider, NEW.event_id) = (OLD.provider, OLD.event_id) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'inbox event keys are kept forever: % is refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              CONSTRAINT = 'inbox_event_keys_kept';
END;
$$;
CREATE TRIGGER inbox_event_keys_kept
    BEFORE UPDATE OR DELETE ON inbox_event_keys
    FOR EACH ROW EXECUTE FUNCTION inbox_event_keys_refuse_change();
CREATE TRIGGER inbox_event_keys_kept_truncate
    BEFORE TRUNCATE ON inbox_event_keys
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_event_keys_refuse_change();
ALTER TABLE inbox_event_keys ENABLE ALWAYS TRIGGER inbox_event_keys_kept;
ALTER TABLE inbox_event_keys ENABLE ALWAYS TRIGGER inbox_event_keys_kept_truncate;

-- Attempts outlive their event's payload: they name the key.
ALTER TABLE inbox_attempts DROP CONSTRAINT inbox_attempts_event_fkey;
ALTER TABLE inbox_attempts ADD CONSTRAINT inbox_attempts_event_fkey
    FOREIGN KEY (provider, event_id) REFERENCES inbox_event_keys (provider, event_id);

-- The old table, as it is, becomes the first partition.
ALTER TABLE inbox_events RENAME TO inbox_events_before;
ALTER TABLE inbox_events_before DROP CONSTRAINT inbox_events_provider_event_id_key;
ALTER TABLE inbox_events_before ALTER COLUMN id DROP IDENTITY;
ALTER TABLE inbox_events_before RENAME CONSTRAINT inbox_events_pkey TO inbox_events_before_pkey;
ALTER INDEX inbox_events_received_at_idx RENAME TO inbox_events_before_received_at_idx;
ALTER INDEX inbox_events_status_idx RENAME TO inbox_events_before_status_idx;
ALTER INDEX inbox_events_status_type_idx RENAME TO inbox_events_before_status_type_idx;

CREATE SEQUENCE inbox_events_id_seq AS bigint;
SELECT setval('inbox_events_id_seq', coalesce((SELECT max(id) FROM inbox_events_before), 0) + 1, false);

CREATE TABLE inbox_events (
    id            bigint      NOT NULL DEFAULT nextval('inbox_events_id_seq'),
    provider      text        NOT NULL,
    event_id      text        NOT NULL,
    type          text        NOT NULL,
    livemode      boolean     NOT NULL DEFAULT false,
    api_version   text        NOT NULL DEFAULT '',
    provider_created_at timestamptz,
    payload       bytea       NOT NULL,
    status        text        NOT NULL DEFAULT 'received',
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    received_at   timestamptz NOT NULL DEFAULT now(),
    processed_at  timestamptz,
    requeued_at   timestamptz,
    CONSTRAINT inbox_events_status_check
        CHECK (status IN ('received', 'processed', 'ignored', 'poison', 'discarded'))
) PARTITION BY RANGE (received_at);
ALTER SEQUENCE inbox_events_id_seq OWNED BY inbox_events.id;

DO $$
DECLARE
    next_month timestamptz := (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC';
BEGIN
    EXECUTE format('ALTER TABLE inbox_events ATTACH PARTITION inbox_events_before FOR VALUES FROM (MINVALUE) TO (%L)', next_month);
END;
$$;
CREATE TABLE inbox_events_default PARTITION OF inbox_events DEFAULT;

-- The primary key is the dedupe key with the partition key, which a
-- partitioned table's keys must hold: the index every lookup through
-- inbox_event_keys uses, and the only one besides the lists'. (A key on id
-- as well would be one more index written by every insert and, status
-- being indexed, every status change.)
ALTER TABLE inbox_events_before DROP CONSTRAINT inbox_events_before_pkey;
ALTER TABLE inbox_events ADD CONSTRAINT inbox_events_pkey PRIMARY KEY (provider, event_id, received_at);
CREATE INDEX inbox_events_received_at_idx ON inbox_events (received_at DESC, id DESC);
CREATE INDEX inbox_events_status_idx ON inbox_events (status, received_at DESC, id DESC);
CREATE INDEX inbox_events_status_type_idx ON inbox_events (status, type, received_at DESC, id DESC);

-- Counts by status. A transaction adds its changes to the slot of its
-- backend, so concurrent ingest and apply transactions, each holding its
-- slot's row until it commits, do not wait for one another on a counter;
-- two backends that share a slot take its rows in status order, so they
-- wait but never deadlock.
CREATE TABLE inbox_status_counts (
    status text     NOT NULL,
    slot   smallint NOT NULL,
    n      bigint   NOT NULL,
    PRIMARY KEY (status, slot)
);
INSERT INTO inbox_status_counts (status, slot, n)
    SELECT status, 0, count(*) FROM inbox_events GROUP BY status;

CREATE FUNCTION inbox_status_count_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO inbox_status_counts (status, slot, n)
            SELECT status, pg_backend_pid() % 64, count(*) FROM new_rows GROUP BY status ORDER BY status
            ON CONFLICT (status, slot) DO UPDATE SET n = inbox_status_counts.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO inbox_status_counts (status, slot, n)
            SELECT status, pg_backend_pid() % 64, -count(*) FROM old_rows GROUP BY status ORDER BY status
            ON CONFLICT (status, slot) DO UPDATE SET n = inbox_status_counts.n + excluded.n;
    ELSE
        INSERT INTO inbox_status_counts (status, slot, n)
            SELECT status, pg_backend_pid() % 64, sum(d) FROM (
                SELECT status, 1 AS d FROM new_rows
                UNION ALL
                SELECT status, -1 FROM old_rows
            ) c GROUP BY status HAVING sum(d) <> 0 ORDER BY status
            ON CONFLICT (status, slot) DO UPDATE SET n = inbox_status_counts.n + excluded.n;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER inbox_events_count_insert AFTER INSERT ON inbox_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_status_count_change();
CREATE TRIGGER inbox_events_count_update AFTER UPDATE ON inbox_events
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_status_count_change();
CREATE TRIGGER inbox_events_count_delete AFTER DELETE ON inbox_events
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_status_count_change();

CREATE FUNCTION inbox_status_count_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM inbox_status_counts;
    RETURN NULL;
END;
$$;
CREATE TRIGGER inbox_events_count_truncate AFTER TRUNCATE ON inbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_status_count_truncate();

ALTER TABLE inbox_events ENABLE ALWAYS TRIGGER inbox_events_count_insert;
ALTER TABLE inbox_events ENABLE ALWAYS TRIGGER inbox_events_count_update;
ALTER TABLE inbox_events ENABLE ALWAYS TRIGGER inbox_events_count_delete;
ALTER TABLE inbox_events ENABLE ALWAYS TRIGGER inbox_events_count_truncate;

-- Partition upkeep runs inside `paygate serve`, which logs in as
-- paygate_app and owns nothing; only the owner may create, detach or drop a
-- partition. These two functions are the whole of what it may do, run with
-- the owner's rights.

-- paygate_inbox_partition_create makes the partition for the month that
-- starts at month (UTC), unless one exists. It refuses months that have
-- begun: their rows may already be in the DEFAULT partition.
CREATE FUNCTION paygate_inbox_partition_create(month date) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    name text := format('inbox_events_%s', to_char(month, 'YYYY_MM'));
    lower timestamptz := month::timestamp AT TIME ZONE 'UTC';
    upper timestamptz := (month + interval '1 month')::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF date_trunc('month', month) <> month THEN
        RAISE EXCEPTION 'inbox partition: % is not the first of a month', month;
    END IF;
    IF lower <= now() THEN
        RAISE EXCEPTION 'inbox partition: the month of % has begun', month;
    END IF;
    IF to_regclass(name) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF inbox_events FOR VALUES FROM (%L) TO (%L)', name, lower, upper);
    RETURN true;
END;
$$;

-- paygate_inbox_partition_drop detaches and drops one partition whose every
-- row was received before keep_from, and takes its rows out of the counts,
-- in one transaction. A partition that still holds an event waiting to be
-- applied or for ops (received or poison) is kept: dropping it would lose
-- the event. It answers the number of rows dropped, or, when it keeps the
-- partition, minus the number of such events.
CREATE FUNCTION paygate_inbox_partition_drop(partition text, keep_from timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    bound text;
    upper timestamptz;
    open_events bigint;
    dropped bigint;
BEGIN
    SELECT pg_get_expr(c.relpartbound, c.oid) INTO bound
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'inbox_events'::regclass AND c.relname = partition;
    IF bound IS NULL THEN
        RAISE EXCEPTION 'inbox partition: % is not a partition of inbox_events', partition;
    END IF;
    IF bound = 'DEFAULT' THEN
        RAISE EXCEPTION 'inbox partition: the default partition is never dropped';
    END IF;
    upper := substring(bound FROM 'TO \(''([^'']+)''\)')::timestamptz;
    IF upper IS NULL OR upper > keep_from THEN
        RAISE EXCEPTION 'inbox partition: % holds events received on or after %', partition, keep_from;
    END IF;
    -- No replay or discard may change a row between the check and the drop.
    EXECUTE format('LOCK TABLE %I IN SHARE MODE', partition);
    EXECUTE format('SELECT count(*) FROM %I WHERE status IN (''received'', ''poison'')', partition) INTO open_events;
    IF open_events > 0 THEN
        RETURN -open_events;
    END IF;
    EXECUTE format('INSERT INTO inbox_status_counts (status, slot, n)
        SELECT status, pg_backend_pid() %% 64, -count(*) FROM %I GROUP BY status ORDER BY status
        ON CONFLICT (status, slot) DO UPDATE SET n = inbox_status_counts.n + excluded.n', partition);
    EXECUTE format('SELECT count(*) FROM %I', partition) INTO dropped;
    EXECUTE format('ALTER TABLE inbox_events DETACH PARTITION %I', partition);
    EXECUTE format('DROP TABLE %I', partition);
    RETURN dropped;
END;
$$;

REVOKE ALL ON FUNCTION paygate_inbox_partition_create(date) FROM PUBLIC;
REVOKE ALL ON FUNCTION paygate_inbox_partition_drop(text, timestamptz) FROM PUBLIC;

-- paygate_grant_app (0008) again, with what this file adds: the two
-- functions, and inbox_event_keys among the tables the app only appends to.
CREATE OR REPLACE FUNCTION paygate_grant_app() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'paygate_app') THEN
            CREATE ROLE paygate_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
        END IF;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL; -- created meanwhile by a migration of another database
    END;

    EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO paygate_app', current_database());
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO paygate_app', current_schema());
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO paygate_app', current_schema());
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO paygate_app', current_schema());
    EXECUTE format('REVOKE TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA %I FROM paygate_app', current_schema());

    -- Written once, never changed.
    REVOKE UPDATE, DELETE ON ledger_transactions, ledger_entries, ops_audit_log,
        inbox_attempts, reconciliation_items, inbox_event_keys FROM paygate_app;
    -- A run records its outcome once (its trigger refuses anything else)
    -- and is never deleted.
    REVOKE DELETE ON reconciliation_runs FROM paygate_app;
    -- Only migrate writes these; readiness reads ours.
    REVOKE INSERT, UPDATE, DELETE ON paygate_migrations, river_migration FROM paygate_app;
    -- Partition upkeep, with the owner's rights.
    GRANT EXECUTE ON FUNCTION paygate_inbox_partition_create(date) TO paygate_app;
    GRANT EXECUTE ON FUNCTION paygate_inbox_partition_drop(text, timestamptz) TO paygate_app;
END;
$$;

-- The next three months exist from the start; `paygate serve` keeps three
-- months ahead from then on.
SELECT paygate_inbox_partition_create((date_trunc('month', now() AT TIME ZONE 'UTC') + m * interval '1 month')::date)
FROM generate_series(1, 3) AS m;
