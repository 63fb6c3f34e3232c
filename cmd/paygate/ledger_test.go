package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
)

// TestLedgerCLI drives `paygate ledger` against a real database, as finance
// on the box would. (Not parallel: it sets the environment.)
func TestLedgerCLI(t *testing.T) {
	pool, url := testdb.NewWithURL(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("PAYGATE_GL_ACCOUNTS", "sales=4000")
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ledger.PostTx(ctx, tx, ledger.NewCapture("stripe:capture:ch_1", "pi_1", "evt_1", "usd",
			decimal.RequireFromString("12.00"), time.Date(2026, 2, 3, 9, 0, 0, 0, time.UTC)))
		return err
	}))
	paygate := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"ledger"}, args...), &out, &errOut)
		return out.String(), err
	}

	out, err := paygate("snapshots")
	require.NoError(t, err)
	require.Contains(t, out, "balance snapshot:")
	require.Regexp(t, `balance snapshot: [1-9][0-9]* cuts built in .*, everything posted before [0-9]{4}-[0-9]{2}-[0-9]{2}T`, out)

	out, err = paygate("export", "--from", "2026-02-01", "--to", "2026-02-28", "--format", "quickbooks")
	require.NoError(t, err)
	require.Equal(t, "Journal No,Journal Date,Account Name,Debits,Credits,Description\n"+
		"PG-20260203-USD,02/03/2026,provider_balance,12.00,,paygate usd 2026-02-03\n"+
		"PG-20260203-USD,02/03/2026,4000,,12.00,paygate usd 2026-02-03\n", out)

	out, err = paygate("close", "2026-02")
	require.NoError(t, err)
	require.Contains(t, out, "2026-02 closed at ")
	require.Contains(t, out, "by cli:")
	require.Contains(t, out, "usd debits 12.00 credits 12.00")
	out, err = paygate("close", "2026-02")
	require.NoError(t, err)
	require.Contains(t, out, "2026-02 already closed")
	var audited int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ops_audit_log
		WHERE action = 'period_close' AND event_id = '2026-02' AND actor LIKE 'cli:%'`).Scan(&audited))
	require.Equal(t, 1, audited, "the close is audited once, under the box's user")

	_, err = paygate("close", "2026-2")
	var ue usageError
	require.ErrorAs(t, err, &ue)
	_, err = paygate("export", "--from", "2026-02-28", "--to", "2026-02-01")
	require.ErrorAs(t, err, &ue)
	_, err = paygate("export", "--from", "2026-02-01", "--to", "2026-02-28", "--format", "sage")
	require.ErrorAs(t, err, &ue)
	_, err = paygate("rebalance")
	require.ErrorAs(t, err, &ue)
}

// TestGLAccountsConfig: a malformed PAYGATE_GL_ACCOUNTS stops the start
// with the variable named; Xero's tax rate name has a default.
func TestGLAccountsConfig(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"sales", "sales=", "cash=1000", "sales=1,sales=2"} {
		_, err := loadConfig(func(k string) string { return map[string]string{"PAYGATE_GL_ACCOUNTS": v}[k] })
		require.ErrorContains(t, err, "PAYGATE_GL_ACCOUNTS: ", v)
		require.ErrorIs(t, err, ledger.ErrInvalidGLAccounts, v)
	}
	cfg, err := loadConfig(func(k string) string {
		return map[string]string{"PAYGATE_GL_ACCOUNTS": "sales=4000, fees = 6100"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, ledger.GLAccounts{ledger.AccountSales: "4000", ledger.AccountFees: "6100"}, cfg.GLAccounts)
	require.Equal(t, "Tax Exempt", cfg.XeroTaxRate)
	cfg, err = loadConfig(func(k string) string { return map[string]string{"PAYGATE_GL_XERO_TAX_RATE": "No VAT"}[k] })
	require.NoError(t, err)
	require.Equal(t, "No VAT", cfg.XeroTaxRate)
}
