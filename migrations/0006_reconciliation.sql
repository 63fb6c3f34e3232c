-- Reconciliation: one row per run of a UTC day's comparison of the ledger
-- with the provider's balance transactions, and its items. Runs are
-- append-only: a re-run is a new row and the old one is kept. A run moves
-- once, from running to completed or failed; its items are written in the
-- same transaction as that move and never change afterwards.

CREATE TABLE reconciliation_runs (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    date         date        NOT NULL,
    trigger      text        NOT NULL,
    status       text        NOT NULL DEFAULT 'running',
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    -- The last failure: of an attempt that will be retried while running,
    -- the final one once failed.
    error        text,
    -- Who asked for it: the API caller's identity, "cli", or "scheduler".
    requested_by text        NOT NULL DEFAULT '',
    -- The report sections computed at completion (summary, per-currency
    -- totals, payouts, recovery); the items are in reconciliation_items.
    report       jsonb,
    CONSTRAINT reconciliation_runs_trigger_check CHECK (trigger IN ('scheduled', 'api', 'cli')),
    CONSTRAINT reconciliation_runs_status_check CHECK (status IN ('running', 'completed', 'failed')),
    CONSTRAINT reconciliation_runs_finished_check CHECK ((status = 'running') = (finished_at IS NULL)),
    CONSTRAINT reconciliation_runs_report_check CHECK (status <> 'completed' OR report IS NOT NULL)
);

-- The scheduled run of a day exists at most once, whatever River does after
-- a leader change or a restart; on-demand runs (api, cli) may repeat.
CREATE UNIQUE INDEX reconciliation_runs_scheduled_date_key
    ON reconciliation_runs (date) WHERE trigger = 'scheduled';
CREATE INDEX reconciliation_runs_date_idx ON reconciliation_runs (date, id);

CREATE TABLE reconciliation_items (
    id              bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          bigint  NOT NULL REFERENCES reconciliation_runs (id),
    position        integer NOT NULL,
    status          text    NOT NULL,
    provider_txn_id text,
    source_id       text,
    ref             text,
    type            text    NOT NULL,
    reporting_category text NOT NULL,
    currency        text    NOT NULL,
    ledger_currency text,
    provider_amount numeric,
    provider_fee    numeric,
    ledger_amount   numeric,
    CONSTRAINT reconciliation_items_status_check CHECK (status IN (
        'matched', 'amount_mismatch', 'currency_mismatch',
        'missing_in_ledger', 'missing_at_provider', 'fee_posted')),
    CONSTRAINT reconciliation_items_position_key UNIQUE (run_id, position)
);

-- Runs are never deleted, and a finished run never changes.
CREATE FUNCTION reconciliation_run_guard() RETURNS trigger
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
    IF NEW.id <> OLD.id OR NEW.date <> OLD.date OR NEW.trigger <> OLD.trigger
       OR NEW.started_at <> OLD.started_at OR NEW.requested_by <> OLD.requested_by THEN
        RAISE EXCEPTION 'reconciliation run %: only its outcome may be recorded', OLD.id
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'reconciliation_append_only';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER reconciliation_runs_guard
    BEFORE UPDATE OR DELETE ON reconciliation_runs
    FOR EACH ROW EXECUTE FUNCTION reconciliation_run_guard();
CREATE TRIGGER reconciliation_runs_no_truncate
    BEFORE TRUNCATE ON reconciliation_runs
    FOR EACH STATEMENT EXECUTE FUNCTION reconciliation_run_guard();

-- Items are written once, while their run is still running (the transaction
-- that completes it), and never updated or deleted.
CREATE FUNCTION reconciliation_item_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    run_status text;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'reconciliation items are append-only: % is refused', TG_OP
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'reconciliation_append_only';
    END IF;
    SELECT status INTO run_status FROM reconciliation_runs WHERE id = NEW.run_id;
    IF run_status IS DISTINCT FROM 'running' THEN
        RAISE EXCEPTION 'reconciliation run % is %; its items are final', NEW.run_id, run_status
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'reconciliation_append_only';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER reconciliation_items_guard
    BEFORE INSERT OR UPDATE OR DELETE ON reconciliation_items
    FOR EACH ROW EXECUTE FUNCTION reconciliation_item_guard();
CREATE TRIGGER reconciliation_items_no_truncate
    BEFORE TRUNCATE ON reconciliation_items
    FOR EACH STATEMENT EXECUTE FUNCTION reconciliation_item_guard();
