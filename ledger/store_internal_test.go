package ledger

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
)

// translate is reached only when Go's validation and the schema disagree, so
// it is fed the schema's real refusals directly.
func TestTranslateSchemaRefusals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `WITH h AS (
		INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, entry_count)
		VALUES ('x', 'adjustment', 'usd', now(), 2) RETURNING id)
		INSERT INTO ledger_entries (transaction_id, account, currency, debit, credit)
		SELECT id, a, 'usd', dr, cr FROM h, (VALUES ('bank', 2, 0), ('sales', 0, 1)) AS v(a, dr, cr)`)
	require.NoError(t, err)
	err = translate(tx.Commit(ctx))
	require.ErrorIs(t, err, ErrUnbalanced)
	require.ErrorContains(t, err, "does not balance")

	for sql, want := range map[string]error{
		`INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, entry_count) VALUES ('y', 'nope', 'usd', now(), 2)`: ErrInvalidKind,
		`INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, entry_count) VALUES ('y', 'fee', 'EUR', now(), 2)`:  ErrUnknownCurrency,
		`INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, entry_count) VALUES ('', 'fee', 'eur', now(), 2)`:   ErrInvalidTransaction,
		`INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, entry_count) VALUES ('y', 'fee', 'eur', now(), 1)`:  ErrInvalidEntries,
	} {
		_, err := pool.Exec(ctx, sql)
		require.ErrorIs(t, translate(err), want, sql)
	}

	require.NoError(t, translate(nil))
}
