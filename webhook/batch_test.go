package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

type newIngester func(t testing.TB, pool *pgxpool.Pool, enq webhook.Enqueuer) webhook.Ingester

// ingesters are the Ingesters the handler runs on; the contract tests run
// against each.
func ingesters() map[string]newIngester {
	return map[string]newIngester{
		"tx": func(_ testing.TB, pool *pgxpool.Pool, enq webhook.Enqueuer) webhook.Ingester {
			return &webhook.TxIngester{Pool: pool, Enqueue: enq}
		},
		"batch": func(t testing.TB, pool *pgxpool.Pool, enq webhook.Enqueuer) webhook.Ingester {
			return newBatch(t, webhook.BatchConfig{Pool: pool, Enqueue: enq})
		},
	}
}

func newBatch(t testing.TB, cfg webhook.BatchConfig) *webhook.BatchIngester {
	b := webhook.NewBatchIngester(cfg)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

type batchBundle struct {
	pool *pgxpool.Pool
	jobs *jobs.Client
}

func batchSetup(t *testing.T) *batchBundle {
	t.Helper()
	pool := testdb.New(t)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	return &batchBundle{pool: pool, jobs: jc}
}

func (b *batchBundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func event(t testing.TB, id string) webhook.Event {
	t.Helper()
	e, err := stripe.DecodeEvent(eventBody(id))
	require.NoError(t, err)
	return e
}

// ingestAll ingests every event at once, each from its own goroutine, and
// returns the outcomes in the same order.
func ingestAll(ctx context.Context, in webhook.Ingester, events []webhook.Event) (dups []bool, errs []error) {
	dups, errs = make([]bool, len(events)), make([]error, len(events))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, e := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			dups[i], errs[i] = in.Ingest(ctx, e)
		}()
	}
	close(start)
	wg.Wait()
	return dups, errs
}

// TestBatchManyConcurrentEventsWithDuplicates: hundreds of events, each sent
// one to four times at once, some already in the inbox, through small
// batches committing in parallel, so that copies meet inside one batch and
// across concurrent batches. Every id ends with exactly one row, one job and
// one duplicate:false answer, and each row holds its payload byte for byte.
func TestBatchManyConcurrentEventsWithDuplicates(t *testing.T) {
	t.Parallel()
	b := batchSetup(t)
	in := newBatch(t, webhook.BatchConfig{Pool: b.pool, Enqueue: b.jobs, MaxEvents: 16, MaxWait: 5 * time.Millisecond, Flushers: 3})
	ctx := context.Background()

	const ids = 300
	rng := rand.New(rand.NewPCG(7, 7))
	var sent []webhook.Event
	byID := map[string]webhook.Event{}
	for i := range ids {
		e := event(t, fmt.Sprintf("evt_many_%03d", i))
		byID[e.ID] = e
		for range 1 + rng.IntN(4) {
			sent = append(sent, e)
		}
	}
	// A tenth of the ids were acknowledged before: every copy now is a
	// duplicate.
	known := map[string]bool{}
	for i := 0; i < ids; i += 10 {
		e := byID[fmt.Sprintf("evt_many_%03d", i)]
		dup, err := in.Ingest(ctx, e)
		require.NoError(t, err)
		require.False(t, dup)
		known[e.ID] = true
	}
	rng.Shuffle(len(sent), func(i, j int) { sent[i], sent[j] = sent[j], sent[i] })

	dups, errs := ingestAll(ctx, in, sent)
	fresh := map[string]int{}
	for i, e := range sent {
		require.NoError(t, errs[i], e.ID)
		if !dups[i] {
			fresh[e.ID]++
		}
	}
	for id := range byID {
		want := 1
		if known[id] {
			want = 0
		}
		require.Equal(t, want, fresh[id], "duplicate:false answers for %s", id)
	}
	require.Equal(t, ids, b.count(t, `SELECT count(*) FROM inbox_events`))
	require.Equal(t, ids, b.count(t, `SELECT count(DISTINCT event_id) FROM (`+jobs.EventJobsSQL+`) j`))
	require.Equal(t, ids, b.count(t, `SELECT count(*) FROM (`+jobs.EventJobsSQL+`) j`), "one job per id")

	rows, err := b.pool.Query(ctx, `SELECT event_id, payload, type, provider_created_at FROM inbox_events`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id, typ string
		var payload []byte
		var created time.Time
		require.NoError(t, rows.Scan(&id, &payload, &typ, &created))
		require.Equal(t, byID[id].Payload, payload, "stored byte for byte")
		require.Equal(t, byID[id].Type, typ)
		require.True(t, byID[id].Created.Equal(created))
	}
	require.NoError(t, rows.Err())
}

