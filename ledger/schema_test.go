package ledger_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/ledger"
)

// These tests bypass package ledger on purpose: they prove the database
// itself refuses what Go would, for whoever holds a psql prompt.

func requirePgError(t *testing.T, err error, code, constraint string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want PostgreSQL error %s %s, got %v", code, constraint, err)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
	require.Equal(t, constraint, pgErr.ConstraintName, pgErr.Message)
}

const insertHeader = `INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, entry_count)
	VALUES ($1, 'adjustment', 'usd', now(), 2) RETURNING id`

// rawCommit inserts a usd header posted with two entries, runs stmts with
// its id as $1 (each must succeed), and returns the commit's error: the
// deferred trigger speaks only there.
func (b *testBundle) rawCommit(t *testing.T, ref string, stmts ...string) error {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck // after Commit it is a no-op
	var id int64
	require.NoError(t, tx.QueryRow(b.ctx, insertHeader, ref).Scan(&id))
	for _, s := range stmts {
		_, err := tx.Exec(b.ctx, s, id)
		require.NoError(t, err, "deferred: the statement itself passes: %s", s)
	}
	return tx.Commit(b.ctx)
}

func TestSchemaRefusesUnbalancedOrEmptyAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)

	err := b.rawCommit(t, "raw:unbalanced",
		`INSERT INTO ledger_entries (transaction_id, account, currency, debit) VALUES ($1, 'bank', 'usd', 100.00)`,
		`INSERT INTO ledger_entries (transaction_id, account, currency, credit) VALUES ($1, 'sales', 'usd', 99.99)`)
	requirePgError(t, err, "23514", "ledger_transaction_balanced")
	require.ErrorContains(t, err, "does not balance in usd")

	err = b.rawCommit(t, "raw:empty")
	requirePgError(t, err, "23514", "ledger_transaction_entries")
	require.ErrorContains(t, err, "has no entries")

	// Unbalanced between two statements is fine (that is why the check is
	// deferred); only the state at commit counts.
	err = b.rawCommit(t, "raw:balanced",
		`INSERT INTO ledger_entries (transaction_id, account, currency, debit) VALUES ($1, 'bank', 'usd', 100.00)`,
		`INSERT INTO ledger_entries (transaction_id, account, currency, credit) VALUES ($1, 'sales', 'usd', 100)`)
	require.NoError(t, err)

	require.Equal(t, 1, b.count(t, "ledger_transactions"))
	require.Equal(t, 2, b.count(t, "ledger_entries"))
}

