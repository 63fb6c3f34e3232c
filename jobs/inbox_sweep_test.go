package jobs_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

// sweepBundle is a database with an insert-only client: events are
// ingested as the webhook handler does, and nothing works their jobs until
// a test says so.
type sweepBundle struct {
	ctx      context.Context
	pool     *pgxpool.Pool
	registry *prometheus.Registry
	jobs     *jobs.Client
	sim      *stripesim.Sim
}

func setupSweep(t *testing.T) *sweepBundle {
	t.Helper()
	pool := testdb.New(t)
	reg := prometheus.NewRegistry()
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true, Registerer: reg})
	require.NoError(t, err)
	return &sweepBundle{ctx: context.Background(), pool: pool, registry: reg, jobs: jc, sim: stripesim.New(stripesim.Config{})}
}

func (b *sweepBundle) ingest(t *testing.T, events ...stripesim.Event) {
	t.Helper()
	in := &webhook.TxIngester{Pool: b.pool, Enqueue: b.jobs}
	for _, e := range events {
		ev, err := stripe.DecodeEvent(e.Payload)
		require.NoError(t, err)
		_, err = in.Ingest(b.ctx, ev)
		require.NoError(t, err)
	}
}

func (b *sweepBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, sql, args...)
	require.NoError(t, err)
}

func (b *sweepBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

// text is one text a query gives ("" for NULL): what a failure shows.
func (b *sweepBundle) text(t *testing.T, sql string) string {
	t.Helper()
	var s *string
	require.NoError(t, b.pool.QueryRow(b.ctx, sql).Scan(&s))
	if s == nil {
		return ""
	}
	return *s
}

// jobsOf counts the jobs that name an event (its ingest batch's
// apply_events job, process_event jobs), live or not.
func (b *sweepBundle) jobsOf(t *testing.T, eventID string) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM (`+jobs.EventJobsSQL+`) j WHERE event_id = $1`, eventID)
}

// eventJobs is a WHERE clause for the jobs that name the event $1.
const eventJobs = ` WHERE id IN (SELECT job_id FROM (` + jobs.EventJobsSQL + `) j WHERE event_id = $1)`

// strand deletes an event's jobs (as River UI's delete, or River's
// retention, would) and dates its arrival ago.
func (b *sweepBundle) strand(t *testing.T, eventID string, ago time.Duration) {
	t.Helper()
	b.exec(t, `DELETE FROM river_job`+eventJobs, eventID)
	require.NoError(t, testdb.Backdate(b.ctx, b.pool, eventID, time.Now().Add(-ago)))
}

func (b *sweepBundle) status(t *testing.T, eventID string) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM inbox_events WHERE event_id = $1`, eventID).Scan(&s))
	return s
}

// counter reads a counter from reg; absent counts as -1.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			var sum float64
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return -1
}

