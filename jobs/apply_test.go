package jobs

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/statemachine"
)

// applyWorld is a database with events in its inbox and an applier, without
// running workers: the tests call the applier themselves.
type applyWorld struct {
	pool    *pgxpool.Pool
	rc      *river.Client[pgx.Tx]
	applier *applier
}

func newApplyWorld(t testing.TB) *applyWorld {
	t.Helper()
	pool := testdb.New(t)
	client, err := NewClient(pool, Config{InsertOnly: true})
	require.NoError(t, err)
	return &applyWorld{pool: pool, rc: client.River, applier: newApplier(pool, "ops@example.test", nil, nil)}
}

// store puts events in the inbox, as ingest does, a batch a transaction
// (their jobs are not needed: the tests apply them directly), and returns
// their keys. Batches, not one transaction for all: each insert updates
// the inbox's counts, and the versions of a row one transaction updates
// again and again cannot be pruned until it ends, so every update would
// walk all of the earlier ones.
func (w *applyWorld) store(t testing.TB, events []stripesim.Event) []inbox.Key {
	t.Helper()
	ctx := context.Background()
	keys := make([]inbox.Key, len(events))
	for chunk := range slices.Chunk(events, 256) {
		batch := make([]inbox.Event, len(chunk))
		for i, e := range chunk {
			batch[i] = inbox.Event{Provider: "stripe", EventID: e.ID, Type: string(e.Type), Payload: e.Payload}
		}
		require.NoError(t, pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			_, err := inbox.InsertManyTx(ctx, tx, batch)
			return err
		}))
	}
	for i, e := range events {
		keys[i] = inbox.Key{Provider: "stripe", EventID: e.ID}
	}
	return keys
}

