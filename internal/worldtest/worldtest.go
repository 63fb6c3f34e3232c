// Package worldtest runs paygate's ingest path and workers against a real
// database for tests: it feeds events through the same Ingester the webhook
// handler uses, runs a real River client, waits until every event settled,
// and snapshots the payments and the ledger for comparison.
//
// It must never be imported by production code.
package worldtest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

// T is what the helpers need of a test: *testing.T and *rapid.T both fit.
type T interface {
	require.TestingT
	Helper()
	Fatalf(format string, args ...any)
}

// World is one database with running workers.
type World struct {
	Pool     *pgxpool.Pool
	URL      string
	Jobs     *jobs.Client
	Ingester webhook.Ingester
}

// Opts tunes a World.
type Opts struct {
	Config func(*jobs.Config) // adjusts the workers' configuration
}

// New starts a World on a fresh database; it stops at cleanup.
func New(t testing.TB, opts *Opts) *World {
	t.Helper()
	pool, url := testdb.NewWithURL(t)
	cfg := jobs.Config{
		FetchCooldown:      5 * time.Millisecond,
		FetchPollInterval:  50 * time.Millisecond,
		ProcessMaxAttempts: 3,
	}
	if opts != nil && opts.Config != nil {
		opts.Config(&cfg)
	}
	client, err := jobs.NewClient(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, client.River.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.River.StopAndCancel(ctx)
	})
	return &World{Pool: pool, URL: url, Jobs: client, Ingester: &webhook.TxIngester{Pool: pool, Enqueue: client}}
}

// Ingest commits Stripe events as the webhook handler would, in the order
// given.
func (w *World) Ingest(t T, events ...stripesim.Event) {
	t.Helper()
	w.IngestEvents(t, decodeStripe(t, events)...)
}

func decodeStripe(t T, events []stripesim.Event) []provider.Event {
	t.Helper()
	out := make([]provider.Event, len(events))
	for i, e := range events {
		ev, err := stripe.DecodeEvent(e.Payload)
		require.NoError(t, err)
		out[i] = ev
	}
	return out
}

// IngestEvents commits any provider's events, each as its own request, in
// the order given.
func (w *World) IngestEvents(t T, events ...provider.Event) {
	t.Helper()
	for _, ev := range events {
		_, err := w.Ingester.Ingest(context.Background(), ev)
		require.NoError(t, err)
	}
}

// ApplyEvents ingests any provider's events and waits for them to settle.
func (w *World) ApplyEvents(t T, events ...provider.Event) {
	t.Helper()
	w.IngestEvents(t, events...)
	w.Settle(t)
}

// ApplyEventsAtOnce is ApplyAtOnce for any provider's events.
func (w *World) ApplyEventsAtOnce(t T, events ...provider.Event) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, w.Jobs.River.QueuePause(ctx, jobs.QueueEvents, nil))
	w.IngestEvents(t, events...)
	require.NoError(t, w.Jobs.River.QueueResume(ctx, jobs.QueueEvents, nil))
	w.Settle(t)
}

