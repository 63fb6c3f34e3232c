package jobs_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	striperef "github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

type alertBundle struct {
	world *worldtest.World
	sim   *stripesim.Sim
	api   reconcile.Provider
}

func setupAlerts(t *testing.T, email jobs.EmailConfig) *alertBundle {
	t.Helper()
	b := &alertBundle{sim: stripesim.New(stripesim.Config{Seed: 5, Now: time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)})}
	b.world = worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.Email = email
		c.Register = func(*river.Workers) []*river.PeriodicJob { return nil }
	}})
	srv := b.sim.Start(t)
	var err error
	b.api, err = striperef.NewAPI(striperef.APIConfig{APIKey: b.sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	return b
}

func (b *alertBundle) runner(provider reconcile.Provider) *reconcile.Runner {
	return reconcile.New(reconcile.Config{Pool: b.world.Pool, Provider: provider, RecoveryWait: -1,
		Alert: func(ctx context.Context, tx pgx.Tx, a reconcile.Alert) error {
			return b.world.Jobs.EnqueueReconciliationAlertTx(ctx, tx, a)
		}})
}

type alertRow struct {
	Recipient *string
	Status    string
	Reason    string
	RunStatus string
	Date      string
}

func (b *alertBundle) alerts(t *testing.T, runID int64) []alertRow {
	t.Helper()
	rows, err := b.world.Pool.Query(context.Background(), `SELECT recipient, status, coalesce(data->>'reason', ''),
		data->>'run_status', data->>'date' FROM email_outbox WHERE kind = 'reconciliation_alert' AND object_id = $1`, strconv.FormatInt(runID, 10))
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[alertRow])
	require.NoError(t, err)
	return out
}

var alertDay = time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)

// TestReconciliationAlerts: a run that completes with exceptions, and one
// that fails, each enqueue one alert to finance with the run's outcome; a
// clean run, and a failure recorded again, none.
func TestReconciliationAlerts(t *testing.T) {
	t.Parallel()
	b := setupAlerts(t, jobs.EmailConfig{OpsEmail: "ops@example.com", FinanceEmail: "finance@example.com"})
	ctx := context.Background()

	clean, err := b.runner(b.api).RunDay(ctx, alertDay, reconcile.TriggerCLI, "cli")
	require.NoError(t, err)
	require.Equal(t, reconcile.RunCompleted, clean.Status)
	require.Empty(t, b.alerts(t, clean.ID), "a run with nothing to look at alerts nobody")

	b.sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Type: stripesim.TxnAdjustment, Amount: 300})
	exceptions, err := b.runner(b.api).RunDay(ctx, alertDay, reconcile.TriggerCLI, "cli")
	require.NoError(t, err)
	require.Equal(t, reconcile.RunCompleted, exceptions.Status)
	require.Positive(t, exceptions.Report.Summary[reconcile.StatusMissingInLedger])
	got := b.alerts(t, exceptions.ID)
	require.Len(t, got, 1)
	require.Equal(t, "finance@example.com", *got[0].Recipient)
	require.Contains(t, []string{"pending", "skipped"}, got[0].Status, "enqueued (and maybe already skipped: no SMTP server here)")
	require.Equal(t, "completed", got[0].RunStatus)
	require.Equal(t, "2025-03-14", got[0].Date)
	require.Contains(t, got[0].Reason, "missing_in_ledger: ")
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'send_email'`))

	failing := b.runner(reconcile.Unavailable(striperef.Name, striperef.ErrNoAPIKey))
	failed, err := failing.RunDay(ctx, alertDay, reconcile.TriggerCLI, "cli")
	require.Error(t, err)
	require.NoError(t, failing.Fail(ctx, failed.ID, errors.New("recorded twice")))
	got = b.alerts(t, failed.ID)
	require.Len(t, got, 1, "one alert per run, whoever fails it")
	require.Equal(t, "failed", got[0].RunStatus)
	require.Contains(t, got[0].Reason, "PAYGATE_STRIPE_API_KEY")
	run, err := reconcile.GetRun(ctx, b.world.Pool, failed.ID)
	require.NoError(t, err)
	require.NotContains(t, run.Error, "recorded twice", "a finished run keeps its outcome")
}

// TestReconciliationAlertFallsBackToOps: without PAYGATE_FINANCE_EMAIL the
// alert goes to PAYGATE_OPS_EMAIL; without either it is recorded skipped.
func TestReconciliationAlertFallsBackToOps(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		email     jobs.EmailConfig
		recipient *string
		status    string
	}{
		// Enqueued for ops; the world's send_email worker (no SMTP server
		// here) may already have recorded it skipped.
		{jobs.EmailConfig{OpsEmail: "ops@example.com"}, ptr("ops@example.com"), "pending|skipped"},
		{jobs.EmailConfig{}, nil, "skipped"},
	} {
		b := setupAlerts(t, c.email)
		run, err := b.runner(reconcile.Unavailable(striperef.Name, striperef.ErrNoAPIKey)).RunDay(context.Background(), alertDay, reconcile.TriggerCLI, "cli")
		require.Error(t, err)
		got := b.alerts(t, run.ID)
		require.Len(t, got, 1)
		require.Equal(t, c.recipient, got[0].Recipient)
		require.Contains(t, strings.Split(c.status, "|"), got[0].Status)
	}
}

func ptr[T any](v T) *T { return &v }
