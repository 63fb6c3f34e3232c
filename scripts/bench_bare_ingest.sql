-- pgbench script of the bare anchor of `make bench` (scripts/bench.sh): the
-- least database work one event can cost, on tables of its own
-- (scripts/bench_bare_schema.sql) rather than paygate's and River's. Per
-- transaction: the event's row, keyed by (provider, event_id), with a
-- ~1.2 kB JSON payload (the size of the simulator's events), and one row
-- for its job; four round trips (BEGIN, INSERT, INSERT, COMMIT). Ids are
-- unique per transaction (txid_current()).
BEGIN;
INSERT INTO bare_events (provider, event_id, payload, received_at)
VALUES ('stripe', 'evt_pgbench_' || txid_current(),
        jsonb_build_object('id', 'evt_pgbench_' || txid_current(), 'object', 'event',
                           'type', 'payment_intent.succeeded', 'data', repeat(md5(random()::text), 36)),
        now());
INSERT INTO bare_jobs (kind, args, state, created_at)
VALUES ('process_event', jsonb_build_object('provider', 'stripe', 'event_id', 'evt_pgbench_' || txid_current()),
        'available', now());
END;