// Settle waits until no event is left in status received and no job of the
// events queue is pending.
func (w *World) Settle(t T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var pending int
		err := w.Pool.QueryRow(context.Background(), `
			SELECT (SELECT count(*) FROM inbox_events WHERE status = 'received')
			     + (SELECT count(*) FROM river_job WHERE queue = $1 AND state IN ('available', 'running', 'retryable', 'scheduled'))`,
			jobs.QueueEvents).Scan(&pending)
		require.NoError(t, err)
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worldtest: %d events or jobs still pending after 60s", pending)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Apply ingests events and waits for them to settle.
func (w *World) Apply(t T, events ...stripesim.Event) {
	t.Helper()
	w.Ingest(t, events...)
	w.Settle(t)
}

// ApplyAtOnce ingests events while the events queue is paused, then
// resumes it and waits for them to settle: the workers find every job at
// once, so the events are applied together, in large batches.
func (w *World) ApplyAtOnce(t T, events ...stripesim.Event) {
	t.Helper()
	w.ApplyEventsAtOnce(t, decodeStripe(t, events)...)
}

// Snapshot is what the books say about some payments, in a form that
// compares equal when the books are the same: amounts at their currency's
// scale, transactions by ref with the date the money moved, and the email
// intents with their recipients. The events that caused them are left out,
// since they name which copy of a report arrived first.
type Snapshot struct {
	Payments     map[string]string
	Transactions []string
	Emails       []string
	TrialBalance []string
}

// Snapshot reads the payments named and every ledger transaction of them
// (and the payouts among refs), plus the whole trial balance.
func (w *World) Snapshot(t T, paymentIDs []string, extraRefs ...string) Snapshot {
	t.Helper()
	ctx := context.Background()
	s := Snapshot{Payments: map[string]string{}}
	for _, id := range paymentIDs {
		p, err := ledger.GetPayment(ctx, w.Pool, id)
		require.NoError(t, err, "payment %s", id)
		s.Payments[id] = fmt.Sprintf("%s %s amount=%s captured=%s refunded=%s disputed=%s reference=%q customer=%q description=%q metadata=%v",
			p.State, p.Currency, ledger.Format(p.Amount, p.Currency), ledger.Format(p.AmountCaptured, p.Currency),
			ledger.Format(p.AmountRefunded, p.Currency), ledger.Format(p.AmountDisputed, p.Currency),
			p.Details.Reference, p.Details.Customer, p.Details.Description, p.Details.Metadata)
		txs, err := ledger.TransactionsForPayment(ctx, w.Pool, id)
		require.NoError(t, err)
		for _, tx := range txs {
			s.Transactions = append(s.Transactions, describe(tx))
		}
	}
	for _, ref := range extraRefs {
		tx, err := ledger.TransactionByRef(ctx, w.Pool, ref)
		require.NoError(t, err, "transaction %s", ref)
		s.Transactions = append(s.Transactions, describe(tx))
	}
	sort.Strings(s.Transactions)
	rows, err := w.Pool.Query(ctx, `
		SELECT kind || ' ' || object_id || ' to=' || coalesce(recipient, '')
		FROM email_outbox WHERE payment_id = ANY($1) ORDER BY kind, object_id`, paymentIDs)
	require.NoError(t, err)
	emails, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	s.Emails = emails
	tb, err := ledger.TrialBalance(ctx, w.Pool)
	require.NoError(t, err)
	for _, c := range tb.Currencies {
		s.TrialBalance = append(s.TrialBalance, fmt.Sprintf("%s debits=%s credits=%s balanced=%t",
			c.Currency, ledger.Format(c.Debits, c.Currency), ledger.Format(c.Credits, c.Currency), c.Balanced))
	}
	return s
}

func describe(tx ledger.Transaction) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s payment=%s at=%s", tx.Ref, tx.Kind, tx.Currency, tx.PaymentID, tx.OccurredAt.UTC().Format(time.RFC3339))
	for _, e := range tx.Entries {
		fmt.Fprintf(&b, " [%s dr=%s cr=%s]", e.Account, ledger.Format(e.Debit, tx.Currency), ledger.Format(e.Credit, tx.Currency))
	}
	return b.String()
}

// Status returns an event's inbox status.
func (w *World) Status(t T, eventID string) string {
	t.Helper()
	var s string
	require.NoError(t, w.Pool.QueryRow(context.Background(),
		`SELECT status FROM inbox_events WHERE provider = 'stripe' AND event_id = $1`, eventID).Scan(&s))
	return s
}

// Count runs a count query.
func (w *World) Count(t T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, w.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// LearnReference gives a Stripe payment the merchant's order reference, as
// applying an event that carries it does (the payment's state unchanged).
func LearnReference(t T, pool *pgxpool.Pool, paymentID, reference string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		p, err := ledger.LockPaymentTx(ctx, tx, "stripe", paymentID)
		if err != nil {
			return err
		}
		p.Details.Reference = reference
		return ledger.SavePaymentTx(ctx, tx, p, p.State, "evt_reference_"+paymentID)
	}))
}