// TestBatchCopiesInsideOneBatch: four requests fill one batch of four (the
// deadline is far away); the three copies of one id in it make one row, one
// job and one new answer, and the other id its own.
func TestBatchCopiesInsideOneBatch(t *testing.T) {
	t.Parallel()
	b := batchSetup(t)
	in := newBatch(t, webhook.BatchConfig{Pool: b.pool, Enqueue: b.jobs, MaxEvents: 4, MaxWait: time.Minute, Flushers: 1})
	a, other := event(t, "evt_inside_a"), event(t, "evt_inside_b")

	dups, errs := ingestAll(context.Background(), in, []webhook.Event{a, a, other, a})
	for _, err := range errs {
		require.NoError(t, err)
	}
	fresh := 0
	for _, i := range []int{0, 1, 3} {
		if !dups[i] {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "exactly one copy of a is new: %v", dups)
	require.False(t, dups[2], "the other id is new")
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM inbox_events`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM (`+jobs.EventJobsSQL+`) j WHERE event_id = 'evt_inside_a'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM (`+jobs.EventJobsSQL+`) j WHERE event_id = 'evt_inside_b'`))
}

// TestBatchFailureFailsEveryCaller: when the batch's transaction cannot
// commit (here its job insert fails), every caller in it gets an error that
// answers 503 and nothing is stored: no 2xx without a commit.
func TestBatchFailureFailsEveryCaller(t *testing.T) {
	t.Parallel()
	b := batchSetup(t)
	in := newBatch(t, webhook.BatchConfig{Pool: b.pool, Enqueue: failingEnqueuer{}, MaxEvents: 8, MaxWait: 20 * time.Millisecond, Flushers: 2})
	var events []webhook.Event
	for i := range 8 {
		events = append(events, event(t, fmt.Sprintf("evt_fail_%d", i)))
	}
	events = append(events, events[0]) // a copy, in this batch or the next
	_, errs := ingestAll(context.Background(), in, events)
	for i, err := range errs {
		require.ErrorIs(t, err, webhook.ErrUnavailable, "caller %d", i)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM inbox_events`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job`))
}

// TestBatchIsolatesAnEventTheDatabaseRefuses: an event PostgreSQL can never
// store (a NUL byte in its id) fails alone; the events that shared its batch
// are committed and answered as if it had not been there.
func TestBatchIsolatesAnEventTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	b := batchSetup(t)
	in := newBatch(t, webhook.BatchConfig{Pool: b.pool, Enqueue: b.jobs, MaxEvents: 4, MaxWait: time.Minute, Flushers: 1})
	bad := event(t, "evt_bad")
	bad.ID = "evt_\x00bad"
	good := event(t, "evt_good")
	events := []webhook.Event{good, bad, good, event(t, "evt_good2")}

	dups, errs := ingestAll(context.Background(), in, events)
	require.ErrorIs(t, errs[1], webhook.ErrUnavailable)
	for _, i := range []int{0, 2, 3} {
		require.NoError(t, errs[i])
	}
	require.NotEqual(t, dups[0], dups[2], "one copy of evt_good is new, the other duplicate")
	require.False(t, dups[3])
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM inbox_events`))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM river_job`))
}

// gatedEnqueuer holds every job insert until released, so a test can act
// while a batch is committing.
type gatedEnqueuer struct {
	webhook.Enqueuer
	entered chan struct{}
	release chan struct{}
}

func (g *gatedEnqueuer) InsertApplyEventsTx(ctx context.Context, tx pgx.Tx, provider string, ids []string) error {
	g.entered <- struct{}{}
	<-g.release
	return g.Enqueuer.InsertApplyEventsTx(ctx, tx, provider, ids)
}

// TestBatchCallerGivingUpLosesNothing: a caller whose context ends while its
// batch commits is answered with the error at once (no 2xx), yet the batch
// commits its event exactly once: the provider's retry is a duplicate. A
// caller that gave up before its batch began is left out of it.
func TestBatchCallerGivingUpLosesNothing(t *testing.T) {
	t.Parallel()
	b := batchSetup(t)
	gate := &gatedEnqueuer{Enqueuer: b.jobs, entered: make(chan struct{}, 8), release: make(chan struct{})}
	in := newBatch(t, webhook.BatchConfig{Pool: b.pool, Enqueue: gate, MaxWait: time.Millisecond})

	ctx, cancel := context.WithCancel(context.Background())
	e := event(t, "evt_gave_up")
	got := make(chan error, 1)
	go func() {
		_, err := in.Ingest(ctx, e)
		got <- err
	}()
	<-gate.entered // the batch is inside its transaction
	cancel()
	select {
	case err := <-got:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("a caller that gave up still waits for its batch")
	}
	close(gate.release)

	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM inbox_events WHERE event_id = 'evt_gave_up'`) == 1
	}, 5*time.Second, 5*time.Millisecond, "the batch still commits the event")
	dup, err := in.Ingest(context.Background(), e)
	require.NoError(t, err)
	require.True(t, dup, "the provider's retry finds it stored")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job`))

	gone, cancelGone := context.WithCancel(context.Background())
	cancelGone()
	_, err = in.Ingest(gone, event(t, "evt_gone"))
	require.ErrorIs(t, err, context.Canceled)
	time.Sleep(20 * time.Millisecond) // a batch it could have joined has come and gone
	require.Zero(t, b.count(t, `SELECT count(*) FROM inbox_events WHERE event_id = 'evt_gone'`))
}

