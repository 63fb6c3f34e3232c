package main

import (
	"context"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
)

// lookup is one kind of payment search, as the API and the console ask
// ledger.ListPayments for it.
type lookup struct {
	name   string
	filter func(p sampled, i int) (ledger.PaymentFilter, bool)
	// none: the lookup finds nothing (a search term that names no payment).
	none bool
}

// sampled is one payment a lookup looks for.
type sampled struct{ id, reference, customer, email string }

var lookups = []lookup{
	{name: "q=<payment id>", filter: func(p sampled, _ int) (ledger.PaymentFilter, bool) {
		return ledger.PaymentFilter{Q: p.id}, true
	}},
	{name: "reference=<order>", filter: func(p sampled, _ int) (ledger.PaymentFilter, bool) {
		return ledger.PaymentFilter{Reference: p.reference}, p.reference != ""
	}},
	{name: "q=<order>", filter: func(p sampled, _ int) (ledger.PaymentFilter, bool) {
		return ledger.PaymentFilter{Q: p.reference}, p.reference != ""
	}},
	{name: "customer=<cus_>", filter: func(p sampled, _ int) (ledger.PaymentFilter, bool) {
		return ledger.PaymentFilter{Customer: p.customer}, p.customer != ""
	}},
	{name: "q=<cus_>", filter: func(p sampled, _ int) (ledger.PaymentFilter, bool) {
		return ledger.PaymentFilter{Q: p.customer}, p.customer != ""
	}},
	{name: "q=<EMAIL> (ops)", filter: func(p sampled, _ int) (ledger.PaymentFilter, bool) {
		return ledger.PaymentFilter{Q: strings.ToUpper(p.email), QEmail: true}, p.email != ""
	}},
	{name: "q=<no such> (ops)", none: true, filter: func(_ sampled, i int) (ledger.PaymentFilter, bool) {
		return ledger.PaymentFilter{Q: fmt.Sprintf("ord_nothing%d", i), QEmail: true}, true
	}},
}

// statementRecorder keeps the last statement a pool sent while on, so
// that the plan shown is the very statement ListPayments sent.
type statementRecorder struct {
	mu   sync.Mutex
	on   bool
	sql  string
	args []any
}

func (r *statementRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.sql, r.args = d.SQL, d.Args
	}
	return ctx
}

func (r *statementRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *statementRecorder) record(on bool) (string, []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = on
	return r.sql, r.args
}

// searchResult is one kind of lookup's latencies.
type searchResult struct {
	Name              string
	Lookups           int
	Median, P99, Max  time.Duration
	Found             int // payments found, over all its lookups
	Plan              []string
	PlanHasSeqScanned bool
}

// search times n lookups of each kind (lookups) on payments drawn at
// random, one at a time, and returns their median and 99th percentile
// latencies and the plan of one of each (EXPLAIN ANALYZE of the statement
// ListPayments sent).
func search(ctx context.Context, o options) (payments int64, results []searchResult, err error) {
	cfg, err := pgxpool.ParseConfig(o.databaseURL)
	if err != nil {
		return 0, nil, fmt.Errorf("parse database url: %w", err)
	}
	rec := &statementRecorder{}
	cfg.ConnConfig.Tracer = rec
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, nil, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()

	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&payments); err != nil {
		return 0, nil, fmt.Errorf("count payments: %w", err)
	}
	if payments == 0 {
		return 0, nil, fmt.Errorf("no payments to search")
	}
	// Bernoulli, not SYSTEM: payments from all over the table, not a few
	// pages of neighbours.
	share := min(100, 300*float64(o.search)/float64(payments))
	rows, err := pool.Query(ctx, `SELECT id, coalesce(reference, ''), coalesce(customer, ''), coalesce(receipt_email, '')
		FROM payments TABLESAMPLE BERNOULLI ($1) LIMIT $2`, share, 3*o.search)
	if err != nil {
		return 0, nil, fmt.Errorf("sample payments: %w", err)
	}
	sample, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sampled, error) {
		var s sampled
		err := row.Scan(&s.id, &s.reference, &s.customer, &s.email)
		return s, err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("sample payments: %w", err)
	}
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 0x5ea7c4))
	rng.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })

	for _, l := range lookups {
		res := searchResult{Name: l.name}
		var took []time.Duration
		for i := 0; i < len(sample) && len(took) < o.search; i++ {
			f, ok := l.filter(sample[i], i)
			if !ok {
				continue
			}
			rec.record(true)
			began := time.Now()
			found, _, err := ledger.ListPayments(ctx, pool, f, "", 0)
			took = append(took, time.Since(began))
			rec.record(false)
			if err != nil {
				return 0, nil, fmt.Errorf("%s: %w", l.name, err)
			}
			if len(found) == 0 && !l.none {
				return 0, nil, fmt.Errorf("%s: payment %s not found", l.name, sample[i].id)
			}
			res.Found += len(found)
		}
		if len(took) == 0 {
			continue
		}
		slices.Sort(took)
		res.Lookups = len(took)
		res.Median, res.P99, res.Max = took[len(took)/2], took[(len(took)*99)/100], took[len(took)-1]
		sql, args := rec.record(false)
		plan, err := pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+sql, args...)
		if err != nil {
			return 0, nil, fmt.Errorf("explain %s: %w", l.name, err)
		}
		if res.Plan, err = pgx.CollectRows(plan, pgx.RowTo[string]); err != nil {
			return 0, nil, fmt.Errorf("explain %s: %w", l.name, err)
		}
		for _, line := range res.Plan {
			res.PlanHasSeqScanned = res.PlanHasSeqScanned || strings.Contains(line, "Seq Scan")
		}
		results = append(results, res)
	}
	return payments, results, nil
}

