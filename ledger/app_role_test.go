package ledger_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
)

func requirePermissionDenied(t *testing.T, err error, stmt string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: want permission denied, got %v", stmt, err)
	require.Equal(t, "42501", pgErr.Code, "%s: %s", stmt, pgErr.Message)
}

// TestAppRoleCannotRewriteTheLedger: paygate_app, the role `paygate serve`
// runs as, posts and reads the ledger but holds no privilege to change it,
// nor to get around the triggers (replica mode, disabling them). The
// refusals are permission errors, before any trigger is consulted.
//
// The connection takes the role with SET ROLE, so that the test works
// whatever the server's authentication for other users; a real deployment
// logs in as paygate_app and has no role to go back to.
func TestAppRoleCannotRewriteTheLedger(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, url := testdb.NewWithURL(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SET ROLE paygate_app`)
	require.NoError(t, err)

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := ledger.PostTx(ctx, tx, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), t0))
		return err
	})
	require.NoError(t, err, "the app posts")
	stored, err := ledger.TransactionByRef(ctx, conn, "capture:ch_1")
	require.NoError(t, err, "and reads")
	require.Equal(t, "10.00", ledger.Format(stored.Amount(), "usd"))
	tb, err := ledger.TrialBalance(ctx, conn)
	require.NoError(t, err)
	require.True(t, tb.Currencies[0].Balanced)

	for _, stmt := range []string{
		`UPDATE ledger_transactions SET event_id = 'evt_forged'`,
		`UPDATE ledger_entries SET debit = debit * 2 WHERE debit > 0`,
		`DELETE FROM ledger_entries`,
		`DELETE FROM ledger_transactions WHERE false`,
		`TRUNCATE ledger_entries`,
		`TRUNCATE ledger_transactions CASCADE`,
		`UPDATE ops_audit_log SET actor = 'someone else'`,
		`DELETE FROM ops_audit_log`,
		`TRUNCATE ops_audit_log`,
		`SET session_replication_role = replica`,
		`ALTER TABLE ledger_entries DISABLE TRIGGER ALL`,
		`ALTER TABLE ledger_entries DISABLE TRIGGER ledger_entries_append_only`,
		`ALTER TABLE ledger_transactions DISABLE TRIGGER ledger_transactions_balanced`,
		`DROP TRIGGER ledger_entries_append_only ON ledger_entries`,
		`CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$`,
		`ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_amount_check`,
	} {
		_, err := conn.Exec(ctx, stmt)
		requirePermissionDenied(t, err, stmt)
	}

	stored, err = ledger.TransactionByRef(ctx, conn, "capture:ch_1")
	require.NoError(t, err)
	require.Equal(t, "evt_1", stored.EventID)
	require.Equal(t, "10.00", ledger.Format(stored.Amount(), "usd"))
}