func TestSchemaRefusesEntriesAddedLater(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), t0))

	// Even a balanced pair: a posted transaction never changes. Refused
	// by the statement that adds them, whole.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	_, err = tx.Exec(b.ctx, `INSERT INTO ledger_entries (transaction_id, account, currency, debit, credit)
		SELECT id, a, 'usd', dr, cr FROM ledger_transactions,
		  (VALUES ('provider_balance', 5.00, 0), ('sales', 0, 5.00)) AS v(a, dr, cr)
		WHERE ref = 'capture:ch_1'`)
	requirePgError(t, err, "23514", "ledger_transaction_entries")
	require.ErrorContains(t, err, "has 4 entries, posted with 2")
	require.NoError(t, tx.Rollback(b.ctx))

	// One at a time, in a transaction of their own each, or in the
	// transaction that posts another: refused alike.
	_, err = b.pool.Exec(b.ctx, `INSERT INTO ledger_entries (transaction_id, account, currency, debit)
		SELECT id, 'fees', 'usd', 0.01 FROM ledger_transactions WHERE ref = 'capture:ch_1'`)
	requirePgError(t, err, "23514", "ledger_transaction_entries")
	err = b.rawCommit(t, "raw:other",
		`INSERT INTO ledger_entries (transaction_id, account, currency, debit) VALUES ($1, 'bank', 'usd', 1.00)`,
		`INSERT INTO ledger_entries (transaction_id, account, currency, credit) VALUES ($1, 'sales', 'usd', 1.00)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO ledger_entries (transaction_id, account, currency, debit)
		SELECT id, 'bank', 'usd', 1.00 FROM ledger_transactions WHERE ref = 'raw:other'`)
	requirePgError(t, err, "23514", "ledger_transaction_entries")

	// Too many in the transaction that posts it: refused at once too.
	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var id int64
	require.NoError(t, tx.QueryRow(b.ctx, insertHeader, "raw:three").Scan(&id))
	_, err = tx.Exec(b.ctx, `INSERT INTO ledger_entries (transaction_id, account, currency, debit, credit)
		VALUES ($1, 'bank', 'usd', 1.00, 0), ($1, 'sales', 'usd', 0, 0.50), ($1, 'sales', 'usd', 0, 0.50)`, id)
	requirePgError(t, err, "23514", "ledger_transaction_entries")
	require.NoError(t, tx.Rollback(b.ctx))

	// An entry in another currency than its transaction's: refused at once.
	_, err = b.pool.Exec(b.ctx, `INSERT INTO ledger_entries (transaction_id, account, currency, debit)
		SELECT id, 'fees', 'eur', 1 FROM ledger_transactions WHERE ref = 'capture:ch_1'`)
	requirePgError(t, err, "23503", "ledger_entries_transaction_fkey")

	require.Equal(t, 4, b.count(t, "ledger_entries"), "capture:ch_1's two and raw:other's two")
}

func TestSchemaChecks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), t0))

	header := func(ref, kind, currency string) string {
		return `INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, entry_count) VALUES ('` +
			ref + `', '` + kind + `', '` + currency + `', now(), 2)`
	}
	entry := func(account, debit, credit string) string {
		return `INSERT INTO ledger_entries (transaction_id, account, currency, debit, credit)
			SELECT id, '` + account + `', 'usd', ` + debit + `, ` + credit + ` FROM ledger_transactions WHERE ref = 'capture:ch_1'`
	}
	for _, tc := range []struct {
		sql, code, constraint string
	}{
		{header("capture:ch_1", "capture", "usd"), "23505", "ledger_transactions_ref_key"},
		{header("x", "chargeback", "usd"), "23514", "ledger_transactions_kind_check"},
		{header("x", "capture", "USD"), "23514", "ledger_transactions_currency_check"},
		{header(" ", "capture", "usd"), "23514", "ledger_transactions_ref_check"},
		{`INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, entry_count) VALUES ('x', 'fee', 'usd', now(), 0)`,
			"23514", "ledger_transactions_entry_count_check"},
		{entry("cash", "1", "0"), "23514", "ledger_entries_account_check"},
		{entry("fees", "1", "1"), "23514", "ledger_entries_amount_check"},
		{entry("fees", "0", "0"), "23514", "ledger_entries_amount_check"},
		{entry("fees", "-1", "0"), "23514", "ledger_entries_amount_check"},
		{entry("fees", "0", "-1"), "23514", "ledger_entries_amount_check"},
		{entry("fees", "2", "-1"), "23514", "ledger_entries_amount_check"},
	} {
		_, err := b.pool.Exec(b.ctx, tc.sql)
		requirePgError(t, err, tc.code, tc.constraint)
	}
}

func TestSchemaIsAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), t0))

	for _, stmt := range []string{
		`UPDATE ledger_transactions SET event_id = 'evt_forged'`,
		`UPDATE ledger_transactions SET occurred_at = now() WHERE false`, // refused even when it matches nothing
		`UPDATE ledger_entries SET debit = debit * 2 WHERE debit > 0`,
		`UPDATE ledger_entries SET credit = 0 WHERE false`,
		`DELETE FROM ledger_entries`,
		`DELETE FROM ledger_entries WHERE false`,
		`DELETE FROM ledger_transactions`,
		`TRUNCATE ledger_entries`,
		`TRUNCATE ledger_transactions CASCADE`,
		`TRUNCATE ledger_entries, ledger_transactions`,
	} {
		_, err := b.pool.Exec(b.ctx, stmt)
		requirePgError(t, err, "23000", "ledger_append_only")
		require.ErrorContains(t, err, "append-only", stmt)
	}

	stored, err := ledger.TransactionByRef(b.ctx, b.pool, "capture:ch_1")
	require.NoError(t, err)
	require.Equal(t, "evt_1", stored.EventID)
	require.Equal(t, "10.00", ledger.Format(stored.Amount(), "usd"))
	require.Equal(t, 1, b.count(t, "ledger_transactions"))
	require.Equal(t, 2, b.count(t, "ledger_entries"))
}
