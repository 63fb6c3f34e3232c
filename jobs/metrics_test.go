package jobs_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

// TestQueueCollectorReportsIdleQueuesAtZero: every queue the server runs
// has a depth series for each unfinished state even when it holds no job,
// so a dashboard or an alert over paygate_river_jobs reads 0 on an idle
// queue, not "no data"; a queue only the table knows is reported too.
func TestQueueCollectorReportsIdleQueuesAtZero(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	_, err := pool.Exec(context.Background(), `INSERT INTO river_job (kind, queue, state, args, max_attempts)
		VALUES ('k', 'other', 'available', '{}', 1), ('k', 'email', 'retryable', '{}', 1)`)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(jobs.NewQueueCollector(pool, "events", "email"))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	depth := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "paygate_river_jobs" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			depth[labels["queue"]+"/"+labels["state"]] = m.GetGauge().GetValue()
		}
	}
	for _, q := range []string{"events", "email"} {
		for _, s := range []string{"available", "running", "retryable", "scheduled", "pending"} {
			require.Contains(t, depth, q+"/"+s)
		}
	}
	require.Equal(t, 0.0, depth["events/available"])
	require.Equal(t, 1.0, depth["email/retryable"])
	require.Equal(t, 1.0, depth["other/available"])
	require.NotContains(t, depth, "other/running", "a queue the server does not run shows only what it holds")
}
