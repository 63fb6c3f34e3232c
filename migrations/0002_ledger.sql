-- The ledger: append-only, double-entry. One row in ledger_transactions per
-- money movement, unique by ref (the database decides which of two racing
-- copies wins); its balanced lines in ledger_entries. Go (package ledger)
-- validates the same rules first; these constraints and triggers are the
-- backstop for anything that bypasses it, including a psql session.

CREATE TABLE ledger_transactions (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ref          text        NOT NULL,
    kind         text        NOT NULL,
    currency     text        NOT NULL,
    occurred_at  timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    payment_id   text,
    event_id     text,
    -- How many entries the transaction was posted with. It lets the commit
    -- check refuse entries appended to a transaction posted earlier, even
    -- balanced ones: a posted transaction never changes.
    entry_count  integer     NOT NULL,
    CONSTRAINT ledger_transactions_ref_key UNIQUE (ref),
    -- Target of the entries' (transaction_id, currency) foreign key, which
    -- keeps every entry in its transaction's currency.
    CONSTRAINT ledger_transactions_id_currency_key UNIQUE (id, currency),
    CONSTRAINT ledger_transactions_ref_check CHECK (btrim(ref) <> ''),
    CONSTRAINT ledger_transactions_kind_check CHECK (kind IN (
        'capture', 'refund', 'refund_reversal', 'dispute_withdrawal',
        'dispute_reinstatement', 'payout', 'payout_reversal', 'fee', 'adjustment')),
    CONSTRAINT ledger_transactions_currency_check CHECK (currency ~ '^[a-z]{3}$'),
    CONSTRAINT ledger_transactions_entry_count_check CHECK (entry_count >= 2)
);

CREATE INDEX ledger_transactions_payment_id_idx
    ON ledger_transactions (payment_id, occurred_at) WHERE payment_id IS NOT NULL;
CREATE INDEX ledger_transactions_occurred_at_idx ON ledger_transactions (occurred_at);

CREATE TABLE ledger_entries (
    id              bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transaction_id  bigint  NOT NULL,
    account         text    NOT NULL,
    currency        text    NOT NULL,
    debit           numeric NOT NULL DEFAULT 0,
    credit          numeric NOT NULL DEFAULT 0,
    CONSTRAINT ledger_entries_transaction_fkey FOREIGN KEY (transaction_id, currency)
        REFERENCES ledger_transactions (id, currency),
    CONSTRAINT ledger_entries_account_check CHECK (account IN (
        'provider_balance', 'payouts_in_transit', 'bank',
        'sales', 'refunds', 'dispute_losses', 'fees')),
    -- Direction is the side, never the sign: exactly one side is positive.
    CONSTRAINT ledger_entries_amount_check
        CHECK (debit >= 0 AND credit >= 0 AND (debit > 0) <> (credit > 0))
);

CREATE INDEX ledger_entries_transaction_id_idx ON ledger_entries (transaction_id);
-- Balances and the trial balance aggregate by account and currency; the
-- INCLUDE lets them read the index alone.
CREATE INDEX ledger_entries_account_currency_idx
    ON ledger_entries (account, currency) INCLUDE (debit, credit);

-- Append-only. Statement-level, so even an UPDATE or DELETE matching no row
-- is refused: nobody should be issuing one. Corrections are new reversing
-- transactions.
CREATE FUNCTION ledger_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation',
              CONSTRAINT = 'ledger_append_only',
              HINT = 'post a reversing transaction instead';
END;
$$;

CREATE TRIGGER ledger_transactions_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_transactions
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_entries_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- Checked at commit, when every entry of the transaction is in: the
-- transaction has exactly the entries it was posted with (so none, or
-- appended later, is refused) and balances per currency.
CREATE FUNCTION ledger_check_transaction() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    txn_id   bigint;
    txn_ref  text;
    expected integer;
    actual   integer;
    bad      record;
BEGIN
    IF TG_TABLE_NAME = 'ledger_transactions' THEN
        txn_id := NEW.id;
    ELSE
        txn_id := NEW.transaction_id;
    END IF;
    SELECT ref, entry_count INTO txn_ref, expected FROM ledger_transactions WHERE id = txn_id;
    SELECT count(*) INTO actual FROM ledger_entries WHERE transaction_id = txn_id;
    IF actual = 0 THEN
        RAISE EXCEPTION 'ledger transaction % has no entries', txn_ref
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transaction_entries';
    END IF;
    IF actual <> expected THEN
        RAISE EXCEPTION 'ledger transaction % has % entries, posted with %', txn_ref, actual, expected
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transaction_entries';
    END IF;
    SELECT currency, sum(debit) AS debits, sum(credit) AS credits INTO bad
    FROM ledger_entries WHERE transaction_id = txn_id
    GROUP BY currency HAVING sum(debit) <> sum(credit)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % does not balance in %: debits %, credits %',
            txn_ref, bad.currency, bad.debits, bad.credits
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transaction_balanced';
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER ledger_transactions_balanced
    AFTER INSERT ON ledger_transactions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_check_transaction();
CREATE CONSTRAINT TRIGGER ledger_entries_balanced
    AFTER INSERT ON ledger_entries
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_check_transaction();
