package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

// reconcileEnv points the command at a fresh database and a simulator and
// returns the database URL. Tests using it set the environment, so they
// are not parallel.
func reconcileEnv(t *testing.T, sim *stripesim.Sim, key string) string {
	t.Helper()
	_, url := testdb.NewWithURL(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("PAYGATE_STRIPE_API_URL", sim.Start(t).URL)
	t.Setenv("PAYGATE_STRIPE_API_KEY", key)
	return url
}

func runReconcile(t *testing.T, args ...string) (stdout, progress string, err error) {
	t.Helper()
	var out, errOut, prog bytes.Buffer
	old := progressOut
	progressOut = &prog
	defer func() { progressOut = old }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = run(ctx, append([]string{"reconcile"}, args...), &out, &errOut)
	return out.String(), prog.String(), err
}

func TestReconcileCommandArguments(t *testing.T) {
	sim := stripesim.New(stripesim.Config{Seed: 1})
	reconcileEnv(t, sim, sim.APIKey())
	var ue usageError

	_, _, err := runReconcile(t)
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, "--date YYYY-MM-DD is required")

	_, _, err = runReconcile(t, "--date", "2025-02-30")
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, "invalid date")

	_, _, err = runReconcile(t, "--date", time.Now().UTC().AddDate(0, 0, 2).Format(time.DateOnly))
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, "future")

	_, _, err = runReconcile(t, "--date", "2025-03-14", "extra")
	require.ErrorAs(t, err, &ue)

	t.Setenv("PAYGATE_STRIPE_API_KEY", "")
	_, _, err = runReconcile(t, "--date", "2025-03-14")
	require.ErrorIs(t, err, stripe.ErrNoAPIKey)
	require.ErrorContains(t, err, "PAYGATE_STRIPE_API_KEY is not set")
}

// TestReconcileCommandRecoversAndReports: with no server running and no
// webhook ever delivered, the command recovers the day's events, applies
// them with its own event workers, matches, posts the fees, and prints the
// summary; mismatches still exit 0.
func TestReconcileCommandRecoversAndReports(t *testing.T) {
	day := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	sim := stripesim.New(stripesim.Config{Seed: 5, Now: day.Add(8 * time.Hour)})
	p := sim.Pay(stripesim.PayOpts{Amount: 12345})
	tampered := sim.Pay(stripesim.PayOpts{Amount: 5000})
	sim.TamperBalanceTransaction(tampered.BalanceTransactionID, 5100)
	url := reconcileEnv(t, sim, sim.APIKey())

	out, progress, err := runReconcile(t, "--date", "2025-03-14")
	require.NoError(t, err, out)
	for _, want := range []string{
		"Reconciliation run 1 of 2025-03-14 (UTC): completed",
		"Recovered events: 4 of 4 listed by the provider (4 processed before matching, 0 still pending)",
		"matched  1", "amount_mismatch  1", "fee_posted  2", "missing_in_ledger  0",
		"usd    charge          174.45          5.63        168.82        173.45        5.63      167.82        1.00",
		"amount_mismatch  " + tampered.BalanceTransactionID,
		"GET /v1/reconciliation/runs/1",
	} {
		require.Contains(t, out, want)
	}
	require.Contains(t, progress, "listing the provider's balance transactions of 2025-03-14")
	require.Contains(t, progress, "recovered 4 missed events")

	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	tx, err := ledger.TransactionByRef(context.Background(), pool, "stripe:charge:"+p.ChargeID+":capture")
	require.NoError(t, err)
	require.Equal(t, "123.45", ledger.Format(tx.Amount(), "usd"))

	// A provider that refuses the key: the run fails and the command says so.
	t.Setenv("PAYGATE_STRIPE_API_KEY", "sk_test_not_the_key")
	out, _, err = runReconcile(t, "--date", "2025-03-14")
	require.Error(t, err)
	require.True(t, errors.Is(err, reconcile.ErrProvider), "%v", err)
	require.Contains(t, out, "Reconciliation run 2 of 2025-03-14 (UTC): failed")
	require.Contains(t, out, "Invalid API Key")
}

func TestReconcileWorkersConfiguration(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	noClient := func() *jobs.Client { return nil }

	_, err := reconcileWorkers(config{ReconcileAt: "0 25 * * *", StripeAPIKey: "sk_test_x"}, nil, logger, noClient)
	require.ErrorIs(t, err, jobs.ErrInvalidCron)
	require.ErrorContains(t, err, "PAYGATE_RECONCILE_AT")

	hook, err := reconcileWorkers(config{ReconcileAt: "0 2 * * *", StripeAPIKey: "sk_test_x"}, nil, logger, noClient)
	require.NoError(t, err)
	require.Len(t, hook(river.NewWorkers()), 1, "the daily job")

	hook, err = reconcileWorkers(config{ReconcileAt: "0 2 * * *"}, nil, logger, noClient)
	require.NoError(t, err)
	require.Empty(t, hook(river.NewWorkers()), "no key: no daily job, the worker only")
}