// printSearch writes the results as a table, then each kind's plan.
func printSearch(o options, payments int64, results []searchResult) {
	fmt.Fprintf(o.log, "payment search over %d payments, %d lookups of each kind, one at a time:\n", payments, o.search)
	fmt.Fprintf(o.log, "%-22s %8s %10s %10s %10s %s\n", "lookup", "lookups", "median", "p99", "max", "found/lookup")
	for _, r := range results {
		fmt.Fprintf(o.log, "%-22s %8d %10s %10s %10s %.2f\n", r.Name, r.Lookups, r.Median.Round(time.Microsecond),
			r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond), float64(r.Found)/float64(r.Lookups))
	}
	for _, r := range results {
		fmt.Fprintf(o.log, "\n%s:\n  %s\n", r.Name, strings.Join(r.Plan, "\n  "))
	}
}

// fillDetails takes the payments back to before paygate kept their
// details (the detail columns blank, no double charge known, the fill not
// done), then times the fill paygate runs after the upgrade
// (jobs.Client.FillPaymentDetails, resting between batches as it does).
// The fill's own log (to o.log) says how long it was busy.
func fillDetails(ctx context.Context, o options) (payments int64, took time.Duration, err error) {
	cfg, err := pgxpool.ParseConfig(o.databaseURL)
	if err != nil {
		return 0, 0, fmt.Errorf("parse database url: %w", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	logf := func(format string, args ...any) { fmt.Fprintf(o.log, "benchfill: "+format+"\n", args...) }
	began := time.Now()
	for _, stmt := range []string{
		`UPDATE payments SET reference = NULL, customer = NULL, description = NULL, metadata = '{}', details_stamps = '{}'`,
		`DELETE FROM double_charges`,
		`DELETE FROM email_outbox WHERE kind = 'double_charge'`,
		`UPDATE payment_details_fill SET after_id = '', filled = 0, done = false, started_at = NULL, finished_at = NULL`,
		`VACUUM (ANALYZE) payments`,
		`CHECKPOINT`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return 0, 0, fmt.Errorf("take the payments back to before the upgrade: %s: %w", stmt, err)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&payments); err != nil {
		return 0, 0, fmt.Errorf("count payments: %w", err)
	}
	logf("%d payments taken back to before the upgrade in %.0fs; filling", payments, time.Since(began).Seconds())
	client, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true, Logger: slog.New(slog.NewTextHandler(o.log, nil)),
		Email: jobs.EmailConfig{OpsEmail: "ops@example.com"}})
	if err != nil {
		return 0, 0, err
	}
	began = time.Now()
	if err := client.FillPaymentDetails(ctx); err != nil {
		return payments, time.Since(began), err
	}
	return payments, time.Since(began), nil
}
