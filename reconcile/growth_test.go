package reconcile_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/ledger"
	striperef "github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

// tracedPool is a second pool on the world's database whose statements c
// counts, so that the runner's own work is measured apart from the workers'.
func tracedPool(t *testing.T, w *worldtest.World, c *testdb.StatementCounter) *pgxpool.Pool {
	t.Helper()
	return testdb.TracedPool(t, w.URL, c)
}

// growthCost is what one run of growthDay(n) cost.
type growthCost struct {
	requests     map[string]int
	statements   int64
	transactions int64
}

// growthDay scripts a day that has n of everything that used to cost a
// request or a statement each: n card payments whose fee the ledger lacks
// and whose payment_intent.succeeded never arrived (recovered by the run),
// n payments in another currency whose conversion the run books, and n
// payouts the ledger dates before midnight and the provider books after
// it (timing differences), besides one capture the provider dropped
// (missing at the provider, found by no list). It runs the day and returns
// the run's cost.
func growthDay(t *testing.T, n int) (reconcile.Run, growthCost) {
	t.Helper()
	sim := stripesim.New(stripesim.Config{Seed: 16, Now: day.Add(9 * time.Hour), SettlementCurrency: "usd",
		ExchangeRates: map[string]string{"eur": "1.0852"}})
	world := worldtest.New(t, nil)
	var recover []string
	for i := range n {
		p := sim.Pay(stripesim.PayOpts{Amount: int64(1000 + i)})
		ev := sim.EventsOf(p.ID)
		last := ev[len(ev)-1]
		require.Equal(t, stripesim.EventPaymentIntentSucceeded, last.Type)
		sim.SkipEvent(last.ID) // charge.succeeded still posts the capture
		recover = append(recover, last.ID)
		sim.Pay(stripesim.PayOpts{Amount: int64(2000 + i), Currency: "eur"})
		sim.Advance(time.Minute)
	}
	dropped := sim.Pay(stripesim.PayOpts{Amount: 777})
	sim.DropBalanceTransaction(dropped.BalanceTransactionID)

	sim.SetNow(day.Add(24*time.Hour + 20*time.Second))
	for range n {
		po := sim.Payout(100, "usd")
		paid := sim.EventsOf(po.ID)
		require.Len(t, paid, 1)
		var env struct {
			Data struct {
				Object map[string]any `json:"object"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(paid[0].Payload, &env))
		env.Data.Object["created"] = day.Add(24*time.Hour - 10*time.Second).Unix()
		sim.SkipEvent(paid[0].ID)
		sim.Emit(stripesim.EventPayoutPaid, env.Data.Object)
	}
	world.Apply(t, sim.Deliverable()...)

	srv := sim.Start(t)
	provider, err := striperef.NewAPI(striperef.APIConfig{APIKey: sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	counter := &testdb.StatementCounter{}
	runner := reconcile.New(reconcile.Config{
		Pool:     tracedPool(t, world, counter),
		Provider: provider,
		// Recovered events are applied before the ingester returns, so the
		// run's wait looks once: its statement count does not depend on how
		// fast the workers are.
		Ingester: reconcile.IngesterFunc(func(ctx context.Context, payload []byte) (bool, error) {
			ev, err := striperef.DecodeEvent(payload)
			if err != nil {
				return false, err
			}
			duplicate, err := world.Ingester.Ingest(ctx, ev)
			world.Settle(t)
			return duplicate, err
		}),
		RecoveryWait: 30 * time.Second,
		PollInterval: 10 * time.Millisecond,
	})
	before := sim.Requests()
	require.Empty(t, before)
	run, err := runner.RunDay(context.Background(), day, reconcile.TriggerCLI, "test")
	require.NoError(t, err)
	require.Equal(t, reconcile.RunCompleted, run.Status)

	r := run.Report
	require.Equal(t, 2*n, r.Counts.ProviderTransactions, "n usd and n eur charges; the dropped one is not listed, the payouts are the next day's")
	require.Equal(t, n, r.Recovery.Recovered)
	require.ElementsMatch(t, recover, r.Recovery.EventIDs)
	require.Equal(t, 2*n, r.Summary[reconcile.StatusMatched], "every capture, the converted ones in usd")
	require.Equal(t, 2*n, r.Summary[reconcile.StatusFeePosted])
	require.Equal(t, 1, r.Summary[reconcile.StatusMissingAtProvider])
	require.Len(t, r.TimingDifferences, n)
	require.Equal(t, n, world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE ref LIKE 'stripe:fx:%:usd'`))
	return run, growthCost{requests: sim.Requests(), statements: counter.Statements(), transactions: counter.Transactions()}
}

// TestRunCostDoesNotGrowWithTheDay reconciles a small and a larger day of
// the same shape: the provider requests, the database statements and the
// transactions the run makes are the same for both (every list fits one
// page here; pages are the only thing that grows, a request per 100
// records).
func TestRunCostDoesNotGrowWithTheDay(t *testing.T) {
	t.Parallel()
	_, small := growthDay(t, 2)
	_, large := growthDay(t, 8)
	t.Logf("n=2: %d requests %v, %d statements, %d transactions", total(small.requests), small.requests, small.statements, small.transactions)
	t.Logf("n=8: %d requests %v, %d statements, %d transactions", total(large.requests), large.requests, large.statements, large.transactions)
	require.Equal(t, small.requests, large.requests, "provider requests per route")
	require.Equal(t, small.statements, large.statements, "database statements")
	require.Equal(t, small.transactions, large.transactions, "database transactions")
	require.LessOrEqual(t, total(large.requests), 6, "a page of events, of the day, of the window past midnight, and the one capture no list finds")
}

func total(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// hookTracer runs once before the first statement that matches.
type hookTracer struct {
	match string
	once  sync.Once
	hook  func()
}

func (h *hookTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, h.match) {
		h.once.Do(h.hook)
	}
	return ctx
}

func (h *hookTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestFeePostedMeanwhileWithOtherContent: a fee the run found missing is
// posted by someone else, with another amount, just before the run's batch
// of fees: the batch still posts the others, and the item compares with
// what the ledger holds.
func TestFeePostedMeanwhileWithOtherContent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p1 := b.sim.Pay(stripesim.PayOpts{Amount: 10000})
	p2 := b.sim.Pay(stripesim.PayOpts{Amount: 5000})
	b.deliver(t)
	ctx := context.Background()
	ref := striperef.FeeRef(p1.BalanceTransactionID)
	hook := &hookTracer{match: "INSERT INTO ledger_transactions", hook: func() {
		fee := ledger.NewFee(ref, p1.ID, "someone else", "usd", decimal.RequireFromString("1.00"), day.Add(9*time.Hour))
		require.NoError(t, pgx.BeginFunc(ctx, b.world.Pool, func(tx pgx.Tx) error {
			_, err := ledger.PostTx(ctx, tx, fee)
			return err
		}))
	}}
	pool := testdb.TracedPool(t, b.world.URL, hook)
	srv := b.sim.Start(t)
	provider, err := striperef.NewAPI(striperef.APIConfig{APIKey: b.sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	runner := reconcile.New(reconcile.Config{Pool: pool, Provider: provider})

	run, err := runner.RunDay(ctx, day, reconcile.TriggerCLI, "test")
	require.NoError(t, err)
	require.Equal(t, reconcile.RunCompleted, run.Status)
	items, err := reconcile.Items(ctx, b.world.Pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"amount_mismatch", "-3.20", "-1.00"}, pick(find(t, items, byRef(ref)).Record(), 0, 6, 8))
	require.Equal(t, reconcile.StatusFeePosted, find(t, items, byRef(striperef.FeeRef(p2.BalanceTransactionID))).Status)
	other, err := ledger.TransactionByRef(ctx, b.world.Pool, striperef.FeeRef(p2.BalanceTransactionID))
	require.NoError(t, err)
	require.Equal(t, reconcile.PostedBy(run.ID), other.EventID)
}
