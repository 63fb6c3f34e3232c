-- pgbench script of the naive ingest transaction, the first anchor of `make bench`
-- (scripts/bench.sh): what paygate's one-transaction-per-event ingest does,
-- against the real tables of a database migrated as paygate's. Per transaction:
-- the event's dedupe key in inbox_event_keys and its inbox_events row (a
-- ~1.2 kB payload, the size of the simulator's events) in one statement,
-- as paygate's ingest writes them, and one river_job row in the events
-- queue, as River's InsertTx writes it; four round trips (BEGIN, INSERT,
-- INSERT, COMMIT) like pgx's BeginFunc. Ids are unique per transaction
-- (txid_current()).
BEGIN;
WITH fresh AS (
    INSERT INTO inbox_event_keys (provider, event_id)
    VALUES ('stripe', 'evt_pgbench_' || txid_current())
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING provider, event_id, received_at
)
INSERT INTO inbox_events (provider, event_id, type, livemode, api_version, provider_created_at, payload, received_at)
SELECT provider, event_id, 'payment_intent.succeeded', false, '2024-06-20', now(),
       convert_to(repeat(md5(random()::text), 38), 'UTF8'), received_at
FROM fresh;
INSERT INTO river_job (args, kind, max_attempts, queue, state, priority, scheduled_at, metadata, tags)
VALUES (jsonb_build_object('provider', 'stripe', 'event_id', 'evt_pgbench_' || txid_current()),
        'process_event', 10, 'events', 'available', 1, now(), '{}', '{}');
END;
