package jobs

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
)

// TestSweepReadsTheReceivedOnly: a sweep (every thirty seconds, on
// whichever of the pool's connections River gives it) costs the events
// still received, not the inbox, on the statistics of an empty inbox, for
// a connection that made its plan then and keeps it. Planned on them, it
// read every event of every partition at every sweep.
func TestSweepReadsTheReceivedOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	_, err := pool.Exec(ctx, `ANALYZE inbox_events, river_job`)
	require.NoError(t, err)

	one := testdb.KeepingPlans(t, pool)
	s := newSweeper(one, Config{ProcessMaxAttempts: DefaultProcessMaxAttempts, Logger: slog.New(slog.DiscardHandler)})
	for range 10 {
		n, err := s.sweep(ctx, nil) // nothing stranded: no job to enqueue
		require.NoError(t, err)
		require.Zero(t, n)
	}

	// A month of events applied long ago, and fresh ones still received
	// (not stranded yet: within SweepAfter).
	const history, fresh = 20000, 20
	_, err = pool.Exec(ctx, `
		INSERT INTO inbox_events (provider, event_id, type, payload, status, received_at, processed_at)
		SELECT 'stripe', 'evt_old_' || i, 'payment_intent.succeeded', '{}', 'processed', now() - interval '1 day', now() - interval '1 day'
		FROM generate_series(1, $1::int) i`, history)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO inbox_events (provider, event_id, type, payload)
		SELECT 'stripe', 'evt_' || i, 'payment_intent.succeeded', '{}' FROM generate_series(1, $1::int) i`, fresh)
	require.NoError(t, err)
	n, err := s.sweep(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, n, "received within SweepAfter: not stranded")

	plan := testdb.ExplainKept(t, one, sweepStranded, "60, 1000, ARRAY['process_event', 'apply_events']")
	read := plan.RowsOf("inbox_events")
	require.Less(t, read, float64(4*fresh),
		"inbox events read to find none stranded among %d received and %d applied:\n%s", fresh, history, plan.Raw)

	// And events stranded (received two minutes ago, no job): the plan that
	// finds and marks them reads them, not the inbox.
	const stranded = 20
	_, err = pool.Exec(ctx, `
		INSERT INTO inbox_events (provider, event_id, type, payload, received_at)
		SELECT 'stripe', 'evt_stranded_' || i, 'payment_intent.succeeded', '{}', now() - interval '2 minutes'
		FROM generate_series(1, $1::int) i`, stranded)
	require.NoError(t, err)
	plan = testdb.ExplainKept(t, one, sweepStranded, "60, 1000, ARRAY['process_event', 'apply_events']")
	require.Equal(t, float64(stranded), plan.ActualRows, "each stranded event marked:\n%s", plan.Raw)
	read = plan.RowsOf("inbox_events")
	require.Less(t, read, float64(4*(fresh+stranded)),
		"inbox events read to mark %d stranded among %d received and %d applied:\n%s", stranded, fresh, history, plan.Raw)
}

// TestSweepStaysLinearInABacklog: in a backlog every received event is
// named by a live job, and the sweep looks at all of them to find none
// stranded. It reads the live jobs once and looks each event up among
// what they name; comparing every event with every job (what the plan of
// a NOT EXISTS over the jobs' arguments did) took 4 s a sweep for 28,000
// events in 1,000 jobs.
func TestSweepStaysLinearInABacklog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	const jobs, perJob = 100, 28
	_, err := pool.Exec(ctx, `
		INSERT INTO inbox_events (provider, event_id, type, payload, received_at)
		SELECT 'stripe', 'evt_' || i, 'payment_intent.succeeded', '{}', now() - interval '2 minutes'
		FROM generate_series(1, $1::int) i`, jobs*perJob)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO river_job (kind, args, state, queue, max_attempts, priority, scheduled_at)
		SELECT 'apply_events', jsonb_build_object('provider', 'stripe',
		       'event_ids', (SELECT jsonb_agg('evt_' || i) FROM generate_series(j * $2 + 1, j * $2 + $2) i)),
		       'available', 'events', 25, 1, now() + interval '1 hour'
		FROM generate_series(0, $1::int - 1) j`, jobs, perJob)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE inbox_events, river_job`)
	require.NoError(t, err)

	one := testdb.KeepingPlans(t, pool)
	s := newSweeper(one, Config{ProcessMaxAttempts: DefaultProcessMaxAttempts, Logger: slog.New(slog.DiscardHandler)})
	for range 6 {
		n, err := s.sweep(ctx, nil)
		require.NoError(t, err)
		require.Zero(t, n, "every received event has its live job")
	}
	plan := testdb.ExplainKept(t, one, sweepStranded, "60, 1000, ARRAY['process_event', 'apply_events']")
	require.Zero(t, plan.ActualRows)
	work := plan.RowsOf("river_job") + plan.JoinFilterRemoved()
	require.Less(t, work, float64(4*jobs*perJob),
		"live jobs read and compared to find none of %d events in %d jobs stranded:\n%s", jobs*perJob, jobs, plan.Raw)

	// One event whose job is gone is still found.
	_, err = pool.Exec(ctx, `DELETE FROM river_job WHERE args->'event_ids' ? 'evt_1'`)
	require.NoError(t, err)
	plan = testdb.ExplainKept(t, one, sweepStranded, "60, 1000, ARRAY['process_event', 'apply_events']")
	require.Equal(t, float64(perJob), plan.ActualRows, "the events of the job gone marked:\n%s", plan.Raw)
}