// TestSweepRecoversEventsWhoseJobVanished is invariant 7: events
// acknowledged long ago whose process_event jobs were deleted are found by
// the sweeper when the server starts, re-enqueued and applied, with an
// audit entry and the metric each; an event received a moment ago is left
// to its own job's fate for now.
func TestSweepRecoversEventsWhoseJobVanished(t *testing.T) {
	t.Parallel()
	b := setupSweep(t)
	b.sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd"})
	stranded := b.sim.Events()
	b.ingest(t, stranded...)
	for _, e := range stranded {
		b.strand(t, e.ID, 2*time.Minute)
	}
	young := b.sim.Emit("charge.succeeded", map[string]any{
		"id": "ch_young", "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "usd",
	})
	b.ingest(t, young)
	b.strand(t, young.ID, 0)

	reg := prometheus.NewRegistry()
	server, err := jobs.NewClient(b.pool, jobs.Config{
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond, Registerer: reg,
	})
	require.NoError(t, err)
	require.NoError(t, server.River.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = server.River.StopAndCancel(ctx)
	})

	deadline := time.Now().Add(60 * time.Second)
	for b.count(t, `SELECT count(*) FROM inbox_events WHERE status = 'processed'`) < len(stranded) {
		require.False(t, time.Now().After(deadline), "stranded events never applied: %d of %d; jobs: %s; attempts: %s",
			b.count(t, `SELECT count(*) FROM inbox_events WHERE status = 'processed'`), len(stranded),
			b.text(t, `SELECT string_agg(kind || ' ' || state || ' attempt ' || attempt || ' ' || coalesce(errors::text, ''), '; ' ORDER BY id) FROM river_job`),
			b.text(t, `SELECT string_agg(event_id || ' ' || error, '; ' ORDER BY id) FROM inbox_attempts`))
		time.Sleep(20 * time.Millisecond)
	}
	for _, e := range stranded {
		require.Equal(t, "processed", b.status(t, e.ID), e.ID)
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM ops_audit_log
			WHERE actor = 'sweeper' AND action = 'sweep' AND provider = 'stripe' AND event_id = $1`, e.ID), e.ID)
	}
	require.Equal(t, "received", b.status(t, young.ID), "received a moment ago: not stranded yet")
	require.Zero(t, b.jobsOf(t, young.ID))
	require.Equal(t, float64(len(stranded)), counter(t, reg, "paygate_inbox_swept_total"))
}

// TestSweepLeavesLiveJobsAlone: an event with a job River will still work
// (however long it takes) is in flight, not stranded; one whose job ended
// while the event is still received gets a new job, once.
func TestSweepLeavesLiveJobsAlone(t *testing.T) {
	t.Parallel()
	b := setupSweep(t)
	setState := map[string]string{
		"available": `UPDATE river_job SET state = 'available'`,
		"pending":   `UPDATE river_job SET state = 'pending'`,
		"retryable": `UPDATE river_job SET state = 'retryable', attempt = 1, attempted_at = now(), scheduled_at = now() + interval '1 hour'`,
		"running":   `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '1 hour'`,
		"scheduled": `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 day'`,
		"completed": `UPDATE river_job SET state = 'completed', attempt = 1, attempted_at = now(), finalized_at = now()`,
		"cancelled": `UPDATE river_job SET state = 'cancelled', attempt = 1, attempted_at = now(), finalized_at = now()`,
		"discarded": `UPDATE river_job SET state = 'discarded', attempt = 1, attempted_at = now(), finalized_at = now()`,
	}
	live := map[string]bool{"available": true, "pending": true, "retryable": true, "running": true, "scheduled": true}
	ids := map[string]string{}
	for state, update := range setState {
		e := b.sim.Emit("charge.succeeded", map[string]any{
			"id": "ch_" + state, "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "usd",
		})
		b.ingest(t, e)
		b.exec(t, update+eventJobs, e.ID)
		require.NoError(t, testdb.Backdate(b.ctx, b.pool, e.ID, time.Now().Add(-time.Hour)))
		ids[state] = e.ID
	}

	n, err := b.jobs.SweepInbox(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the three events whose job ended")
	for state, id := range ids {
		if live[state] {
			require.Equal(t, 1, b.jobsOf(t, id), "a %s job is left to finish", state)
			require.Zero(t, b.count(t, `SELECT count(*) FROM ops_audit_log WHERE event_id = $1`, id), state)
			continue
		}
		require.Equal(t, 2, b.jobsOf(t, id), "a %s job is followed by a new one", state)
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_event'
			AND args->>'event_id' = $1 AND state = 'available'`, id), state)
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM ops_audit_log WHERE actor = 'sweeper'
			AND action = 'sweep' AND provider = 'stripe' AND event_id = $1 AND reason <> ''`, id), state)
	}
	require.Equal(t, float64(3), counter(t, b.registry, "paygate_inbox_swept_total"))

	n, err = b.jobs.SweepInbox(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a second sweep finds every event in flight")
	require.Equal(t, float64(3), counter(t, b.registry, "paygate_inbox_swept_total"))

	// A live process_event job (the sweep's own, above) keeps its event in
	// flight too, however long ago the event was requeued.
	b.exec(t, `UPDATE inbox_events SET requeued_at = now() - interval '1 hour' WHERE requeued_at IS NOT NULL`)
	n, err = b.jobs.SweepInbox(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, b.count(t, `SELECT count(*) FROM inbox_events WHERE requeued_at > now() - interval '1 minute'`),
		"an event with a live process_event job marked requeued")
}

