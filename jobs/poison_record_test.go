package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
)

// TestPoisonIsRecordedBeforeTheJobEnds: when the database refuses to record
// that an event is poison (it went down between the failed attempt and the
// bookkeeping), the job must not end: a cancelled job would leave the event
// "received" with nothing left to work it. Found by the reliability suite's
// database restarts (internal/reliability).
func TestPoisonIsRecordedBeforeTheJobEnds(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	ctx := context.Background()
	// The inbox refuses to mark anything poison, as a database that just
	// went away would refuse everything.
	_, err := w.Pool.Exec(ctx, `
		CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'simulated outage while recording'; END $$;
		CREATE TRIGGER refuse_poison BEFORE UPDATE ON inbox_events FOR EACH ROW
		WHEN (NEW.status = 'poison') EXECUTE FUNCTION refuse_poison();`)
	require.NoError(t, err)

	sim := stripesim.New(stripesim.Config{})
	poison := sim.Emit("charge.succeeded", map[string]any{
		"id": "ch_unknown_cur", "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "zzz",
	})
	w.Ingest(t, poison)

	// The first attempt fails permanently and cannot record it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var errs int
		var state string
		// Its ingest batch's job hands it to a process_event job of its own
		// first; until then there is none.
		err := w.Pool.QueryRow(ctx,
			`SELECT coalesce(array_length(errors, 1), 0) + (CASE WHEN metadata ? 'snoozes' THEN 1 ELSE 0 END), state
			 FROM river_job WHERE kind = 'process_event' AND args->>'event_id' = $1`, poison.ID).Scan(&errs, &state)
		if !errors.Is(err, pgx.ErrNoRows) {
			require.NoError(t, err)
		}
		require.NotEqual(t, "cancelled", state, "the job ended while its event is still %q", w.Status(t, poison.ID))
		require.NotEqual(t, "discarded", state)
		if errs > 0 || state == "scheduled" {
			break
		}
		require.False(t, time.Now().After(deadline), "the job never ran")
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, "received", w.Status(t, poison.ID))

	// The database answers again: the next try records it.
	_, err = w.Pool.Exec(ctx, `DROP TRIGGER refuse_poison ON inbox_events`)
	require.NoError(t, err)
	deadline = time.Now().Add(30 * time.Second)
	for w.Status(t, poison.ID) != "poison" {
		_, err := w.Pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() WHERE state IN ('scheduled', 'retryable')`)
		require.NoError(t, err)
		require.False(t, time.Now().After(deadline), "the event never became poison")
		time.Sleep(20 * time.Millisecond)
	}
}
