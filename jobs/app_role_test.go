package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

// TestAppRoleRunsTheWholePath: everything the server does to the database
// works as paygate_app: ingest (inbox row and job), River's client (leader
// election, fetching, completing, periodic jobs), applying events (ledger,
// payments, facts, history, email outbox), a poison event (its attempt,
// its alert), an operator's replay and discard (audit), the sweeper and the
// Idempotency-Key purge.
func TestAppRoleRunsTheWholePath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewAppRole(t)
	var who string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_user`).Scan(&who))
	require.Equal(t, "paygate_app", who)

	client, err := jobs.NewClient(pool, jobs.Config{
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond, ProcessMaxAttempts: 1,
		Email: jobs.EmailConfig{OpsEmail: "ops@example.com"},
	})
	require.NoError(t, err)
	require.NoError(t, client.River.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.River.StopAndCancel(ctx)
	})
	in := &webhook.TxIngester{Pool: pool, Enqueue: client}
	ingest := func(events ...stripesim.Event) {
		t.Helper()
		for _, e := range events {
			ev, err := stripe.DecodeEvent(e.Payload)
			require.NoError(t, err)
			_, err = in.Ingest(ctx, ev)
			require.NoError(t, err)
		}
	}
	status := func(id string) string {
		t.Helper()
		ev, err := inbox.Get(ctx, pool, "stripe", id)
		require.NoError(t, err)
		return string(ev.Status)
	}
	waitFor := func(id, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for status(id) != want {
			require.False(t, time.Now().After(deadline), "%s never became %s (is %s)", id, want, status(id))
			time.Sleep(20 * time.Millisecond)
		}
	}

	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd", Email: "buyer@example.com"})
	sim.Refund(p, 6000)
	ingest(sim.Events()...)
	for _, e := range sim.Events() {
		waitFor(e.ID, "processed")
	}
	got, err := ledger.GetPayment(ctx, pool, p.ID)
	require.NoError(t, err)
	require.Equal(t, "partially_refunded", string(got.State))
	txs, err := ledger.TransactionsForPayment(ctx, pool, p.ID)
	require.NoError(t, err)
	require.NotEmpty(t, txs)
	var emails int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM email_outbox WHERE payment_id = $1`, p.ID).Scan(&emails))
	require.Positive(t, emails)

	bad := sim.Emit("charge.succeeded", map[string]any{
		"id": "ch_zzz", "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "zzz",
	})
	ingest(bad)
	waitFor(bad.ID, "poison")
	errs, err := jobs.AttemptErrors(ctx, pool, "stripe", []string{bad.ID})
	require.NoError(t, err)
	require.NotEmpty(t, errs[bad.ID])

	op := inbox.Operation{Actor: "test", Reason: "sandbox currency"}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := client.ReplayEventTx(ctx, tx, "stripe", bad.ID, op)
		return err
	}))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := client.DiscardEventTx(ctx, tx, "stripe", bad.ID, op)
		return err
	}))
	require.Equal(t, "discarded", status(bad.ID))

	// An event whose job vanished, found by the sweeper.
	require.NoError(t, client.River.QueuePause(ctx, jobs.QueueEvents, nil))
	lost := sim.Emit("charge.succeeded", map[string]any{
		"id": "ch_lost", "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "usd",
	})
	ingest(lost)
	_, err = pool.Exec(ctx, `DELETE FROM river_job WHERE id IN (SELECT job_id FROM (`+jobs.EventJobsSQL+`) j WHERE event_id = $1)`, lost.ID)
	require.NoError(t, err)
	// The test, not the app, dates the event: as the login role.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE NONE`); err != nil {
			return err
		}
		return testdb.Backdate(ctx, tx, lost.ID, time.Now().Add(-time.Hour))
	}))
	require.NoError(t, client.River.QueueResume(ctx, jobs.QueueEvents, nil))
	_, err = client.SweepInbox(ctx) // unless the periodic sweep got there first
	require.NoError(t, err)
	waitFor(lost.ID, "processed")
	var audited int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ops_audit_log
		WHERE actor = 'sweeper' AND event_id = $1`, lost.ID).Scan(&audited))
	require.Equal(t, 1, audited)

	_, err = jobs.PurgeIdempotencyKeys(ctx, pool, time.Now())
	require.NoError(t, err)
}
