-- Operations: Idempotency-Key records for POSTs under /v1, and the audit log
-- of operator actions on inbox events.

-- One row per (caller identity, key). A request claims its key by inserting
-- the row (ON CONFLICT DO NOTHING: the database decides who won a race)
-- before doing anything; the winner stores its response in the same
-- transaction as its effect, so a key is either unfinished (no response) or
-- finished with the response that matches what was committed. claim_token
-- names the request holding an unfinished claim: a claim left behind by a
-- crash is taken over after a lease by swapping the token, and the old
-- holder, if it was only slow, can no longer store a response (its UPDATE
-- matches no row, so its transaction rolls back). Rows are purged after 24
-- hours by the idempotency_purge job.
CREATE TABLE idempotency_keys (
    identity          text        NOT NULL,
    key               text        NOT NULL,
    fingerprint       bytea       NOT NULL,
    method            text        NOT NULL,
    path              text        NOT NULL,
    claim_token       bytea       NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    claimed_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    response_status   integer,
    response_type     text,
    response_location text,
    response_body     bytea,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (identity, key),
    CONSTRAINT idempotency_keys_key_check CHECK (length(key) BETWEEN 1 AND 255),
    CONSTRAINT idempotency_keys_response_check
        CHECK ((completed_at IS NULL) = (response_status IS NULL))
);

CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

-- Who did what to which event, why, and under which Idempotency-Key.
-- Append-only: a statement-level trigger refuses every UPDATE, DELETE and
-- TRUNCATE, so not even a psql session rewrites history.
CREATE TABLE ops_audit_log (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    actor           text        NOT NULL,
    action          text        NOT NULL,
    provider        text,
    event_id        text,
    reason          text,
    idempotency_key text,
    CONSTRAINT ops_audit_log_actor_check CHECK (btrim(actor) <> ''),
    CONSTRAINT ops_audit_log_action_check CHECK (action IN ('replay', 'bulk_replay', 'discard')),
    CONSTRAINT ops_audit_log_discard_reason_check
        CHECK (action <> 'discard' OR btrim(coalesce(reason, '')) <> '')
);

CREATE INDEX ops_audit_log_event_idx ON ops_audit_log (provider, event_id, id DESC);

CREATE FUNCTION ops_audit_log_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ops audit log is append-only: % is refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              CONSTRAINT = 'ops_audit_log_append_only';
END;
$$;

CREATE TRIGGER ops_audit_log_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON ops_audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION ops_audit_log_refuse_change();

-- The poison queue is read newest first with filters on type and time.
CREATE INDEX inbox_events_status_type_idx ON inbox_events (status, type, received_at DESC, id DESC);
