package jobs

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
)

// TestSweepAfterAHandOffJobEnded: a hand-off job is unique by its event
// among jobs in every state River keeps, so its row, ended, still holds
// the event's unique key until River's retention deletes it (a day for a
// completed or cancelled job). An event left received by such a job (its
// job cancelled by hand in River UI) is stranded all the same, and the
// sweep gives it a job at once, not a day later; a second sweep, the job
// live, gives it none.
func TestSweepAfterAHandOffJobEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newApplyWorld(t)
	sim := stripesim.New(stripesim.Config{Seed: 17})
	for range 2 {
		sim.Pay(stripesim.PayOpts{Amount: 1500, Currency: "usd"})
	}
	keys := w.store(t, sim.Events())
	for state, end := range map[string]string{
		"completed": `UPDATE river_job SET state = 'completed', attempt = 1, attempted_at = now(), finalized_at = now() WHERE id = $1`,
		"cancelled": `UPDATE river_job SET state = 'cancelled', attempt = 1, attempted_at = now(), finalized_at = now() WHERE id = $1`,
		"discarded": `UPDATE river_job SET state = 'discarded', attempt = 5, attempted_at = now(), finalized_at = now() WHERE id = $1`,
	} {
		k := keys[0]
		keys = keys[1:]
		require.NoError(t, pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			results, err := w.rc.InsertManyTx(ctx, tx, uniqueProcessEvents([]inbox.Key{k}, 5, handOffUnique))
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, end, results[0].Job.ID)
			return err
		}), state)
		require.NoError(t, testdb.Backdate(ctx, w.pool, k.EventID, time.Now().Add(-time.Hour)), state)

		s := newSweeper(w.pool, Config{ProcessMaxAttempts: 5, Logger: slog.New(slog.DiscardHandler)})
		n, err := s.sweep(ctx, w.rc)
		require.NoError(t, err, state)
		require.Equal(t, 1, n, "the event whose hand-off job is %s gets a job", state)
		var live int
		require.NoError(t, w.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'process_event'
			AND args->>'event_id' = $1 AND state = 'available'`, k.EventID).Scan(&live), state)
		require.Equal(t, 1, live, state)

		require.NoError(t, testdb.Backdate(ctx, w.pool, k.EventID, time.Now().Add(-time.Hour)), state)
		_, err = w.pool.Exec(ctx, `UPDATE inbox_events SET requeued_at = NULL WHERE event_id = $1`, k.EventID)
		require.NoError(t, err)
		n, err = s.sweep(ctx, w.rc)
		require.NoError(t, err, state)
		require.Zero(t, n, "its job live, the event is in flight (%s)", state)
	}
}
