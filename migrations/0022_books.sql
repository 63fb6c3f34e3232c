-- Books for finance: when each transaction counts in the books (posted_at),
-- months finance closes and that never move again, and a derived snapshot
-- of the balances at every midnight (and a minute behind the latest
-- refresh), so that a trial balance as of any instant reads at most a day
-- of entries, not the whole ledger.

-- 1. posted_at. occurred_at stays the date the money moved; posted_at is
-- when the transaction counts in the books: occurred_at, unless that falls
-- in a closed period, then the first instant of the first open one.
-- Existing rows were all posted when they occurred. ALTER … TYPE … USING
-- rewrites the table once, as ALTER TABLE does, without an UPDATE: the
-- append-only guard has nothing to refuse, and no row changes meaning.
ALTER TABLE ledger_transactions ADD COLUMN posted_at timestamptz;
ALTER TABLE ledger_transactions ALTER COLUMN posted_at TYPE timestamptz USING occurred_at;
ALTER TABLE ledger_transactions ALTER COLUMN posted_at SET NOT NULL;
ALTER TABLE ledger_transactions ADD CONSTRAINT ledger_transactions_posted_at_check
    CHECK (posted_at >= occurred_at);
-- Trial balances as of an instant, period closes and journal exports read
-- by posted_at; the id lets the as-of sum join the entries from the index.
CREATE INDEX ledger_transactions_posted_at_idx ON ledger_transactions (posted_at) INCLUDE (id);

