-- The inbox: every provider event ever acknowledged, exactly as received.
-- (provider, event_id) is the dedupe key: the database decides, never a
-- check-then-act in Go, so two copies racing in the same millisecond make
-- one row.
CREATE TABLE inbox_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
    CONSTRAINT inbox_events_provider_event_id_key UNIQUE (provider, event_id),
    CONSTRAINT inbox_events_status_check
        CHECK (status IN ('received', 'processed', 'ignored', 'poison', 'discarded'))
);

CREATE INDEX inbox_events_status_idx ON inbox_events (status, received_at DESC, id DESC);