// TestBatchCloseCommitsWhatItHolds: Close waits for queued events to commit
// and answers later ones ErrUnavailable.
func TestBatchCloseCommitsWhatItHolds(t *testing.T) {
	t.Parallel()
	b := batchSetup(t)
	gate := &gatedEnqueuer{Enqueuer: b.jobs, entered: make(chan struct{}, 8), release: make(chan struct{})}
	in := webhook.NewBatchIngester(webhook.BatchConfig{Pool: b.pool, Enqueue: gate, MaxWait: time.Millisecond})

	got := make(chan error, 1)
	go func() {
		_, err := in.Ingest(context.Background(), event(t, "evt_before_close"))
		got <- err
	}()
	<-gate.entered
	closed := make(chan error, 1)
	go func() { closed <- in.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was committing")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate.release)
	require.NoError(t, <-got)
	require.NoError(t, <-closed)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM inbox_events`))

	_, err := in.Ingest(context.Background(), event(t, "evt_after_close"))
	require.ErrorIs(t, err, webhook.ErrUnavailable)
	require.NoError(t, in.Close(), "Close is idempotent")
}

// BenchmarkIngest compares the one-transaction-per-event ingester with group
// commit, 32 concurrent callers, on a database that syncs its commits (the
// test helper turns synchronous_commit off; this benchmark turns it back
// on), in time and in CPU per event. Run: go test ./webhook -run '^$' -bench Ingest -benchmem.
func BenchmarkIngest(b *testing.B) {
	for _, name := range []string{"tx", "batch"} {
		b.Run(name, func(b *testing.B) {
			_, url := testdb.NewWithURL(b)
			cfg, err := pgxpool.ParseConfig(url)
			require.NoError(b, err)
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
			cfg.MaxConns = 40
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(b, err)
			b.Cleanup(pool.Close)
			jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
			require.NoError(b, err)
			in := ingesters()[name](b, pool, jc)
			// The simulator's events, as make bench sends them, not a
			// minimal envelope.
			events := make([]provider.Event, b.N)
			for i, e := range stripesim.PaymentPairs(b.N) {
				events[i], err = stripe.DecodeEvent(e.Payload)
				require.NoError(b, err)
			}
			var seq sync.Mutex
			n := 0
			b.SetParallelism(16) // 32 callers on 2 cores
			b.ReportAllocs()
			// CPU as well as time, as BenchmarkApply reports it: another
			// tenant's load moves the CPU a piece of work takes much less
			// than its rate.
			cpu, goCPU := testdb.BackendCPU(pool), testdb.ProcessCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					seq.Lock()
					e := events[n]
					n++
					seq.Unlock()
					if _, err := in.Ingest(context.Background(), e); err != nil && !errors.Is(err, context.Canceled) {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((testdb.BackendCPU(pool)-cpu).Microseconds())/float64(b.N), "pg-cpu-µs/event")
			b.ReportMetric(float64((testdb.ProcessCPU()-goCPU).Microseconds())/float64(b.N), "go-cpu-µs/event")
		})
	}
}

// TestBatchUnderPressure: the ingester is under pressure while 32 callers
// or more wait on their commits, and not once they are answered; a few
// callers never put it there.
func TestBatchUnderPressure(t *testing.T) {
	t.Parallel()
	b := batchSetup(t)
	gate := &gatedEnqueuer{Enqueuer: b.jobs, entered: make(chan struct{}, 64), release: make(chan struct{})}
	in := newBatch(t, webhook.BatchConfig{Pool: b.pool, Enqueue: gate, MaxWait: time.Millisecond, Flushers: 1})
	require.False(t, in.UnderPressure())

	ingest := func(n int, prefix string) *sync.WaitGroup {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := in.Ingest(context.Background(), event(t, fmt.Sprintf("%s_%d", prefix, i)))
				assert.NoError(t, err)
			}()
		}
		return &wg
	}
	few := ingest(31, "evt_few")
	<-gate.entered // the first batch is committing, the rest wait for it
	time.Sleep(20 * time.Millisecond)
	require.False(t, in.UnderPressure(), "31 callers waiting")
	many := ingest(1, "evt_more")
	require.Eventually(t, in.UnderPressure, 5*time.Second, time.Millisecond, "32 callers waiting")
	close(gate.release)
	few.Wait()
	many.Wait()
	require.False(t, in.UnderPressure(), "every caller answered")
}
