-- Reconciliation of more than one provider, and of settlement batches.
-- A run reconciles one provider's statement: a UTC day of its balance
-- transactions (Stripe: date) or one of its settlement batches (Adyen:
-- batch, the batch number of the settlement details report). Every run
-- before this migration is a Stripe day, and so is a run recorded without
-- naming its provider.

ALTER TABLE reconciliation_runs ADD COLUMN provider text NOT NULL DEFAULT 'stripe';
ALTER TABLE reconciliation_runs ADD COLUMN batch bigint;
ALTER TABLE reconciliation_runs ALTER COLUMN date DROP NOT NULL;
ALTER TABLE reconciliation_runs ADD CONSTRAINT reconciliation_runs_scope_check
    CHECK ((date IS NULL) <> (batch IS NULL) AND (batch IS NULL OR batch > 0) AND provider <> '');

-- The scheduled run of a provider's day, or of its batch (started by the
-- batch's report), exists at most once, whatever River does after a leader
-- change or a restart, and however often the report is announced;
-- on-demand runs (api, cli) may repeat.
DROP INDEX reconciliation_runs_scheduled_date_key;
CREATE UNIQUE INDEX reconciliation_runs_scheduled_date_key
    ON reconciliation_runs (provider, date) WHERE trigger = 'scheduled' AND date IS NOT NULL;
CREATE UNIQUE INDEX reconciliation_runs_scheduled_batch_key
    ON reconciliation_runs (provider, batch) WHERE trigger = 'scheduled' AND batch IS NOT NULL;
CREATE INDEX reconciliation_runs_provider_idx ON reconciliation_runs (provider, id);
CREATE INDEX reconciliation_runs_batch_idx ON reconciliation_runs (provider, batch, id) WHERE batch IS NOT NULL;

-- What a run reconciles is fixed when it is requested, like its date was.
CREATE OR REPLACE FUNCTION reconciliation_run_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'TRUNCATE') THEN
        RAISE EXCEPTION 'reconciliation runs are append-only: % is refused', TG_OP
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'reconciliation_append_only';
    END IF;
    IF OLD.status <> 'running' THEN
        RAISE EXCEPTION 'reconciliation run % is %; a finished run never changes', OLD.id, OLD.status
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'reconciliation_append_only';
    END IF;
    IF NEW.id <> OLD.id OR NEW.date IS DISTINCT FROM OLD.date OR NEW.trigger <> OLD.trigger
       OR NEW.started_at <> OLD.started_at OR NEW.requested_by <> OLD.requested_by
       OR NEW.provider <> OLD.provider OR NEW.batch IS DISTINCT FROM OLD.batch THEN
        RAISE EXCEPTION 'reconciliation run %: only its outcome may be recorded', OLD.id
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'reconciliation_append_only';
    END IF;
    RETURN NEW;
END;
$$;

-- Settlement reports: the file a provider writes when a batch closes and
-- pays out, announced by a notification (Adyen's REPORT_AVAILABLE: the file
-- name and its URL). One row per file, whatever the number of
-- notifications: the first decides, and the file is downloaded once, then
-- kept as received with its SHA-256, so that every run of its batch reads
-- the very bytes the provider wrote.
CREATE TABLE settlement_reports (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider      text        NOT NULL,
    file_name     text        NOT NULL,
    url           text        NOT NULL,
    batch         bigint      NOT NULL,
    -- The notification that (last) announced it: the inbox event a refused
    -- download is recorded on.
    event_id      text        NOT NULL,
    -- notified (to download), stored, refused (the configuration does not
    -- allow its URL) or failed (attempts exhausted); a new notification of
    -- a refused or failed report sets it back to notified.
    status        text        NOT NULL DEFAULT 'notified',
    error         text,
    notified_at   timestamptz NOT NULL DEFAULT now(),
    downloaded_at timestamptz,
    size          bigint,
    sha256        text,
    body          bytea,
    CONSTRAINT settlement_reports_file_key UNIQUE (provider, file_name),
    CONSTRAINT settlement_reports_status_check CHECK (status IN ('notified', 'stored', 'refused', 'failed')),
    CONSTRAINT settlement_reports_batch_check CHECK (batch > 0),
    CONSTRAINT settlement_reports_stored_check CHECK ((status = 'stored') = (body IS NOT NULL)
        AND (body IS NULL OR (sha256 ~ '^[0-9a-f]{64}$' AND size = octet_length(body) AND downloaded_at IS NOT NULL)))
);
CREATE INDEX settlement_reports_batch_idx ON settlement_reports (provider, batch) WHERE status = 'stored';

-- A stored file is kept as it was received: never changed, never deleted.
CREATE FUNCTION settlement_report_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'TRUNCATE') THEN
        RAISE EXCEPTION 'settlement reports are kept: % is refused', TG_OP
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'settlement_reports_kept';
    END IF;
    IF OLD.status = 'stored' AND (NEW.body IS DISTINCT FROM OLD.body OR NEW.sha256 IS DISTINCT FROM OLD.sha256
       OR NEW.status <> OLD.status OR NEW.file_name <> OLD.file_name OR NEW.provider <> OLD.provider
       OR NEW.batch <> OLD.batch OR NEW.downloaded_at IS DISTINCT FROM OLD.downloaded_at) THEN
        RAISE EXCEPTION 'settlement report % is stored; its file never changes', OLD.file_name
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'settlement_reports_kept';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER settlement_reports_guard
    BEFORE UPDATE OR DELETE ON settlement_reports
    FOR EACH ROW EXECUTE FUNCTION settlement_report_guard();
CREATE TRIGGER settlement_reports_no_truncate
    BEFORE TRUNCATE ON settlement_reports
    FOR EACH STATEMENT EXECUTE FUNCTION settlement_report_guard();
ALTER TABLE settlement_reports ENABLE ALWAYS TRIGGER settlement_reports_guard;
ALTER TABLE settlement_reports ENABLE ALWAYS TRIGGER settlement_reports_no_truncate;
