package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
)

// TestAttemptErrorsSurviveRiverCleanup: River deletes finished jobs (and
// their errors) after a while; the poison queue's history of every attempt
// must outlive them. An event meets an outage on both of its attempts and
// becomes poison; both attempts' errors are still listed after its job rows
// are gone.
func TestAttemptErrorsSurviveRiverCleanup(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.ProcessMaxAttempts = 2 }})
	ctx := context.Background()
	_, err := w.Pool.Exec(ctx, `
		CREATE FUNCTION fail_facts() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'simulated outage'; END $$;
		CREATE TRIGGER fail_facts BEFORE INSERT ON payment_facts FOR EACH ROW EXECUTE FUNCTION fail_facts();`)
	require.NoError(t, err)
	sim := stripesim.New(stripesim.Config{})
	bad := sim.Emit("charge.succeeded", map[string]any{
		"id": "ch_outage", "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "usd",
	})
	w.Ingest(t, bad)
	deadline := time.Now().Add(30 * time.Second)
	for w.Status(t, bad.ID) != "poison" || w.Count(t, `SELECT count(*) FROM river_job
		WHERE args->>'event_id' = $1 AND finalized_at IS NULL`, bad.ID) > 0 {
		require.False(t, time.Now().After(deadline), "event never became poison")
		_, err := w.Pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() WHERE state = 'retryable'`)
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
	}

	read := func() []jobs.AttemptError {
		t.Helper()
		got, err := jobs.AttemptErrors(ctx, w.Pool, "stripe", []string{bad.ID})
		require.NoError(t, err)
		return got[bad.ID]
	}
	before := read()
	require.Len(t, before, 2, "one error per failed attempt")
	require.Contains(t, before[0].Error, "simulated outage")
	require.Contains(t, before[1].Error, "simulated outage")

	// River's job cleaner (or an operator in River UI) deletes the job.
	_, err = w.Pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'process_event'`)
	require.NoError(t, err)
	after := read()
	require.Len(t, after, 2, "the history outlives River's job rows")
	for i := range before {
		require.Equal(t, before[i].JobID, after[i].JobID)
		require.Equal(t, before[i].Attempt, after[i].Attempt)
		require.Equal(t, before[i].Error, after[i].Error)
	}
	require.Equal(t, 1, after[0].Attempt)
	require.Equal(t, 2, after[1].Attempt)
	require.NotZero(t, after[0].JobID)
}
