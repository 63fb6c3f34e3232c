package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/statemachine"
)

// TestApplyOnIngest: with the events queue paused (no job can apply
// anything), a payment's events are processed when their ingest commits:
// applied in its transaction, with their effects, and no job left behind.
func TestApplyOnIngest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := worldtest.New(t, nil)
	require.NoError(t, w.Jobs.River.QueuePause(ctx, jobs.QueueEvents, nil))
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 4200, Currency: "eur", Email: "buyer@example.com"})
	sim.Refund(p, 1200)
	w.Ingest(t, sim.Events()...)

	for _, e := range sim.Events() {
		require.Equal(t, "processed", w.Status(t, e.ID), e.ID)
	}
	require.Zero(t, w.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1`, jobs.QueueEvents), "no job: nothing left to apply")
	got, err := ledger.GetPayment(ctx, w.Pool, p.ID)
	require.NoError(t, err)
	require.Equal(t, statemachine.StatePartiallyRefunded, got.State)
	require.Positive(t, w.Count(t, `SELECT count(*) FROM email_outbox WHERE payment_id = $1`, p.ID), "its emails, through the outbox")
	require.Positive(t, w.Count(t, `SELECT count(*) FROM messages WHERE aggregate_id = $1`, p.ID), "its messages")
	tb, err := ledger.TrialBalance(ctx, w.Pool)
	require.NoError(t, err)
	require.NotEmpty(t, tb.Currencies)
	for _, c := range tb.Currencies {
		require.True(t, c.Balanced, "%+v", c)
	}
}

// TestApplyOnIngestUnderPressure: while ingest is under pressure, new
// events commit received, each batch with its apply_events job, which
// applies them.
func TestApplyOnIngestUnderPressure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.IngestPressure = func() bool { return true }
	}})
	require.NoError(t, w.Jobs.River.QueuePause(ctx, jobs.QueueEvents, nil))
	sim := stripesim.New(stripesim.Config{})
	sim.Pay(stripesim.PayOpts{Amount: 4200, Currency: "eur"})
	w.Ingest(t, sim.Events()...)
	for _, e := range sim.Events() {
		require.Equal(t, "received", w.Status(t, e.ID), e.ID)
	}
	require.Equal(t, len(sim.Events()), w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_events'`))
	require.NoError(t, w.Jobs.River.QueueResume(ctx, jobs.QueueEvents, nil))
	w.Settle(t)
	for _, e := range sim.Events() {
		require.Equal(t, "processed", w.Status(t, e.ID), e.ID)
	}
}

// TestApplyOnIngestNeverWaitsOnALockedPayment: an event whose payment
// another transaction holds is not applied on ingest: its ingest commits
// it received, with its job, instead of waiting for that transaction (here,
// one that never ends until the test ends it); once the payment is free,
// the job applies it. Nothing of the try stays: the payment is as it was.
func TestApplyOnIngestNeverWaitsOnALockedPayment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 4200, Currency: "eur"})
	w.Ingest(t, sim.Events()...)
	paid := len(sim.Events())
	sim.Refund(p, 4200)
	refund := sim.Events()[paid:]

	require.NoError(t, w.Jobs.River.QueuePause(ctx, jobs.QueueEvents, nil))
	holder, err := w.Pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck // ended below
	_, err = holder.Exec(ctx, `SELECT id FROM payments WHERE id = $1 FOR UPDATE`, p.ID)
	require.NoError(t, err)

	// Bounded only so that a regression fails instead of hanging: the
	// holder never lets go before Ingest returns.
	bound, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, e := range refund {
		_, err := w.Ingester.Ingest(bound, decodeStripe(t, e))
		require.NoError(t, err, "ingest %s while its payment is locked", e.ID)
		require.Equal(t, "received", w.Status(t, e.ID), e.ID)
	}
	require.Equal(t, len(refund), w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_events'`))
	before, err := ledger.GetPayment(ctx, w.Pool, p.ID)
	require.NoError(t, err)
	require.Equal(t, statemachine.StateSucceeded, before.State, "nothing of the try stayed")

	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, w.Jobs.River.QueueResume(ctx, jobs.QueueEvents, nil))
	w.Settle(t)
	for _, e := range refund {
		require.Equal(t, "processed", w.Status(t, e.ID), e.ID)
	}
	after, err := ledger.GetPayment(ctx, w.Pool, p.ID)
	require.NoError(t, err)
	require.Equal(t, statemachine.StateRefunded, after.State)
}

// TestApplyOnIngestTurnedOff: DeferApplying (PAYGATE_APPLY_ON_INGEST=false)
// leaves every event to its job.
func TestApplyOnIngestTurnedOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.DeferApplying = true }})
	require.NoError(t, w.Jobs.River.QueuePause(ctx, jobs.QueueEvents, nil))
	sim := stripesim.New(stripesim.Config{})
	sim.Pay(stripesim.PayOpts{Amount: 4200, Currency: "eur"})
	w.Ingest(t, sim.Events()...)
	for _, e := range sim.Events() {
		require.Equal(t, "received", w.Status(t, e.ID), e.ID)
	}
	require.NoError(t, w.Jobs.River.QueueResume(ctx, jobs.QueueEvents, nil))
	w.Settle(t)
	for _, e := range sim.Events() {
		require.Equal(t, "processed", w.Status(t, e.ID), e.ID)
	}
}

func decodeStripe(t *testing.T, e stripesim.Event) provider.Event {
	t.Helper()
	ev, err := stripe.DecodeEvent(e.Payload)
	require.NoError(t, err)
	return ev
}

// TestApplyOnIngestAlways: ApplyOnIngestAlways (PAYGATE_APPLY_ON_INGEST=
// always) applies on ingest under pressure too.
func TestApplyOnIngestAlways(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.IngestPressure = func() bool { return true }
		c.ApplyOnIngestAlways = true
	}})
	require.NoError(t, w.Jobs.River.QueuePause(ctx, jobs.QueueEvents, nil))
	sim := stripesim.New(stripesim.Config{})
	sim.Pay(stripesim.PayOpts{Amount: 4200, Currency: "eur"})
	w.Ingest(t, sim.Events()...)
	for _, e := range sim.Events() {
		require.Equal(t, "processed", w.Status(t, e.ID), e.ID)
	}
	require.Zero(t, w.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1`, jobs.QueueEvents))
}
