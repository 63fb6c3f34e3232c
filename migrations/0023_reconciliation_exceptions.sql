-- Reconciliation exceptions: finance resolves each item that is not
-- matched (an amount or currency mismatch, a movement missing on one side)
-- with a resolution and a note, once; a write-off books the difference
-- against reconciliation_adjustments. Items stay as their run wrote them:
-- the resolution is a row of its own, written once.

-- 1. The account write-offs are booked against. NOT VALID, then VALIDATE:
-- the check of the existing entries does not hold off postings meanwhile.
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_account_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_account_check CHECK (account IN (
    'provider_balance', 'payouts_in_transit', 'bank',
    'sales', 'refunds', 'dispute_losses', 'fees', 'fx_clearing', 'reconciliation_adjustments')) NOT VALID;
ALTER TABLE ledger_entries VALIDATE CONSTRAINT ledger_entries_account_check;

-- 2. The payment an item is about, so that finance can follow it: the
-- ledger transaction's payment, or for a movement the ledger lacks, the
-- payment its record names (whose facts are about its source object, or
-- with the id of its source or of the provider's record). A run writes it
-- with its items. The items written before are given theirs here by a
-- rewrite of the table (ALTER … TYPE … USING, as 0022 added posted_at),
-- not by an UPDATE, which their guard refuses: no item changes meaning.
ALTER TABLE reconciliation_items ADD COLUMN payment_id text;

CREATE TEMPORARY TABLE reconciliation_item_payments (
    id         bigint PRIMARY KEY,
    payment_id text   NOT NULL
) ON COMMIT DROP;
INSERT INTO reconciliation_item_payments (id, payment_id)
SELECT i.id, coalesce(t.payment_id, by_source.id, f.payment_id, by_record.id)
FROM reconciliation_items i
JOIN reconciliation_runs r ON r.id = i.run_id
LEFT JOIN ledger_transactions t ON t.ref = i.ref
LEFT JOIN payments by_source ON i.status = 'missing_in_ledger' AND by_source.id = i.source_id AND by_source.provider = r.provider
LEFT JOIN payments by_record ON i.status = 'missing_in_ledger' AND by_record.id = i.provider_txn_id AND by_record.provider = r.provider
LEFT JOIN (
    SELECT DISTINCT ON (f.object_id) f.object_id, f.payment_id, p.provider
    FROM payment_facts f JOIN payments p ON p.id = f.payment_id
    WHERE f.object_id IN (SELECT source_id FROM reconciliation_items WHERE status = 'missing_in_ledger')
    ORDER BY f.object_id, f.recorded_at, f.payment_id
) f ON i.status = 'missing_in_ledger' AND f.object_id = i.source_id AND f.provider = r.provider
WHERE coalesce(t.payment_id, by_source.id, f.payment_id, by_record.id) IS NOT NULL;

CREATE FUNCTION pg_temp.reconciliation_item_payment(item bigint) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT payment_id FROM pg_temp.reconciliation_item_payments WHERE id = item $$;
ALTER TABLE reconciliation_items ALTER COLUMN payment_id TYPE text USING pg_temp.reconciliation_item_payment(id);
DROP FUNCTION pg_temp.reconciliation_item_payment(bigint);

-- A run's open exceptions are read apart from its matched items.
CREATE INDEX reconciliation_items_exceptions_idx ON reconciliation_items (run_id, position)
    WHERE status IN ('amount_mismatch', 'currency_mismatch', 'missing_in_ledger', 'missing_at_provider');

-- 3. Resolutions: one per exception, written once, never changed. A
-- write-off that moved money names its adjustment's ledger ref.
CREATE TABLE reconciliation_resolutions (
    item_id        bigint      PRIMARY KEY REFERENCES reconciliation_items (id),
    resolution     text        NOT NULL,
    note           text        NOT NULL,
    resolved_by    text        NOT NULL,
    resolved_at    timestamptz NOT NULL DEFAULT now(),
    adjustment_ref text,
    CONSTRAINT reconciliation_resolutions_resolution_check
        CHECK (resolution IN ('matched_manually', 'provider_error', 'write_off')),
    CONSTRAINT reconciliation_resolutions_note_check CHECK (btrim(note) <> '' AND char_length(note) <= 2000),
    CONSTRAINT reconciliation_resolutions_resolved_by_check CHECK (btrim(resolved_by) <> ''),
    CONSTRAINT reconciliation_resolutions_adjustment_check CHECK (adjustment_ref IS NULL OR resolution = 'write_off')
);

-- Only an exception is resolved, and a resolution is never updated,
-- deleted or truncated, whoever asks.
CREATE FUNCTION reconciliation_resolution_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    item_status text;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'reconciliation resolutions are written once: % is refused', TG_OP
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'reconciliation_resolutions_append_only';
    END IF;
    SELECT status INTO item_status FROM reconciliation_items WHERE id = NEW.item_id;
    IF item_status IS NULL OR item_status NOT IN ('amount_mismatch', 'currency_mismatch', 'missing_in_ledger', 'missing_at_provider') THEN
        RAISE EXCEPTION 'reconciliation item % is %: only an exception is resolved', NEW.item_id, coalesce(item_status, 'unknown')
            USING ERRCODE = 'check_violation', CONSTRAINT = 'reconciliation_resolutions_exception';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER reconciliation_resolutions_guard
    BEFORE INSERT OR UPDATE OR DELETE ON reconciliation_resolutions
    FOR EACH ROW EXECUTE FUNCTION reconciliation_resolution_guard();
CREATE TRIGGER reconciliation_resolutions_no_truncate
    BEFORE TRUNCATE ON reconciliation_resolutions
    FOR EACH STATEMENT EXECUTE FUNCTION reconciliation_resolution_guard();
ALTER TABLE reconciliation_resolutions ENABLE ALWAYS TRIGGER reconciliation_resolutions_guard;
ALTER TABLE reconciliation_resolutions ENABLE ALWAYS TRIGGER reconciliation_resolutions_no_truncate;

-- 4. Each resolution is in the audit log: the item's id in event_id, its
-- run's provider in provider.
ALTER TABLE ops_audit_log DROP CONSTRAINT ops_audit_log_action_check;
ALTER TABLE ops_audit_log ADD CONSTRAINT ops_audit_log_action_check
    CHECK (action IN ('replay', 'bulk_replay', 'discard', 'sweep', 'refund_request', 'refund_failed',
                      'reconciliation_resolve'));

-- paygate_grant_app (0016) again, with the resolutions among the tables
-- the app only appends to.
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
        inbox_attempts, reconciliation_items, inbox_event_keys, reconciliation_resolutions FROM paygate_app;
    -- A run records its outcome once (its trigger refuses anything else)
    -- and is never deleted.
    REVOKE DELETE ON reconciliation_runs FROM paygate_app;
    -- Only migrate writes these; readiness reads ours.
    REVOKE INSERT, UPDATE, DELETE ON paygate_migrations, river_migration FROM paygate_app;
    -- Messages leave by whole partitions (the function below), never row
    -- by row.
    REVOKE DELETE ON messages FROM paygate_app;
    -- Partition upkeep, with the owner's rights.
    GRANT EXECUTE ON FUNCTION paygate_inbox_partition_create(date) TO paygate_app;
    GRANT EXECUTE ON FUNCTION paygate_inbox_partition_drop(text, timestamptz) TO paygate_app;
    GRANT EXECUTE ON FUNCTION paygate_message_partition_create(date) TO paygate_app;
    GRANT EXECUTE ON FUNCTION paygate_message_partition_drop(text, timestamptz) TO paygate_app;
END;
$$;