// TestSweepWaitsAMinute: an event is stranded only a minute after it
// arrived and a minute after it was last requeued (a replay, a sweep);
// events in any other status than received are never swept.
func TestSweepWaitsAMinute(t *testing.T) {
	t.Parallel()
	b := setupSweep(t)
	emit := func(id string) string {
		e := b.sim.Emit("charge.succeeded", map[string]any{
			"id": id, "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "usd",
		})
		b.ingest(t, e)
		return e.ID
	}
	fresh := emit("ch_fresh")
	b.strand(t, fresh, 50*time.Second)
	replayed := emit("ch_replayed")
	b.strand(t, replayed, time.Hour)
	b.exec(t, `UPDATE inbox_events SET requeued_at = now() - interval '50 seconds' WHERE event_id = $1`, replayed)
	old := emit("ch_old")
	b.strand(t, old, time.Hour)
	b.exec(t, `UPDATE inbox_events SET requeued_at = now() - interval '61 seconds' WHERE event_id = $1`, old)
	for _, s := range []string{"processed", "ignored", "poison", "discarded"} {
		id := emit("ch_" + s)
		b.strand(t, id, time.Hour)
		b.exec(t, `UPDATE inbox_events SET status = $2 WHERE event_id = $1`, id, s)
	}

	n, err := b.jobs.SweepInbox(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, b.jobsOf(t, old))
	require.Zero(t, b.jobsOf(t, fresh), "received 50s ago")
	require.Zero(t, b.jobsOf(t, replayed), "replayed 50s ago")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_event'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM inbox_events
		WHERE event_id = $1 AND requeued_at > now() - interval '10 seconds'`, old), "the sweep is a requeue")
}

// TestSweepRaceEnqueuesOnce: two instances sweeping at the same moment
// (after a leader change, say) give each stranded event one job, and a
// replay by an operator sets the clock again, so a sweep right after it
// does not double its job either.
func TestSweepRaceEnqueuesOnce(t *testing.T) {
	t.Parallel()
	b := setupSweep(t)
	var ids []string
	for i := range 20 {
		e := b.sim.Emit("charge.succeeded", map[string]any{
			"id": fmt.Sprintf("ch_race_%d", i), "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "usd",
		})
		b.ingest(t, e)
		b.strand(t, e.ID, time.Hour)
		ids = append(ids, e.ID)
	}
	other, err := jobs.NewClient(b.pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)

	var (
		wg    sync.WaitGroup
		swept atomic.Int64
		start = make(chan struct{})
	)
	for _, c := range []*jobs.Client{b.jobs, other, b.jobs, other} {
		wg.Go(func() {
			<-start
			for range 3 {
				n, err := c.SweepInbox(b.ctx)
				assert.NoError(t, err)
				swept.Add(int64(n))
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int64(len(ids)), swept.Load())
	for _, id := range ids {
		require.Equal(t, 1, b.jobsOf(t, id), id)
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM ops_audit_log WHERE event_id = $1`, id), id)
	}

	// An operator replays one, and its new job vanishes at once: the
	// replay's minute holds the sweeper back.
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.jobs.ReplayEventTx(b.ctx, tx, "stripe", ids[0], inbox.Operation{Actor: "ops"})
		return err
	}))
	b.exec(t, `DELETE FROM river_job`+eventJobs, ids[0])
	n, err := b.jobs.SweepInbox(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestSweepIsSetBased: more stranded events than one batch holds are all
// re-enqueued by one run, each once.
func TestSweepIsSetBased(t *testing.T) {
	t.Parallel()
	b := setupSweep(t)
	const events = 2500
	b.exec(t, `WITH keys AS (
			INSERT INTO inbox_event_keys (provider, event_id, received_at)
			SELECT 'stripe', 'evt_bulk_' || n, now() - interval '1 hour' FROM generate_series(1, $1) AS n
			RETURNING *)
		INSERT INTO inbox_events (provider, event_id, type, payload, received_at)
		SELECT provider, event_id, 'charge.succeeded', '{}', received_at FROM keys`, events)
	n, err := b.jobs.SweepInbox(b.ctx)
	require.NoError(t, err)
	require.Equal(t, events, n)
	require.Equal(t, events, b.count(t, `SELECT count(DISTINCT args->>'event_id') FROM river_job WHERE kind = 'process_event'`))
	require.Equal(t, events, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_event'`))
	require.Equal(t, events, b.count(t, `SELECT count(*) FROM ops_audit_log WHERE action = 'sweep'`))
	require.Equal(t, float64(events), counter(t, b.registry, "paygate_inbox_swept_total"))
}
