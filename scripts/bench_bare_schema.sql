-- The bare anchor's tables (scripts/bench_bare_ingest.sql): an event with
-- its primary key, and a job row with nothing but its columns.
CREATE TABLE bare_events (
    provider    text        NOT NULL,
    event_id    text        NOT NULL,
    payload     jsonb       NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (provider, event_id)
);
CREATE TABLE bare_jobs (
    id         bigserial,
    kind       text        NOT NULL,
    args       jsonb       NOT NULL,
    state      text        NOT NULL,
    created_at timestamptz NOT NULL
);
