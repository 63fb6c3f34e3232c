// Command benchfill fills a migrated paygate database with synthetic
// events and everything applying them leaves behind, fast, for measuring
// paygate when its tables hold a year of traffic (make bench-growth).
//
//	benchfill -database-url URL -events N [-fill-details] [-search N]
//	benchfill -database-url URL -payments N [-search N]
//
// -events adds events until the database holds N (so 0 → 1 M → 10 M is two
// calls). -payments fills the payments table only, until it holds N
// payments: the rows the payment search reads, in about a sixth of the disk
// a fill of every table takes (14 GB at 10 M payments), for measuring the
// search where a full fill would not fit.
// -fill-details then takes the payments' details back to before paygate
// kept them and times paygate's fill of them; -search times the payment
// searches of the API and the console and shows their plans.
// The rows are paygate's own: a sample of payments of make bench's mix is
// ingested and applied by the real ingester and workers on a scratch
// database, read back, and copied with COPY, each copy of a payment with
// fresh ids (events, payment intents, charges, refunds, balance
// transactions, and so every key, ref and payload naming them) and its
// times moved into the past year. Every event is processed; the ledger
// gets each copy's balanced transactions (its triggers check them at each
// chunk's commit); the counts by status follow through the inbox's own
// triggers. River's job table is left alone: River prunes it.
//
// After the fill it runs VACUUM ANALYZE on the filled tables and a
// CHECKPOINT, so that a measurement does not pay for the fill, and prints
// the database's size. Progress goes to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type options struct {
	databaseURL    string
	events         int64
	payments       int64
	samplePayments int
	paidTwice      float64
	chunk          int
	workers        int
	span           time.Duration
	vacuum         bool
	progress       time.Duration
	search         int
	fillDetails    bool
	log            io.Writer
}

func main() {
	var o options
	fs := flag.NewFlagSet("benchfill", flag.ExitOnError)
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "the migrated paygate database to fill")
	fs.Int64Var(&o.events, "events", 0, "events the database should hold when done")
	fs.Int64Var(&o.payments, "payments", 0,
		"instead of -events: fill the payments table only (what the payment search reads; no events, ledger or other tables) until it holds N payments")
	fs.IntVar(&o.samplePayments, "sample-payments", 500, "payments applied for real on a scratch database, then copied")
	fs.Float64Var(&o.paidTwice, "paid-twice", 0.01, "share of the orders paid twice (a double charge each, unless refunded)")
	fs.IntVar(&o.chunk, "chunk", 20000, "events (with -payments, payments) per COPY transaction")
	fs.IntVar(&o.workers, "workers", 2, "transactions copying at once")
	fs.DurationVar(&o.span, "span", 365*24*time.Hour, "how far back the events' received_at are spread")
	fs.BoolVar(&o.vacuum, "vacuum", true, "VACUUM ANALYZE the filled tables and CHECKPOINT after filling")
	fs.DurationVar(&o.progress, "progress", 5*time.Second, "how often progress is printed")
	fs.BoolVar(&o.fillDetails, "fill-details", false,
		"then take the payments' details back to before paygate kept them, and time paygate's fill of them")
	fs.IntVar(&o.search, "search", 0, "then time this many payment searches of each kind, and show their plans")
	_ = fs.Parse(os.Args[1:])
	o.log = os.Stderr
	if o.databaseURL == "" || o.events < 0 || o.payments < 0 || (o.events > 0 && o.payments > 0) || o.search < 0 {
		fmt.Fprintln(os.Stderr, "usage: benchfill -database-url URL [-events N | -payments N] [-fill-details] [-search N]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "benchfill:", err)
		os.Exit(1)
	}
	if o.events > 0 || o.payments > 0 || (o.search == 0 && !o.fillDetails) {
		if _, err := fill(ctx, o); err != nil {
			fail(err)
		}
	}
	if o.fillDetails {
		payments, took, err := fillDetails(ctx, o)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(o.log, "benchfill: the details of %d payments filled in %s: %s per million payments\n", payments,
			took.Round(time.Second), (time.Duration(float64(took) * 1e6 / float64(max(payments, 1)))).Round(time.Second))
	}
	if o.search > 0 {
		payments, results, err := search(ctx, o)
		if err != nil {
			fail(err)
		}
		printSearch(o, payments, results)
	}
}

// result is what a fill did.
type result struct {
	Before, After int64 // events held before and after (payments, with -payments)
	Bytes         int64 // the database's size after
}

// countEvents and countPayments count what a fill counts toward its target.
const (
	countEvents   = `SELECT coalesce(sum(n), 0)::bigint FROM inbox_status_counts`
	countPayments = `SELECT count(*) FROM payments`
)

