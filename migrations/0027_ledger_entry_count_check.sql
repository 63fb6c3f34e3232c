-- A ledger transaction's entries were checked at commit once per header
-- and once more per entry (0002, ledger_entries_balanced): the same three
-- lookups two or three times over, in a PL/pgSQL call each, for every
-- transaction applying posts. The entries' run was there for one case the
-- header's does not see: entries added to a transaction committed earlier.
-- That case is now refused by the statement that adds them, once per
-- statement: no insert may take a transaction past the number of entries it
-- was posted with. A committed transaction has exactly that many (the
-- header's check at commit, kept), so nothing can be added to it, balanced
-- or not; and within the transaction that posts it, the header's check at
-- commit still refuses too few entries, or entries that do not balance.
CREATE FUNCTION ledger_entries_check_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT t.ref, t.entry_count, c.actual INTO bad
    FROM (SELECT DISTINCT transaction_id FROM added) n
    JOIN ledger_transactions t ON t.id = n.transaction_id
    CROSS JOIN LATERAL (SELECT count(*) AS actual FROM ledger_entries e WHERE e.transaction_id = n.transaction_id) c
    WHERE c.actual > t.entry_count
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % has % entries, posted with %', bad.ref, bad.actual, bad.entry_count
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transaction_entries';
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER ledger_entries_balanced ON ledger_entries;
CREATE TRIGGER ledger_entries_within_count
    AFTER INSERT ON ledger_entries
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_check_count();
-- Fired for the owner in replica mode too, as the checks it replaces were.
ALTER TABLE ledger_entries ENABLE ALWAYS TRIGGER ledger_entries_within_count;