// books dumps everything applying writes, in an order that does not depend
// on the order of writing.
func (w *applyWorld) books(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT id || ' ' || status || ' ' || coalesce(currency, '') || ' ' || amount || ' ' || amount_captured || ' ' ||
			amount_refunded || ' ' || amount_disputed || ' ' || coalesce(receipt_email, '<unknown>') || ' ' ||
			coalesce(reference, '<none>') || ' ' || coalesce(customer, '<none>') || ' ' || coalesce(description, '<none>') || ' ' ||
			metadata::text FROM payments ORDER BY 1`,
		`SELECT reference || ' ' || state || ' ' || detections FROM double_charges ORDER BY 1`,
		`SELECT payment_id || ' ' || key || ' ' || amount || ' ' || event_id FROM payment_facts ORDER BY 1`,
		`SELECT payment_id || ' ' || coalesce(from_status, '') || '>' || to_status || ' ' || event_id FROM payment_history ORDER BY payment_id, id`,
		`SELECT t.ref || ' ' || t.kind || ' ' || t.currency || ' ' || coalesce(t.event_id, '') || ' ' ||
			string_agg(e.account || ':' || e.debit || '/' || e.credit, ',' ORDER BY e.id)
			FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id GROUP BY t.id ORDER BY 1`,
		`SELECT kind || ' ' || object_id || ' ' || status || ' ' || coalesce(recipient, '') || ' ' || data::text FROM email_outbox ORDER BY 1`,
		// One job per email applied one by one, one per batch applied at
		// once: what both must give is a job for every email.
		`SELECT 'emails with a job ' || count(*) FROM email_outbox o WHERE EXISTS (SELECT FROM river_job j
			WHERE (j.kind = 'send_email' AND (j.args->>'outbox_id')::bigint = o.id)
			   OR (j.kind = 'send_emails' AND j.args->'outbox_ids' @> to_jsonb(o.id)))`,
		`SELECT event_id || ' ' || status || ' ' || attempts || ' ' || (processed_at IS NOT NULL) FROM inbox_events ORDER BY 1`,
	} {
		rows, err := w.pool.Query(context.Background(), q)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		b.WriteString(strings.Join(lines, "\n"))
		b.WriteString("\n--\n")
	}
	return b.String()
}

// mixedEvents is a day of one account: payments in several currencies,
// refunds (one failing, one reported before its charge's success), a
// dispute, a payout, an event type paygate ignores; every event once, in
// an order that puts late reports first.
func mixedEvents() []stripesim.Event {
	sim := stripesim.New(stripesim.Config{Seed: 7})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd", Email: "a@example.test"})
	first := len(sim.Events())
	sim.Refund(p, 6000)
	r := sim.Refund(p, 1000)
	sim.FailRefund(r.ID)
	sim.Pay(stripesim.PayOpts{Amount: 1500, Currency: "jpy", Email: "b@example.test"})
	sim.CloseDispute(sim.Dispute(sim.Pay(stripesim.PayOpts{Amount: 999, Currency: "eur"}), 0), false)
	sim.FailPayout(sim.Payout(20000, "usd"))
	sim.Ignored()
	events := sim.Events()
	// The first payment's success last: its refunds come before it.
	return append(events[first:], events[:first]...)
}

// TestBatchAppliesAsOneByOne: a batch of events of several payments,
// including two events of one payment and the same event twice, leaves
// exactly the books that applying them one at a time, in the same order,
// does.
func TestBatchAppliesAsOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	events := mixedEvents()

	alone := newApplyWorld(t)
	keys := alone.store(t, events)
	for _, k := range keys {
		require.NoError(t, alone.applier.apply(ctx, alone.rc, []inbox.Key{k})[0], k.EventID)
	}

	batched := newApplyWorld(t)
	keys = batched.store(t, events)
	keys = append(keys, keys[3], keys[0]) // a job run twice lands in the same batch
	for i, err := range batched.applier.apply(ctx, batched.rc, keys) {
		require.NoError(t, err, keys[i].EventID)
	}

	want := alone.books(t)
	require.Equal(t, want, batched.books(t))
	require.Contains(t, want, "refund_confirmation")
	require.Contains(t, want, "dispute_alert")
	require.Contains(t, want, "payout")
	require.Contains(t, want, " ignored ")

	// Applying the batch again changes nothing: every event is done.
	for _, err := range batched.applier.apply(ctx, batched.rc, keys) {
		require.NoError(t, err)
	}
	require.Equal(t, want, batched.books(t))
}

// TestBatchLeavesOutAnImpossibleEvent: one event the ledger can never take
// is left out of its batch, which is applied without it; alone, it is
// refused as permanent and writes nothing.
func TestBatchLeavesOutAnImpossibleEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := stripesim.New(stripesim.Config{Seed: 9})
	p := sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "usd", Email: "c@example.test"})
	bad := sim.Emit("refund.updated", map[string]any{"id": "re_eur", "object": "refund", "amount": 100,
		"currency": "eur", "status": "succeeded", "payment_intent": p.ID})
	sim.Pay(stripesim.PayOpts{Amount: 700, Currency: "gbp"})
	var good []stripesim.Event
	for _, e := range sim.Events() {
		if e.ID != bad.ID {
			good = append(good, e)
		}
	}

	want := newApplyWorld(t)
	for _, k := range want.store(t, good) {
		require.NoError(t, want.applier.apply(ctx, want.rc, []inbox.Key{k})[0])
	}
	want.store(t, []stripesim.Event{bad})

	w := newApplyWorld(t)
	keys := w.store(t, sim.Events())
	for i, err := range w.applier.apply(ctx, w.rc, keys) {
		if keys[i].EventID == bad.ID {
			require.ErrorIs(t, err, errBatchFailed)
			continue
		}
		require.NoError(t, err, keys[i].EventID)
	}
	require.Equal(t, want.books(t), w.books(t), "the batch applied without the impossible event")

	err := w.applier.apply(ctx, w.rc, []inbox.Key{{Provider: "stripe", EventID: bad.ID}})[0]
	require.ErrorIs(t, err, ErrPermanent)
	require.ErrorIs(t, err, statemachine.ErrCurrencyMismatch)
	require.Equal(t, want.books(t), w.books(t), "refused alone, it wrote nothing")
}

// TestBatchOutcomesPerEvent: an event the inbox does not hold and one that
// cannot be decoded get their own answers; the rest of the batch commits.
func TestBatchOutcomesPerEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := stripesim.New(stripesim.Config{Seed: 11})
	sim.Pay(stripesim.PayOpts{Amount: 1200, Currency: "usd"})
	garbled := sim.Emit("charge.succeeded", map[string]any{"id": "ch_zzz", "object": "charge", "amount": 100,
		"captured": true, "currency": "zzz"})

	w := newApplyWorld(t)
	keys := append(w.store(t, sim.Events()), inbox.Key{Provider: "stripe", EventID: "evt_never_stored"})
	for i, err := range w.applier.apply(ctx, w.rc, keys) {
		switch keys[i].EventID {
		case garbled.ID:
			require.ErrorIs(t, err, ErrPermanent)
		case "evt_never_stored":
			require.ErrorIs(t, err, inbox.ErrNotFound)
		default:
			require.NoError(t, err)
		}
	}
	var processed int
	require.NoError(t, w.pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events WHERE status = 'processed'`).Scan(&processed))
	require.Equal(t, len(keys)-2, processed)
}

