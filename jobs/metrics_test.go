package jobs_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

// TestQueueCollectorReportsIdleQueuesAtZero: every queue the server runs
// has a depth series for each unfinished state even when it holds no job,
// so a dashboard or an alert over paygate_river_jobs reads 0 on an idle
// queue, not "no data"; a queue only the table knows shows what it holds.
func TestQueueCollectorReportsIdleQueuesAtZero(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	_, err := pool.Exec(context.Background(), `INSERT INTO river_job (kind, queue, state, args, max_attempts)
		VALUES ('k', 'other', 'available', '{}', 1), ('k', 'email', 'retryable', '{}', 1)`)
	require.NoError(t, err)
	want := `# HELP paygate_river_jobs River jobs not yet finished, by queue and state.
# TYPE paygate_river_jobs gauge
paygate_river_jobs{queue="email",state="available"} 0
paygate_river_jobs{queue="email",state="pending"} 0
paygate_river_jobs{queue="email",state="retryable"} 1
paygate_river_jobs{queue="email",state="running"} 0
paygate_river_jobs{queue="email",state="scheduled"} 0
paygate_river_jobs{queue="events",state="available"} 0
paygate_river_jobs{queue="events",state="pending"} 0
paygate_river_jobs{queue="events",state="retryable"} 0
paygate_river_jobs{queue="events",state="running"} 0
paygate_river_jobs{queue="events",state="scheduled"} 0
paygate_river_jobs{queue="other",state="available"} 1
`
	require.NoError(t, testutil.CollectAndCompare(jobs.NewQueueCollector(pool, "events", "email"), strings.NewReader(want), "paygate_river_jobs"))
}
