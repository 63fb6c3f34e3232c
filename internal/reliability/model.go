package reliability

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider/stripe"
)

// Model is the expected outcome of a workload: its events applied one at a
// time, in creation order, each once, by one in-process worker on a fresh
// database, with no fault at all.
type Model struct {
	World *worldtest.World
}

// NewModel prepares the model's world (a fresh database on the test
// server); Apply fills it.
func NewModel(t testing.TB) *Model {
	t.Helper()
	return &Model{World: worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.EventWorkers = 1 // jobs are worked in insertion order: creation order
		c.ProcessMaxAttempts = 3
	}})}
}

// Apply ingests the workload's waves in creation order, each settled before
// the next. It is safe to run in a goroutine (it reports by error).
func (m *Model) Apply(ctx context.Context, w *Workload) error {
	for i, wave := range w.Waves {
		for _, e := range wave {
			ev, err := stripe.DecodeEvent(e.Payload)
			if err != nil {
				return fmt.Errorf("model: decode %s: %w", e.ID, err)
			}
			if _, err := m.World.Ingester.Ingest(ctx, ev); err != nil {
				return fmt.Errorf("model: ingest %s: %w", e.ID, err)
			}
		}
		if _, err := WaitSettled(ctx, m.World.Pool, 5*time.Minute, nil); err != nil {
			return fmt.Errorf("model: wave %d: %w", i+1, err)
		}
	}
	return nil
}

// Pending counts what is not applied yet: acknowledged events still in
// status received, jobs of the events queue not finished, and (when ids is
// not nil) the events of ids missing from the inbox.
func Pending(ctx context.Context, pool *pgxpool.Pool, ids []string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM inbox_events WHERE status = 'received')
		     + (SELECT count(*) FROM river_job WHERE queue = $1 AND state IN ('available', 'running', 'retryable', 'scheduled', 'pending'))
		     + CASE WHEN $2::text[] IS NULL THEN 0 ELSE
		         (SELECT count(*) FROM unnest($2::text[]) AS want(id)
		          WHERE NOT EXISTS (SELECT 1 FROM inbox_events WHERE provider = 'stripe' AND event_id = want.id)) END`,
		jobs.QueueEvents, ids).Scan(&n)
	return n, err
}

// WaitSettled polls until Pending is zero and returns how long it took. A
// poll that fails (the database is restarting) is retried.
func WaitSettled(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration, ids []string) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last, lastErr := -1, error(nil)
	for {
		n, err := Pending(ctx, pool, ids)
		if err == nil && n == 0 {
			return time.Since(start), nil
		}
		last, lastErr = n, err
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("not settled after %s: %d pending (last error: %v)", timeout, last, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// eventIDs lists the ids of events.
func eventIDs(events []stripesim.Event) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}