// TestBatchAppliedAgainWhenAPaymentIsCreatedMeanwhile: a batch creates its
// new payments as it saves them; when another instance's transaction
// creates one of them after the batch found it new, the batch waits for
// that transaction, and once it commits applies the whole batch again at
// once (finding the payment this time) instead of failing every event of
// it.
func TestBatchAppliedAgainWhenAPaymentIsCreatedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := stripesim.New(stripesim.Config{Seed: 17})
	contested := sim.Pay(stripesim.PayOpts{Amount: 2500, Currency: "usd", Email: "c@example.test"})
	sim.Pay(stripesim.PayOpts{Amount: 700, Currency: "eur"})
	w := newApplyWorld(t)
	keys := w.store(t, sim.Events())

	rival, err := w.pool.Begin(ctx)
	require.NoError(t, err)
	defer rival.Rollback(ctx) //nolint:errcheck
	_, err = ledger.LockPaymentTx(ctx, rival, "stripe", contested.ID)
	require.NoError(t, err)
	go func() {
		time.Sleep(300 * time.Millisecond) // the batch has found the payment new by then
		_ = rival.Commit(ctx)
	}()

	start := time.Now()
	for i, err := range w.applier.apply(ctx, w.rc, keys) {
		require.NoError(t, err, "event %s", keys[i].EventID)
	}
	require.Greater(t, time.Since(start), 250*time.Millisecond, "the batch waited for the rival's payment")
	var processed int
	require.NoError(t, w.pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events WHERE status = 'processed'`).Scan(&processed))
	require.Equal(t, len(keys), processed)
	p, err := ledger.GetPayment(ctx, w.pool, contested.ID)
	require.NoError(t, err)
	require.Equal(t, statemachine.StateSucceeded, p.State)
	require.Equal(t, "25", p.AmountCaptured.String())
	require.Equal(t, "c@example.test", p.ReceiptEmail)
}

// TestBatchAnswersAnEventGivenTwiceAlike: two jobs of one event can land
// in one batch (after a crash River works a job again while the event's
// hand-off job waits too). Each gets the event's outcome: an event that
// cannot be applied is an error to both, since a nil to either completes
// its job, and a hand-off, unique by the event, then finds that completed
// job and makes none: the event would stay received with no job to work it.
func TestBatchAnswersAnEventGivenTwiceAlike(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := stripesim.New(stripesim.Config{Seed: 13})
	sim.Pay(stripesim.PayOpts{Amount: 900, Currency: "usd"})
	garbled := sim.Emit("charge.succeeded", map[string]any{"id": "ch_neg", "object": "charge", "amount": -500,
		"captured": true, "currency": "usd"})
	w := newApplyWorld(t)
	keys := w.store(t, sim.Events())
	bad := inbox.Key{Provider: "stripe", EventID: garbled.ID}
	twice := append([]inbox.Key{bad}, append(keys, bad, keys[0])...)
	outcomes := w.applier.apply(ctx, w.rc, twice)
	for i, err := range outcomes {
		if twice[i] == bad {
			require.ErrorIs(t, err, ErrPermanent, "position %d", i)
			continue
		}
		require.NoError(t, err, "position %d", i)
	}
	var processed int
	require.NoError(t, w.pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events WHERE status = 'processed'`).Scan(&processed))
	require.Equal(t, len(keys)-1, processed)
}

// TestApplyQueueBatchesWhatWaited: while a batch is being applied, the
// events submitted meanwhile wait and then go together, each caller getting
// its own event's outcome; a caller that gave up before its batch began is
// left out of it.
func TestApplyQueueBatchesWhatWaited(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		batches [][]string
		release = make(chan struct{})
		first   = make(chan struct{})
	)
	q := &applyQueue{maxAppliers: 1, maxEvents: 16, apply: func(_ context.Context, _ *river.Client[pgx.Tx], keys []inbox.Key) []error {
		mu.Lock()
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = k.EventID
		}
		batches = append(batches, ids)
		n := len(batches)
		mu.Unlock()
		if n == 1 {
			close(first)
			<-release
		}
		out := make([]error, len(keys))
		for i, k := range keys {
			out[i] = fmt.Errorf("outcome of %s", k.EventID)
		}
		return out
	}}
	submit := func(ctx context.Context, id string) error {
		return q.submit(ctx, nil, inbox.Key{Provider: "stripe", EventID: id})
	}

	results := make(chan error, 64)
	go func() { results <- submit(context.Background(), "evt_0") }()
	<-first
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	goneResult := make(chan error, 1)
	go func() { goneResult <- submit(gone, "evt_gone") }()
	for i := 1; i <= 40; i++ {
		go func() { results <- submit(context.Background(), fmt.Sprintf("evt_%d", i)) }()
	}
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.pending) == 41
	}, 5*time.Second, time.Millisecond)
	close(release)
	require.ErrorIs(t, <-goneResult, context.Canceled)

	seen := map[string]bool{}
	for range 41 {
		err := <-results
		id := strings.TrimPrefix(err.Error(), "outcome of ")
		require.False(t, seen[id], id)
		seen[id] = true
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"evt_0"}, batches[0])
	require.Len(t, batches, 4, "40 waiting events in batches of at most 16")
	total := 0
	for _, b := range batches[1:] {
		require.NotContains(t, b, "evt_gone")
		require.LessOrEqual(t, len(b), 16)
		total += len(b)
	}
	require.Equal(t, 40, total)
}

