-- Append-only by construction, not by manners.
--
-- 1. Every guard trigger fires ALWAYS. An ordinary trigger is skipped when a
--    superuser sets session_replication_role = replica; ENABLE ALWAYS makes
--    it fire in every mode, so that setting no longer switches the ledger's
--    append-only guards or its balance check off.
-- 2. paygate_app, the role `paygate serve` logs in as, owns nothing and may
--    only read and append to the append-only tables: UPDATE, DELETE and
--    TRUNCATE on them are permission errors, and since only a table's owner
--    (or a superuser) may disable a trigger or set the replication role,
--    the app cannot get around the triggers either. Migrations run as the
--    owner.

ALTER TABLE ledger_transactions ENABLE ALWAYS TRIGGER ledger_transactions_append_only;
ALTER TABLE ledger_transactions ENABLE ALWAYS TRIGGER ledger_transactions_balanced;
ALTER TABLE ledger_entries ENABLE ALWAYS TRIGGER ledger_entries_append_only;
ALTER TABLE ledger_entries ENABLE ALWAYS TRIGGER ledger_entries_balanced;
ALTER TABLE ops_audit_log ENABLE ALWAYS TRIGGER ops_audit_log_append_only;
ALTER TABLE reconciliation_runs ENABLE ALWAYS TRIGGER reconciliation_runs_guard;
ALTER TABLE reconciliation_runs ENABLE ALWAYS TRIGGER reconciliation_runs_no_truncate;
ALTER TABLE reconciliation_items ENABLE ALWAYS TRIGGER reconciliation_items_guard;
ALTER TABLE reconciliation_items ENABLE ALWAYS TRIGGER reconciliation_items_no_truncate;

-- paygate_grant_app() creates the role when the cluster has none (roles are
-- cluster-wide; every database of the cluster shares it) and grants it
-- what serve needs in this database. `paygate migrate` calls it after every
-- migration, River's included, so tables created later (ours or River's)
-- are covered without a migration of their own; it is idempotent, and runs
-- in one transaction, so nobody ever sees the grants half done.
--
-- The role logs in without a password: with trust authentication (a
-- development machine) nothing more is needed; elsewhere, give it one
-- (ALTER ROLE paygate_app PASSWORD '…') or a certificate.
--
-- A new append-only table means a new migration replacing this function
-- with the table added to the REVOKE below.
CREATE FUNCTION paygate_grant_app() RETURNS void
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
        inbox_attempts, reconciliation_items FROM paygate_app;
    -- A run records its outcome once (its trigger refuses anything else)
    -- and is never deleted.
    REVOKE DELETE ON reconciliation_runs FROM paygate_app;
    -- Only migrate writes these; readiness reads ours.
    REVOKE INSERT, UPDATE, DELETE ON paygate_migrations, river_migration FROM paygate_app;
END;
$$;

REVOKE ALL ON FUNCTION paygate_grant_app() FROM PUBLIC;
