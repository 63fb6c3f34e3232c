-- Every failed attempt at applying an inbox event, and the sweeper that
-- re-enqueues events whose process_event job vanished.

-- River keeps a job's errors on its row and deletes the row after its
-- retention (a day for cancelled jobs, a week for discarded ones), or when
-- an operator deletes it in River UI. The poison queue's history of
-- attempts lives here instead, written in the transaction that records the
-- failure on the inbox row. Append-only: history is never rewritten.
CREATE TABLE inbox_attempts (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider  text        NOT NULL,
    event_id  text        NOT NULL,
    -- The process_event job and its attempt number, as River counts them.
    job_id    bigint      NOT NULL,
    attempt   integer     NOT NULL,
    error     text        NOT NULL,
    at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inbox_attempts_event_fkey FOREIGN KEY (provider, event_id)
        REFERENCES inbox_events (provider, event_id)
);

CREATE INDEX inbox_attempts_event_idx ON inbox_attempts (provider, event_id, id);

CREATE FUNCTION inbox_attempts_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'inbox attempts are append-only: % is refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              CONSTRAINT = 'inbox_attempts_append_only';
END;
$$;

CREATE TRIGGER inbox_attempts_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON inbox_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_attempts_refuse_change();
-- Fires in replica mode too (see 0008).
ALTER TABLE inbox_attempts ENABLE ALWAYS TRIGGER inbox_attempts_append_only;

-- When an event was last given a new process_event job while already
-- acknowledged: set back to received by a replay, or re-enqueued by the
-- sweeper. The sweeper leaves an event alone for a minute after this (or
-- after received_at), and since the column is on the row it locks, a
-- replay committing while a sweep runs is seen by the sweep's recheck of
-- the row: the two never both enqueue.
ALTER TABLE inbox_events ADD COLUMN requeued_at timestamptz;

-- The sweeper records each re-enqueued event in the audit log, actor
-- "sweeper".
ALTER TABLE ops_audit_log DROP CONSTRAINT ops_audit_log_action_check;
ALTER TABLE ops_audit_log ADD CONSTRAINT ops_audit_log_action_check
    CHECK (action IN ('replay', 'bulk_replay', 'discard', 'sweep'));