// benchWarmUp events are applied before BenchmarkApply counts, then the
// database analyzed: make bench's warm-up (BENCH_WARMUP). Fewer, and the
// plans made on the statistics of a few hundred payments (a sequential scan
// for the batch's payments) would stay while the table grew many times over.
const benchWarmUp = 5000

// BenchmarkApply is the time to apply one event of a payment's usual pair
// (payment_intent.succeeded, charge.succeeded with a receipt email), alone
// in its transaction or in batches, on a real database with synchronous
// commit. One caller: it measures a batch's cost per event, not
// concurrency.
//
//	go test ./jobs -run '^$' -bench Apply -benchmem -benchtime=2000x
//
// The mix is make bench's (stripesim.PayMix): each payment with its order
// and description, one in ten refunded.
func BenchmarkApply(b *testing.B) {
	mix := func(n int) []stripesim.Event {
		// Two events a payment, four more a refund: n/2 payments leave
		// at least n events.
		mix := stripesim.New(stripesim.Config{Seed: 5}).PayMix(mrand.New(mrand.NewPCG(5, 5)), n/2+1, 0.1)
		return mix[:n]
	}
	kinds := []struct {
		name   string
		events func(n int) []stripesim.Event
	}{
		{"pairs", stripesim.PaymentPairs},
		{"mix", mix},
		{"shuffled", func(n int) []stripesim.Event {
			// The mix in the order make bench sends it (loadgen shuffles
			// the whole stream): a batch holds one event of most of its
			// payments, whose other events come in other batches.
			events := mix(n)
			mrand.New(mrand.NewPCG(5, 6)).Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
			return events
		}},
	}
	for _, kind := range kinds {
		for _, size := range []int{1, 16, 128} {
			b.Run(fmt.Sprintf("events=%s/batch=%d", kind.name, size), func(b *testing.B) {
				benchmarkApply(b, kind.events(benchWarmUp+b.N), size)
			})
		}
	}
}

func benchmarkApply(b *testing.B, events []stripesim.Event, size int) {
	ctx := context.Background()
	w := newApplyWorld(b)
	keys := w.store(b, events)
	// Warmed up and analyzed as make bench does: the plans the ledger's
	// checks cache are made on the statistics of the moment, and those of
	// empty tables are scans that grow with the table (the ANALYZE
	// invalidates them).
	applyAll := func(keys []inbox.Key) {
		for i := 0; i < len(keys); i += size {
			for _, err := range w.applier.apply(ctx, w.rc, keys[i:min(i+size, len(keys))]) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	applyAll(keys[:benchWarmUp])
	keys = keys[benchWarmUp:]
	if _, err := w.pool.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	// The database's CPU, as well as the time: the machine is shared, and
	// another tenant's load moves the CPU a piece of work takes much less
	// than its rate.
	runtime.GC() // the set-up's garbage is not the measure's
	// The WAL is the cluster's: it counts what other databases write
	// meanwhile, so it is read on a quiet machine.
	wal := func() (lsn string) {
		if err := w.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	cpu, goCPU, walFrom := testdb.BackendCPU(w.pool), testdb.ProcessCPU(), wal()
	b.ResetTimer()
	applyAll(keys)
	b.StopTimer()
	var walBytes float64
	if err := w.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)`, wal(), walFrom).Scan(&walBytes); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(walBytes/float64(b.N), "wal-B/event")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64((testdb.BackendCPU(w.pool)-cpu).Microseconds())/float64(b.N), "pg-cpu-µs/event")
	b.ReportMetric(float64((testdb.ProcessCPU()-goCPU).Microseconds())/float64(b.N), "go-cpu-µs/event")
}
