package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

// TestIngestBatchHasOneJob: the events of one ingest transaction commit
// with one apply_events job naming them all, and no job each. Applied, the
// good ones are processed by it; the impossible one is handed to a
// process_event job of its own, which makes it poison at once and keeps
// its error; the batch's job completes.
func TestIngestBatchHasOneJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "usd"})
	events := sim.Events()
	impossible := sim.Emit("refund.updated", map[string]any{
		"id": "re_eur", "object": "refund", "amount": 5, "currency": "eur", "status": "succeeded", "payment_intent": p.ID,
	})
	events = append(events, impossible)
	decoded := make([]webhook.Event, len(events))
	for i, e := range events {
		ev, err := stripe.DecodeEvent(e.Payload)
		require.NoError(t, err)
		decoded[i] = ev
	}

	require.NoError(t, w.Jobs.River.QueuePause(ctx, jobs.QueueEvents, nil))
	dups, err := w.Ingester.IngestAll(ctx, decoded)
	require.NoError(t, err)
	require.Equal(t, make([]bool, len(events)), dups)
	require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_events'`))
	require.Zero(t, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_event'`))
	require.Equal(t, len(events), w.Count(t, `SELECT count(*) FROM (`+jobs.EventJobsSQL+`) j`), "the job names every event")
	require.NoError(t, w.Jobs.River.QueueResume(ctx, jobs.QueueEvents, nil))
	w.Settle(t)

	for _, e := range events[:len(events)-1] {
		require.Equal(t, "processed", w.Status(t, e.ID), e.ID)
	}
	require.Equal(t, "poison", w.Status(t, impossible.ID))
	require.Equal(t, 1, w.Count(t, `SELECT attempts FROM inbox_events WHERE event_id = $1`, impossible.ID))
	require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_event'
		AND args->>'event_id' = $1 AND state = 'cancelled' AND errors IS NOT NULL`, impossible.ID), "its own job, with its error")
	require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_event'`), "no job for the others")
	require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_events' AND state = 'completed'`))
}
