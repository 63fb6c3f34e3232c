package jobs

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
)

// TestEventJobLookupsUseAnIndex: finding an event's jobs reads an index,
// never every job of the kind: river_job holds a day's finished jobs,
// which grow with the traffic. Its attempt errors go through the index of
// the jobs that failed (0014); its live jobs and the sweeper's check for
// one through River's state-led index.
func TestEventJobLookupsUseAnIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := pool.Exec(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, finalized_at, errors)
		SELECT jsonb_build_object('provider', 'stripe', 'event_id', 'evt_day_' || n), 'process_event', 10,
			'events', 'completed', now(),
			-- As River keeps them: most jobs never failed, their errors NULL.
			CASE WHEN n % 100 = 7 THEN ARRAY['{"at":"2026-12-01T00:00:00Z","attempt":1,"error":"x","trace":""}'::jsonb] END
		FROM generate_series(1, 20000) AS n`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, finalized_at)
		SELECT jsonb_build_object('provider', 'stripe', 'event_ids', jsonb_build_array('evt_batch_' || n, 'evt_batch_' || n || '_b')),
			'apply_events', 10, 'events', 'completed', now()
		FROM generate_series(1, 20000) AS n`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE river_job`)
	require.NoError(t, err)

	explain := func(sql string, args ...any) string {
		rows, err := pool.Query(ctx, `EXPLAIN `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	kind := ProcessEventArgs{}.Kind()
	errorsPlan := explain(attemptErrorsOfEvents, kind, "stripe", []string{"evt_day_7", "evt_day_70"})
	require.Contains(t, errorsPlan, "river_job_process_event_errors_idx", errorsPlan)
	// Live jobs are few: River's state-led index finds them as well.
	for name, plan := range map[string]string{
		"live jobs": explain(liveJobsOfEvent, kind, "stripe", "evt_day_7"),
		"sweep":     explain(sweepStranded, 60, 100, eventJobKinds),
	} {
		require.NotContains(t, plan, "Seq Scan on river_job", "%s:\n%s", name, plan)
		require.NotContains(t, plan, "river_job_kind", "%s:\n%s", name, plan)
	}

	got, err := AttemptErrors(ctx, pool, "stripe", []string{"evt_day_7", "evt_day_70", "evt_none"})
	require.NoError(t, err)
	require.Len(t, got, 1, "evt_day_70 never failed")
	require.Len(t, got["evt_day_7"], 1)
	require.Equal(t, "x", got["evt_day_7"][0].Error)
}