-- 2. The books: one row saying through which instant they are closed
-- (-infinity: nothing closed). Every posting locks it FOR SHARE and a close
-- FOR UPDATE, so a posting racing a close either commits before the close
-- computes its trial balance or, under READ COMMITTED, waits and reads the
-- new boundary (under REPEATABLE READ it gets a serialization failure and
-- is retried): it never lands behind a close.
CREATE TABLE ledger_books (
    id             boolean     PRIMARY KEY DEFAULT true CHECK (id),
    closed_through timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO ledger_books DEFAULT VALUES;

-- 3. Closed periods: UTC calendar months, closed in order, each with the
-- trial balance as of its end, that balance's digest, and the settings its
-- journal export is rendered with (account codes, Xero's tax rate name), so
-- that the export stays the same bytes whatever the configuration becomes.
-- Written once, never changed.
CREATE TABLE ledger_periods (
    period        text        PRIMARY KEY,
    starts_at     timestamptz NOT NULL,
    ends_at       timestamptz NOT NULL,
    closed_at     timestamptz NOT NULL DEFAULT now(),
    closed_by     text        NOT NULL,
    trial_balance jsonb       NOT NULL,
    digest        text        NOT NULL,
    export_settings jsonb     NOT NULL DEFAULT '{}',
    CONSTRAINT ledger_periods_period_check CHECK (period ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    CONSTRAINT ledger_periods_closed_by_check CHECK (btrim(closed_by) <> ''),
    CONSTRAINT ledger_periods_digest_check CHECK (digest ~ '^[0-9a-f]{64}$')
);
CREATE UNIQUE INDEX ledger_periods_ends_at_idx ON ledger_periods (ends_at);

-- A closed period's journal export, by format: its SHA-256 (hex) and size,
-- kept the first time it is read so that later reads send the digest
-- before the body. Derived from rows that can no longer change.
CREATE TABLE ledger_period_exports (
    period  text   NOT NULL REFERENCES ledger_periods (period),
    format  text   NOT NULL,
    digest  text   NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    bytes   bigint NOT NULL CHECK (bytes >= 0),
    PRIMARY KEY (period, format)
);

-- Closing a period: the row must be the next month in order (the first
-- close: a month before which nothing is posted), one that has ended, and
-- inserting it moves the books' boundary to its end in the same
-- transaction.
CREATE FUNCTION ledger_period_check_close() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    through timestamptz;
    first   timestamptz := (NEW.period || '-01')::date::timestamp AT TIME ZONE 'UTC';
    earlier timestamptz;
BEGIN
    IF NEW.starts_at <> first OR NEW.ends_at <> ((first AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC' THEN
        RAISE EXCEPTION 'period % runs from % to %, not from % to %', NEW.period,
            first, ((first AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC', NEW.starts_at, NEW.ends_at
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_period_bounds';
    END IF;
    IF NEW.ends_at > now() THEN
        RAISE EXCEPTION 'period % has not ended', NEW.period
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_period_not_ended';
    END IF;
    SELECT closed_through INTO through FROM ledger_books FOR UPDATE;
    IF through = '-infinity' THEN
        SELECT min(posted_at) INTO earlier FROM ledger_transactions;
        IF earlier < NEW.starts_at THEN
            RAISE EXCEPTION 'periods close in order: close % first', to_char(earlier AT TIME ZONE 'UTC', 'YYYY-MM')
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_period_order';
        END IF;
    ELSIF NEW.starts_at <> through THEN
        RAISE EXCEPTION 'periods close in order: the next to close is %', to_char(through AT TIME ZONE 'UTC', 'YYYY-MM')
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_period_order';
    END IF;
    RETURN NEW;
END;
$$;

CREATE FUNCTION ledger_period_closed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ledger_books SET closed_through = NEW.ends_at;
    RETURN NULL;
END;
$$;

CREATE TRIGGER ledger_periods_check_close
    BEFORE INSERT ON ledger_periods
    FOR EACH ROW EXECUTE FUNCTION ledger_period_check_close();
CREATE TRIGGER ledger_periods_closed
    AFTER INSERT ON ledger_periods
    FOR EACH ROW EXECUTE FUNCTION ledger_period_closed();

-- The books' boundary moves only with a closed period, forward, and the row
-- is never removed.
CREATE FUNCTION ledger_books_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id AND NEW.closed_through > OLD.closed_through
       AND NEW.closed_through = (SELECT max(ends_at) FROM ledger_periods) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the books move only by closing a period: % on ledger_books is refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'ledger_books_guard';
END;
$$;

CREATE TRIGGER ledger_books_guard
    BEFORE UPDATE OR DELETE ON ledger_books
    FOR EACH ROW EXECUTE FUNCTION ledger_books_guard();
CREATE TRIGGER ledger_books_no_truncate
    BEFORE TRUNCATE ON ledger_books
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_books_guard();

-- What finance closed stays closed: periods and their exports' digests are
-- written once.
CREATE FUNCTION ledger_periods_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'closed periods never change: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'ledger_periods_append_only';
END;
$$;

CREATE TRIGGER ledger_periods_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_periods
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_periods_refuse_change();
CREATE TRIGGER ledger_period_exports_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_period_exports
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_periods_refuse_change();

-- 4. The balance snapshot: each account's debits and credits in each
-- currency over every transaction posted before a cut. The cuts are every
-- UTC midnight (a daily snapshot, kept) and one more, a minute behind the
-- latest refresh (replaced by the next). Derived and rebuildable (package
-- ledger builds it, off the path that posts); a trial balance as of T
-- reads the latest good cut at or before T and adds the entries posted
-- since.
CREATE TABLE ledger_balance_snapshots (
    cut      timestamptz NOT NULL,
    account  text        NOT NULL,
    currency text        NOT NULL,
    debits   numeric     NOT NULL,
    credits  numeric     NOT NULL,
    PRIMARY KEY (cut, account, currency)
);

-- Where a cut may lack a transaction: a posting dated more than a minute
-- before it is written (a late webhook, a fee found by reconciliation, a
-- backlog) marks its earliest posted_at, in its own transaction, so whoever
-- sees the posting sees the mark. A cut after a mark is not used until the
-- builder has made it again and removed the marks it saw.
CREATE TABLE ledger_balance_stale (
    id bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL
);
CREATE INDEX ledger_balance_stale_at_idx ON ledger_balance_stale (at);

-- A row posted without posted_at (a psql session) is posted by the rule:
-- at occurred_at, or at the books' boundary when that is later.
CREATE FUNCTION ledger_transaction_posted_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT greatest(NEW.occurred_at, closed_through) INTO NEW.posted_at FROM ledger_books FOR SHARE;
    RETURN NEW;
END;
$$;

CREATE TRIGGER ledger_transactions_posted_at
    BEFORE INSERT ON ledger_transactions
    FOR EACH ROW WHEN (NEW.posted_at IS NULL)
    EXECUTE FUNCTION ledger_transaction_posted_at();

-- Once per statement: refuses any row posted in a closed period, and marks
-- the earliest of the rows dated more than a minute before they are
-- written (package ledger's snapshotLag: the two must agree). The lock on
-- the books is the one package ledger's INSERT takes already (a second FOR
-- SHARE of the same transaction costs nothing).
CREATE FUNCTION ledger_transactions_check_posted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    through timestamptz;
    bad     record;
BEGIN
    SELECT closed_through INTO through FROM ledger_books FOR SHARE;
    SELECT ref, posted_at INTO bad FROM posted WHERE posted_at < through LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % is posted at %, in a closed period (the books are closed through %)',
            bad.ref, bad.posted_at, through
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_period_closed',
                  HINT = 'post it at the first instant of the first open period';
    END IF;
    INSERT INTO ledger_balance_stale (at)
    SELECT min(posted_at) FROM posted
    WHERE posted_at < clock_timestamp() - interval '1 minute'
    HAVING count(*) > 0;
    RETURN NULL;
END;
$$;

CREATE TRIGGER ledger_transactions_check_posted
    AFTER INSERT ON ledger_transactions
    REFERENCING NEW TABLE AS posted
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_transactions_check_posted();

-- As the other guards (0008): they fire in every replication mode.
ALTER TABLE ledger_transactions ENABLE ALWAYS TRIGGER ledger_transactions_posted_at;
ALTER TABLE ledger_transactions ENABLE ALWAYS TRIGGER ledger_transactions_check_posted;
ALTER TABLE ledger_periods ENABLE ALWAYS TRIGGER ledger_periods_check_close;
ALTER TABLE ledger_periods ENABLE ALWAYS TRIGGER ledger_periods_closed;
ALTER TABLE ledger_periods ENABLE ALWAYS TRIGGER ledger_periods_append_only;
ALTER TABLE ledger_period_exports ENABLE ALWAYS TRIGGER ledger_period_exports_append_only;
ALTER TABLE ledger_books ENABLE ALWAYS TRIGGER ledger_books_guard;
ALTER TABLE ledger_books ENABLE ALWAYS TRIGGER ledger_books_no_truncate;
