-- pgbench script of the batched ingest transaction, the second anchor of
-- `make bench` (scripts/bench.sh): the rows of scripts/bench_naive_ingest.sql,
-- :batch events per transaction (pgbench -D batch=32), one statement per
-- table as a group commit writes them. Its events/s is what PostgreSQL can
-- store on this machine when commits are shared: an ingest path that keeps
-- one row and one job per event, committed with fsync, cannot pass it.
BEGIN;
WITH fresh AS (
    INSERT INTO inbox_event_keys (provider, event_id)
    SELECT 'stripe', 'evt_pgbench_' || txid_current() || '_' || g
    FROM generate_series(1, :batch) AS g
    ORDER BY 2
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING provider, event_id, received_at
)
INSERT INTO inbox_events (provider, event_id, type, livemode, api_version, provider_created_at, payload, received_at)
SELECT provider, event_id, 'payment_intent.succeeded', false, '2024-06-20', now(),
       convert_to(repeat(md5(random()::text), 38), 'UTF8'), received_at
FROM fresh;
INSERT INTO river_job (args, kind, max_attempts, queue, state, priority, scheduled_at, metadata, tags)
SELECT jsonb_build_object('provider', 'stripe', 'event_id', 'evt_pgbench_' || txid_current() || '_' || g),
       'process_event', 10, 'events', 'available', 1, now(), '{}', '{}'
FROM generate_series(1, :batch) AS g;
END;