func fill(ctx context.Context, o options) (result, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(o.log, "benchfill: "+format+"\n", args...) }
	cfg, err := pgxpool.ParseConfig(o.databaseURL)
	if err != nil {
		return result{}, fmt.Errorf("parse database url: %w", err)
	}
	// A lost chunk on a crash is refilled by the next run; waiting for
	// each commit's flush would only slow the fill.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	cfg.MaxConns = int32(o.workers + 1)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return result{}, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()

	target, noun, per, count, tables := o.events, "events", "event", countEvents, fillTables
	weight := func(u unit) int { return u.events }
	if o.payments > 0 {
		target, noun, per, count, tables = o.payments, "payments", "payment", countPayments, []string{"payments"}
		weight = func(u unit) int { return u.payments }
	}
	var res result
	var heldEvents, heldPayments int64
	if err := pool.QueryRow(ctx, `SELECT (`+countEvents+`), (`+countPayments+`)`).Scan(&heldEvents, &heldPayments); err != nil {
		return result{}, fmt.Errorf("count events and payments (is the database migrated?): %w", err)
	}
	res.Before = heldEvents
	if o.payments > 0 {
		res.Before = heldPayments
	}
	res.After = res.Before
	need := target - res.Before
	if need <= 0 {
		logf("the database holds %d %s, asked for %d: nothing to add", res.Before, noun, target)
		res.Bytes, err = dbSize(ctx, pool)
		return res, err
	}
	shapes, err := readShapes(ctx, pool)
	if err != nil {
		return result{}, err
	}

	logf("applying %d sample payments on a scratch database", o.samplePayments)
	seed := uint64(time.Now().UnixNano())>>1 | 1
	events, err := sampleEvents(o.samplePayments, o.paidTwice, seed)
	if err != nil {
		return result{}, err
	}
	sample, drop, err := applySample(ctx, o.databaseURL, events, logf)
	if err != nil {
		return result{}, err
	}
	if err := checkSampleTables(ctx, sample); err != nil {
		drop()
		return result{}, err
	}
	units, err := readUnits(ctx, sample, shapes)
	drop()
	if err != nil {
		return result{}, err
	}
	var sampleEvents, samplePayments int
	for _, u := range units {
		sampleEvents += u.events
		samplePayments += u.payments
	}
	orders := len(units)
	if o.payments > 0 {
		units = onlyPayments(units, shapes)
	}
	var sampleWeight, sampleRows int
	var reach time.Duration
	for _, u := range units {
		sampleWeight += weight(u)
		sampleRows += len(u.rows)
		reach = max(reach, u.last.Sub(u.received))
	}
	logf("sample: %d orders, %d payments, %d events; %.2f rows copied per %s; adding %d %s to the %d held",
		orders, samplePayments, sampleEvents, float64(sampleRows)/float64(sampleWeight), per, need, noun, res.Before)

	// Each copy's stamp is unique across runs, whether they filled every
	// table or the payments only: a run starts at the larger of the events
	// and the payments already held, and every copy holds at least one of
	// what its run counts.
	firstStamp := max(heldEvents, heldPayments)
	var copies int64
	for n := int64(0); n < need; copies++ {
		n += int64(weight(units[copies%int64(len(units))]))
	}
	end := time.Now().Add(-reach - time.Hour)
	start := end.Add(-o.span)

	type chunk struct{ from, to int64 } // copies [from, to)
	perChunk := max(int64(float64(o.chunk)*float64(len(units))/float64(sampleWeight)), 1)
	chunks := make(chan chunk)
	var added, rowsAdded atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		defer close(chunks)
		for from := int64(0); from < copies; from += perChunk {
			select {
			case chunks <- chunk{from, min(from+perChunk, copies)}:
			case <-ctx.Done():
				return
			}
		}
	}()

	began := time.Now()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(o.progress)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n, r := added.Load(), rowsAdded.Load()
				secs := time.Since(began).Seconds()
				eta := "?"
				if n > 0 {
					eta = (time.Duration(float64(need-n)/(float64(n)/secs)) * time.Second).Truncate(time.Second).String()
				}
				logf("%d/%d %s (%.0f%%), %.0f %s/s, %.0f rows/s, ETA %s",
					n, need, noun, 100*float64(n)/float64(need), float64(n)/secs, noun, float64(r)/secs, eta)
			}
		}
	}()

	var wg sync.WaitGroup
	for range o.workers {
		wg.Go(func() {
			for c := range chunks {
				rs, err := copyChunk(ctx, pool, shapes, units, c.from, c.to, func(i int64) (int64, time.Time) {
					return firstStamp + i, start.Add(time.Duration(float64(o.span) * float64(i) / float64(copies)))
				})
				if err != nil {
					cancel(err)
					return
				}
				var n int64
				for i := c.from; i < c.to; i++ {
					n += int64(weight(units[i%int64(len(units))]))
				}
				added.Add(n)
				rowsAdded.Add(rs)
			}
		})
	}
	wg.Wait()
	close(done)
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	secs := time.Since(began).Seconds()
	logf("added %d %s (%d rows) in %.0fs: %.0f %s/s", added.Load(), noun, rowsAdded.Load(), secs,
		float64(added.Load())/secs, noun)
	if err := pool.QueryRow(ctx, count).Scan(&res.After); err != nil {
		return res, fmt.Errorf("count %s: %w", noun, err)
	}

	if o.vacuum {
		for _, t := range tables {
			began := time.Now()
			if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+pgx.Identifier{t}.Sanitize()); err != nil {
				return res, fmt.Errorf("vacuum %s: %w", t, err)
			}
			logf("VACUUM ANALYZE %s: %.0fs", t, time.Since(began).Seconds())
		}
		if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return res, fmt.Errorf("checkpoint: %w", err)
		}
	}
	res.Bytes, err = dbSize(ctx, pool)
	if err != nil {
		return res, err
	}
	logf("the database holds %d %s; its size is %.1f GiB", res.After, noun, float64(res.Bytes)/(1<<30))
	return res, nil
}

