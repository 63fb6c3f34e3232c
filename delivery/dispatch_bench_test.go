package delivery_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/outbox"
)

// BenchmarkDispatch delivers a backlog of messages (two per payment, as
// applying writes them) to one endpoint answering 200 at once, from their
// commit to the last recorded attempt, and reports what each message cost
// in CPU: this process's (the dispatcher, the sender and the receiver) and
// the database backends' of the benchmark's database, read from /proc, and
// the rows written. CPU time, not wall time: the machine is shared, and
// what another tenant's load does to a rate it does much less to the CPU a
// piece of work takes.
//
//	go test ./delivery -run '^$' -bench Dispatch -benchtime 20000x
func BenchmarkDispatch(b *testing.B) {
	ctx := context.Background()
	pool := testdb.New(b)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	b.Cleanup(rcv.Close)
	guard := delivery.GuardConfig{AllowPrivate: true}
	dispatcher := delivery.NewDispatcher(delivery.DispatcherConfig{
		Pool:   pool,
		Sender: delivery.NewSender(delivery.SenderConfig{Guard: guard, Timeout: 5 * time.Second}),
	})
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true, Register: func(w *river.Workers) []*river.PeriodicJob {
		river.AddWorker(w, &delivery.DeliverWorker{Dispatcher: dispatcher})
		return nil
	}})
	if err != nil {
		b.Fatal(err)
	}
	relay := delivery.NewRelay(delivery.RelayConfig{Pool: pool, River: jc.River})
	e, err := delivery.NewStore(pool, guard).Create(ctx, delivery.NewEndpoint{URL: rcv.URL, EventTypes: []string{delivery.AllTypes}})
	if err != nil {
		b.Fatal(err)
	}
	// A hundred messages a transaction, as an applied batch writes them.
	write := func(from, to int) {
		for i := from; i < to; i += 100 {
			var msgs []outbox.Message
			for j := i; j < min(i+100, to); j++ {
				m, err := outbox.New(outbox.AggregatePayment, fmt.Sprintf("pi_%d", j/2), int64(j%2+1), "payment.succeeded",
					time.Now(), map[string]any{"payment": map[string]any{"id": fmt.Sprintf("pi_%d", j/2), "amount": "12.00"}})
				if err != nil {
					b.Fatal(err)
				}
				msgs = append(msgs, m)
			}
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.WriteTx(ctx, tx, msgs) }); err != nil {
				b.Fatal(err)
			}
		}
	}
	drain := func() {
		if err := relay.Step(ctx); err != nil {
			b.Fatal(err)
		}
		for {
			n, err := dispatcher.Dispatch(ctx, jc.River, e.ID)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				return
			}
		}
	}
	// Warm up, then analyze, as a database in service has statistics.
	const warmup = 2000
	write(0, warmup)
	drain()
	if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	write(warmup, warmup+b.N)
	time.Sleep(1500 * time.Millisecond) // the warm-up's counts reported first
	rowsBefore := rowsWritten(b, pool)
	pgBefore, goBefore := testdb.BackendCPU(pool), testdb.ProcessCPU()

	b.ResetTimer()
	drain()
	b.StopTimer()

	pgCPU, goCPU := testdb.BackendCPU(pool)-pgBefore, testdb.ProcessCPU()-goBefore
	time.Sleep(1500 * time.Millisecond) // backends report their counts when idle
	rows := rowsWritten(b, pool) - rowsBefore
	var delivered int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'succeeded'`).Scan(&delivered); err != nil {
		b.Fatal(err)
	}
	if delivered != warmup+b.N {
		b.Fatalf("%d of %d messages delivered", delivered, warmup+b.N)
	}
	b.ReportMetric(float64(pgCPU.Microseconds())/float64(b.N), "pg-cpu-µs/msg")
	b.ReportMetric(float64(goCPU.Microseconds())/float64(b.N), "go-cpu-µs/msg")
	b.ReportMetric(float64(rows)/float64(b.N), "rows/msg")
}

// rowsWritten is the rows inserted, updated and deleted in pool's database.
func rowsWritten(b *testing.B, pool *pgxpool.Pool) int64 {
	b.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