func dbSize(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&n); err != nil {
		return 0, fmt.Errorf("database size: %w", err)
	}
	return n, nil
}

// checkSampleTables refuses a schema whose applying writes to a table
// benchfill does not copy: the filled database would lack its growth.
func checkSampleTables(ctx context.Context, sample *pgxpool.Pool) error {
	rows, err := sample.Query(ctx, `SELECT c.relname FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'r' AND NOT c.relispartition`)
	if err != nil {
		return fmt.Errorf("list sample tables: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list sample tables: %w", err)
	}
	known := map[string]bool{}
	for _, t := range fillTables {
		known[t] = true
	}
	var unknown []error
	for _, t := range names {
		if known[t] || steadyTables[t] {
			continue
		}
		var n int64
		if err := sample.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{t}.Sanitize()).Scan(&n); err != nil {
			return fmt.Errorf("count sample %s: %w", t, err)
		}
		if n > 0 {
			unknown = append(unknown, fmt.Errorf("applying the sample wrote %d rows to %s, which benchfill does not fill", n, t))
		}
	}
	return errors.Join(unknown...)
}

// copyChunk writes copies [from, to) of the sample's units in one
// transaction, one COPY per table, and returns the rows written. at gives a
// copy's stamp and the time its first event is received.
func copyChunk(ctx context.Context, pool *pgxpool.Pool, shapes []tableShape, units []unit, from, to int64,
	at func(i int64) (int64, time.Time)) (rows int64, err error) {
	perTable := make([][][]any, len(shapes))
	var txns int
	for i := from; i < to; i++ {
		txns += len(units[i%int64(len(units))].txns)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ids := make([]int64, 0, txns)
		if txns > 0 {
			r, err := tx.Query(ctx, `SELECT nextval(pg_get_serial_sequence('ledger_transactions', 'id')) FROM generate_series(1, $1)`, txns)
			if err != nil {
				return fmt.Errorf("reserve ledger transaction ids: %w", err)
			}
			if ids, err = pgx.CollectRows(r, pgx.RowTo[int64]); err != nil {
				return fmt.Errorf("reserve ledger transaction ids: %w", err)
			}
		}
		next := 0
		txnIDs := map[int64]int64{}
		for i := from; i < to; i++ {
			u := units[i%int64(len(units))]
			k, first := at(i)
			// Whole seconds, so that the payloads' Unix times and the
			// rows' times move alike (the ledger's occurred_at is the
			// payload's created).
			shift := first.Sub(u.received).Truncate(time.Second)
			clear(txnIDs)
			for _, old := range u.txns {
				txnIDs[old] = ids[next]
				next++
			}
			for _, r := range u.rows {
				out := make([]any, len(r.vals))
				for ci, v := range r.vals {
					out[ci] = v.render(k, shift, txnIDs)
				}
				perTable[r.table] = append(perTable[r.table], out)
			}
		}
		for ti, s := range shapes {
			if len(perTable[ti]) == 0 {
				continue
			}
			n, err := tx.CopyFrom(ctx, pgx.Identifier{s.name}, s.names(), pgx.CopyFromRows(perTable[ti]))
			if err != nil {
				return fmt.Errorf("copy %d rows into %s: %w", len(perTable[ti]), s.name, err)
			}
			rows += n
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return rows, nil
}
