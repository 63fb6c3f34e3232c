package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/ledger"
	striperef "github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

// day is the scripted UTC day most tests reconcile.
var day = time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)

type testBundle struct {
	sim      *stripesim.Sim
	world    *worldtest.World
	runner   *reconcile.Runner
	requests map[string]*atomic.Int64 // API requests per path
}

type setupOpts struct {
	pageSize int64
	retries  int64                   // stripe-go's MaxNetworkRetries; none when zero
	sim      func(*stripesim.Config) // adjusts the simulated account
}

// setup starts a world (real database, real workers) and a simulator served
// over HTTP, and a runner that reads it with stripe-go.
func setup(t *testing.T, opts *setupOpts) *testBundle {
	t.Helper()
	if opts == nil {
		opts = &setupOpts{}
	}
	simConfig := stripesim.Config{Seed: 42, Now: day.Add(9 * time.Hour)}
	if opts.sim != nil {
		opts.sim(&simConfig)
	}
	b := &testBundle{
		sim:      stripesim.New(simConfig),
		world:    worldtest.New(t, nil),
		requests: map[string]*atomic.Int64{},
	}
	for _, p := range []string{"/v1/balance_transactions", "/v1/events"} {
		b.requests[p] = &atomic.Int64{}
	}
	h := b.sim.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, ok := b.requests[r.URL.Path]; ok {
			n.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	provider, err := striperef.NewAPI(striperef.APIConfig{
		APIKey: b.sim.APIKey(), URL: srv.URL, PageSize: opts.pageSize, MaxNetworkRetries: stripe.Int64(opts.retries),
	})
	require.NoError(t, err)
	b.runner = reconcile.New(reconcile.Config{
		Pool:         b.world.Pool,
		Provider:     provider,
		Ingester:     ingester(b.world),
		RecoveryWait: 30 * time.Second,
		PollInterval: 10 * time.Millisecond,
	})
	return b
}

// ingester is the webhook's ingest path, as cmd wires it.
func ingester(w *worldtest.World) reconcile.Ingester {
	return reconcile.IngesterFunc(func(ctx context.Context, payload []byte) (bool, error) {
		ev, err := striperef.DecodeEvent(payload)
		if err != nil {
			return false, err
		}
		return w.Ingester.Ingest(ctx, ev)
	})
}

func (b *testBundle) deliver(t *testing.T) {
	t.Helper()
	b.world.Apply(t, b.sim.Deliverable()...)
}

func (b *testBundle) run(t *testing.T, d time.Time) (reconcile.Run, []reconcile.Item) {
	t.Helper()
	run, err := b.runner.RunDay(context.Background(), d, reconcile.TriggerCLI, "test")
	require.NoError(t, err)
	require.Equal(t, reconcile.RunCompleted, run.Status)
	items, err := reconcile.Items(context.Background(), b.world.Pool, run.ID)
	require.NoError(t, err)
	return run, items
}

func find(t *testing.T, items []reconcile.Item, match func(reconcile.Item) bool) reconcile.Item {
	t.Helper()
	var found []reconcile.Item
	for _, it := range items {
		if match(it) {
			found = append(found, it)
		}
	}
	require.Len(t, found, 1, "items: %v", items)
	return found[0]
}

func byRef(ref string) func(reconcile.Item) bool {
	return func(it reconcile.Item) bool { return it.Ref == ref }
}

// learnReference gives payment id the merchant's order reference, as
// applying an event that carries it does.
func learnReference(t *testing.T, w *worldtest.World, id, reference string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		p, err := ledger.LockPaymentTx(ctx, tx, "stripe", id)
		if err != nil {
			return err
		}
		p.Details.Reference = reference
		return ledger.SavePaymentTx(ctx, tx, p, p.State, "evt_reference_"+id)
	}))
}

func countRefs(t *testing.T, b *testBundle, like string) int {
	return b.world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE ref LIKE $1`, like)
}

// TestScriptedDayProducesEveryStatus reconciles a day with one of each
// outcome, then re-runs it: the re-run is a new run, the first is kept
// untouched, and the fees posted by the first are matched by the second,
// posted once.
func TestScriptedDayProducesEveryStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	sim := b.sim

	p1 := sim.Pay(stripesim.PayOpts{Amount: 10000, Email: "a@example.com", Metadata: map[string]string{"order_id": "ord-1042"}})
	p2 := sim.Pay(stripesim.PayOpts{Amount: 5000})
	r2 := sim.Refund(p2, 2000)
	p3 := sim.Pay(stripesim.PayOpts{Amount: 7000})
	dp := sim.Dispute(p3, 0)
	sim.Advance(time.Hour)
	sim.CloseDispute(dp, true)
	p4 := sim.Pay(stripesim.PayOpts{Amount: 3000})
	r4 := sim.FailRefund(sim.Refund(p4, 0).ID)
	po := sim.Payout(1000, "usd")
	sim.FailPayout(po)
	radar := sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Amount: -75})
	p5 := sim.Pay(stripesim.PayOpts{Amount: 4000})
	sim.TamperBalanceTransaction(p5.BalanceTransactionID, 4100)
	p6 := sim.Pay(stripesim.PayOpts{Amount: 2500})
	sim.TamperBalanceTransactionCurrency(p6.BalanceTransactionID, "eur")
	p7 := sim.Pay(stripesim.PayOpts{Amount: 1500})
	sim.DropBalanceTransaction(p7.BalanceTransactionID)
	ghost := sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Type: stripesim.TxnCharge, Source: "ch_ghost", Amount: 900})
	other := sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Type: stripesim.TxnAdjustment, Amount: 500})
	b.deliver(t)

	run, items := b.run(t, day)
	require.Equal(t, map[reconcile.Status]int{
		reconcile.StatusMatched:           11, // 4 captures, 2 refunds, a refund reversal, the dispute's 2 movements, the payout and its reversal
		reconcile.StatusAmountMismatch:    1,
		reconcile.StatusCurrencyMismatch:  1,
		reconcile.StatusMissingInLedger:   2,
		reconcile.StatusMissingAtProvider: 1,
		reconcile.StatusFeePosted:         9, // 6 charge fees, the dispute fee and its refund, the Radar fee
	}, run.Report.Summary)
	require.Equal(t, 0, run.Report.Recovery.Recovered)
	require.Equal(t, len(items), run.Report.Counts.Items)

	cap1 := find(t, items, byRef("stripe:charge:"+p1.ChargeID+":capture"))
	require.Equal(t, []string{"matched", p1.BalanceTransactionID, p1.ChargeID, "stripe:charge:" + p1.ChargeID + ":capture",
		"charge", "usd", "100.00", "3.20", "100.00", "", "", ""}, cap1.Record()[:12])
	require.Equal(t, []string{strconv.FormatInt(run.ID, 10), p1.ID, "", "", "", "", "", "ord-1042"}, cap1.Record()[13:],
		"stored with its run, tied to its payment and its order, open")
	require.Equal(t, "reference", reconcile.CSVHeader[len(reconcile.CSVHeader)-1], "the column added last")
	require.NotZero(t, cap1.ID)
	fee1 := find(t, items, byRef("stripe:fee:"+p1.BalanceTransactionID))
	require.Equal(t, []string{"fee_posted", p1.BalanceTransactionID, p1.ChargeID, "stripe:fee:" + p1.BalanceTransactionID,
		"fee", "usd", "-3.20", "", "-3.20", "", "", ""}, fee1.Record()[:12])
	require.Equal(t, p1.ID, fee1.PaymentID, "the fee posted by the run is the payment's too")
	require.Equal(t, "ord-1042", fee1.Reference, "and names its order")
	require.Empty(t, find(t, items, byRef("stripe:refund:"+r2.ID)).Reference, "a payment without a reference")
	require.Empty(t, find(t, items, byRef("stripe:payout:"+po.ID)).Reference, "a movement of no payment")
	require.Equal(t, []string{"matched", "-20.00", "-20.00"}, pick(find(t, items, byRef("stripe:refund:"+r2.ID)).Record(), 0, 6, 8))
	require.Equal(t, []string{"matched", "30.00", "30.00"}, pick(find(t, items, byRef("stripe:refund:"+r4.ID+":reversal")).Record(), 0, 6, 8))
	require.Equal(t, []string{"matched", "-70.00", "15.00", "-70.00"}, pick(find(t, items, byRef("stripe:dispute:"+dp.ID+":withdrawal")).Record(), 0, 6, 7, 8))
	require.Equal(t, []string{"fee_posted", "-15.00", "-15.00"}, pick(find(t, items, byRef("stripe:fee:"+dp.WithdrawalBalanceTransactionID)).Record(), 0, 6, 8))
	require.Equal(t, []string{"fee_posted", "15.00", "15.00"}, pick(find(t, items, byRef("stripe:fee:"+dp.ReinstatementBalanceTransactionID)).Record(), 0, 6, 8),
		"a won dispute's fee comes back")
	require.Equal(t, []string{"matched", "-10.00", "-10.00"}, pick(find(t, items, byRef("stripe:payout:"+po.ID)).Record(), 0, 6, 8))
	require.Equal(t, []string{"matched", "10.00", "10.00"}, pick(find(t, items, byRef("stripe:payout:"+po.ID+":reversal")).Record(), 0, 6, 8))
	require.Equal(t, []string{"fee_posted", "stripe_fee", "-0.75", "0.00", "-0.75"}, pick(find(t, items, byRef("stripe:fee:"+radar.ID)).Record(), 0, 4, 6, 7, 8))
	require.Equal(t, []string{"amount_mismatch", "41.00", "40.00"}, pick(find(t, items, byRef("stripe:charge:"+p5.ChargeID+":capture")).Record(), 0, 6, 8))
	cm := find(t, items, byRef("stripe:charge:"+p6.ChargeID+":capture"))
	require.Equal(t, []string{"currency_mismatch", "eur", "25.00", "25.00"}, pick(cm.Record(), 0, 5, 6, 8))
	require.Equal(t, "usd", cm.LedgerCurrency)
	require.Equal(t, []string{"missing_at_provider", "", "", "capture", "usd", "", "", "15.00"},
		pick(find(t, items, byRef("stripe:charge:"+p7.ChargeID+":capture")).Record(), 0, 1, 2, 4, 5, 6, 7, 8))
	require.Equal(t, []string{"missing_in_ledger", "ch_ghost", "9.00", ""}, pick(find(t, items, byRef("stripe:charge:ch_ghost:capture")).Record(), 0, 2, 6, 8))
	require.Equal(t, []string{"missing_in_ledger", "", "adjustment", "5.00", ""},
		pick(find(t, items, func(it reconcile.Item) bool { return it.ProviderTxnID == other.ID }).Record(), 0, 3, 4, 6, 8))
	require.Empty(t, ghost.Fee)

	// The fee went to the payment's ledger too.
	fee, err := ledger.TransactionByRef(context.Background(), b.world.Pool, "stripe:fee:"+p1.BalanceTransactionID)
	require.NoError(t, err)
	require.Equal(t, ledger.KindFee, fee.Kind)
	require.Equal(t, p1.ID, fee.PaymentID)

	// Per currency and category, in decimal: charges in usd differ by the
	// tampered 1.00, the ghost 9.00 the ledger lacks and the 15.00 the
	// provider lacks.
	var usdCharge reconcile.CategoryTotal
	for _, c := range run.Report.Currencies {
		for _, cat := range c.Categories {
			if c.Currency == "usd" && cat.ReportingCategory == "charge" {
				usdCharge = cat
			}
		}
	}
	require.Equal(t, "300.00", usdCharge.ProviderGross)
	require.Equal(t, "305.00", usdCharge.LedgerGross)
	require.Equal(t, usdCharge.ProviderFee, usdCharge.LedgerFee, "every charge fee was posted")
	require.Equal(t, "-5.00", usdCharge.Difference)

	// The payout settled everything before it, all on this day.
	require.Len(t, run.Report.Payouts, 1)
	pay := run.Report.Payouts[0]
	require.Equal(t, po.ID, pay.PayoutID)
	require.Equal(t, "10.00", pay.Amount)
	require.Positive(t, pay.SettledCount)
	require.Len(t, pay.SettledDays, 1)
	require.Equal(t, "2025-03-14", pay.SettledDays[0].Date)

	// The books still balance.
	tb, err := ledger.TrialBalance(context.Background(), b.world.Pool)
	require.NoError(t, err)
	for _, c := range tb.Currencies {
		require.True(t, c.Balanced, c.Currency)
	}
	fees := countRefs(t, b, "stripe:fee:%")
	require.Equal(t, 9, fees)

	// p2 learns its order after the run: the run's items and CSV stay what
	// the run found; the re-run names it.
	var csvBefore strings.Builder
	require.NoError(t, reconcile.WriteRunCSV(context.Background(), b.world.Pool, &csvBefore, run.ID))
	learnReference(t, b.world, p2.ID, "ord-2002")

	// A re-run is a new run; the fees are in the ledger now, so they match.
	again, items2 := b.run(t, day)
	require.Equal(t, "ord-2002", find(t, items2, byRef("stripe:refund:"+r2.ID)).Reference)
	var csvAfter strings.Builder
	require.NoError(t, reconcile.WriteRunCSV(context.Background(), b.world.Pool, &csvAfter, run.ID))
	require.Equal(t, csvBefore.String(), csvAfter.String(), "a run's CSV never changes")
	require.NotContains(t, csvAfter.String(), "ord-2002")
	require.Contains(t, csvAfter.String(), ",ord-1042\n")
	require.NotEqual(t, run.ID, again.ID)
	require.Equal(t, 20, again.Report.Summary[reconcile.StatusMatched])
	require.Equal(t, 0, again.Report.Summary[reconcile.StatusFeePosted])
	require.Equal(t, len(items), len(items2))
	require.Equal(t, fees, countRefs(t, b, "stripe:fee:%"), "each fee is posted once across runs")
	require.Equal(t, []string{"matched", "-3.20", "-3.20"}, pick(find(t, items2, byRef("stripe:fee:"+p1.BalanceTransactionID)).Record(), 0, 6, 8))

	// The first run is kept as it was.
	kept, err := reconcile.GetRun(context.Background(), b.world.Pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, run.Report.Summary, kept.Report.Summary)
	keptItems, err := reconcile.Items(context.Background(), b.world.Pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, items, keptItems)
	runs, err := reconcile.RunsOfDay(context.Background(), b.world.Pool, day)
	require.NoError(t, err)
	require.Len(t, runs, 2)

	// And the database refuses to change it.
	for _, stmt := range []string{
		`UPDATE reconciliation_items SET status = 'matched' WHERE run_id = $1`,
		`DELETE FROM reconciliation_items WHERE run_id = $1`,
		`UPDATE reconciliation_runs SET status = 'failed' WHERE id = $1`,
		`DELETE FROM reconciliation_runs WHERE id = $1`,
		`INSERT INTO reconciliation_items (run_id, position, status, type, reporting_category, currency) VALUES ($1, 999, 'matched', 'charge', 'charge', 'usd')`,
	} {
		_, err := b.world.Pool.Exec(context.Background(), stmt, run.ID)
		require.ErrorContains(t, err, "reconciliation", stmt)
	}
	_, err = b.world.Pool.Exec(context.Background(), `TRUNCATE reconciliation_items`)
	require.Error(t, err)
}

func pick(rec []string, idx ...int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = rec[j]
	}
	return out
}

// TestPagination reconciles a day of more than 100 balance transactions with
// Stripe's default page size of 100, and again with small pages.
func TestPagination(t *testing.T) {
	t.Parallel()
	for _, pageSize := range []int64{0, 7} {
		b := setup(t, &setupOpts{pageSize: pageSize})
		var skipped []string
		for i := range 110 {
			p := b.sim.Pay(stripesim.PayOpts{Amount: int64(1000 + i)})
			if i%37 == 0 {
				ev := b.sim.EventsOf(p.ID)
				last := ev[len(ev)-1] // payment_intent.succeeded; charge.succeeded still posts the capture
				b.sim.SkipEvent(last.ID)
				skipped = append(skipped, last.ID)
			}
			if i%10 == 9 {
				b.sim.Advance(time.Minute)
			}
		}
		b.deliver(t)
		run, items := b.run(t, day)
		require.Equal(t, 110, run.Report.Counts.ProviderTransactions, "page size %d", pageSize)
		require.Equal(t, 110, run.Report.Summary[reconcile.StatusMatched])
		require.Equal(t, 110, run.Report.Summary[reconcile.StatusFeePosted])
		require.Len(t, items, 220)
		require.Equal(t, 220, run.Report.Recovery.Listed)
		require.ElementsMatch(t, skipped, run.Report.Recovery.EventIDs, "events on every page are recovered")
		size := pageSize
		if size == 0 {
			size = 100
		}
		// Pages for the day's list, plus one page per payout lookup (none).
		require.Equal(t, int64((110+size-1)/size), b.requests["/v1/balance_transactions"].Load(), "page size %d", size)
		require.Equal(t, int64((220+size-1)/size), b.requests["/v1/events"].Load(), "page size %d", size)
		seen := map[string]bool{}
		for _, it := range items {
			key := it.Ref
			require.False(t, seen[key], "%s listed twice", key)
			seen[key] = true
		}
	}
}

// TestUTCDayBoundary puts records at 23:59:59 and 00:00:00 on both sides
// of midnight, and a manual capture authorized at 23:59:30 and captured at
// 00:00:10: the ledger dates it at the capture, as the provider does,
// whichever of its events arrives, so it is the next day's. A payout
// created at 23:59:50 whose balance transaction the provider books at
// 00:00:20 is a timing difference of the first day, not a record missing
// at the provider, matched by the next day's run.
func TestUTCDayBoundary(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	sim := b.sim
	sim.SetNow(day)
	first := sim.Pay(stripesim.PayOpts{Amount: 1000})
	sim.SetNow(day.Add(24*time.Hour - time.Second))
	last := sim.Pay(stripesim.PayOpts{Amount: 2000})
	sim.SetNow(day.Add(24*time.Hour - 30*time.Second))
	manual := sim.Pay(stripesim.PayOpts{Amount: 3000, ManualCapture: true})
	sim.SetNow(day.Add(24 * time.Hour))
	next := sim.Pay(stripesim.PayOpts{Amount: 4000})
	sim.SetNow(day.Add(24*time.Hour + 10*time.Second))
	sim.Capture(manual)
	sim.SetNow(day.Add(24*time.Hour + 20*time.Second))
	po := sim.Payout(500, "usd")

	// Deliver everything but the capture's payment_intent.succeeded (its
	// charge.captured alone dates the capture) and, for the payout, a
	// payout.paid whose payout was created before midnight.
	var deliver []stripesim.Event
	for _, ev := range sim.Deliverable() {
		switch {
		case ev.Type == stripesim.EventPaymentIntentSucceeded && ev.PaymentIntentID == manual.ID:
			continue
		case ev.Type == stripesim.EventPayoutPaid:
			var env struct {
				Data struct {
					Object map[string]any `json:"object"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(ev.Payload, &env))
			env.Data.Object["created"] = day.Add(24*time.Hour - 10*time.Second).Unix()
			sim.SkipEvent(ev.ID)
			ev = sim.Emit(stripesim.EventPayoutPaid, env.Data.Object)
		}
		deliver = append(deliver, ev)
	}
	b.world.Apply(t, deliver...)
	capRef := striperef.CaptureRef(manual.ChargeID)
	tx, err := ledger.TransactionByRef(context.Background(), b.world.Pool, capRef)
	require.NoError(t, err)
	require.Equal(t, day.Add(24*time.Hour+10*time.Second), tx.OccurredAt, "dated at the capture, not the authorization")

	run, items := b.run(t, day)
	refs := map[string]reconcile.Status{}
	for _, it := range items {
		refs[it.Ref] = it.Status
	}
	require.Equal(t, reconcile.StatusMatched, refs[striperef.CaptureRef(first.ChargeID)], "00:00:00 belongs to the day")
	require.Equal(t, reconcile.StatusMatched, refs[striperef.CaptureRef(last.ChargeID)], "23:59:59 belongs to the day")
	require.NotContains(t, refs, striperef.CaptureRef(next.ChargeID), "00:00:00 the next day does not")
	require.NotContains(t, refs, capRef, "the manual capture is the next day's")
	require.Zero(t, run.Report.Summary[reconcile.StatusMissingAtProvider])
	require.Len(t, run.Report.TimingDifferences, 1)
	td := run.Report.TimingDifferences[0]
	require.Equal(t, striperef.PayoutRef(po.ID), td.Ref)
	require.Equal(t, po.BalanceTransactionID, td.ProviderTxnID)
	require.Equal(t, "2025-03-15", td.ProviderCreated.Format(reconcile.DateLayout))
	require.Equal(t, 2, run.Report.Counts.ProviderTransactions)

	// The next day's run matches the capture and the payout by ref, though
	// the ledger dated the payout the day before, and recovers the
	// undelivered events (duplicates: nothing new is posted).
	next2, items2 := b.run(t, day.AddDate(0, 0, 1))
	require.Equal(t, reconcile.StatusMatched, find(t, items2, byRef(capRef)).Status)
	require.Equal(t, reconcile.StatusMatched, find(t, items2, byRef(striperef.CaptureRef(next.ChargeID))).Status)
	require.Equal(t, reconcile.StatusMatched, find(t, items2, byRef(striperef.PayoutRef(po.ID))).Status)
	require.Zero(t, next2.Report.Summary[reconcile.StatusMissingAtProvider])
	require.Empty(t, next2.Report.TimingDifferences)
}

// TestMissedEventRecovery: a payout.paid that Stripe never delivered is
// listed by the provider, fed through the ingest path before matching, and
// its posting counts in the same run.
func TestMissedEventRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.sim.Pay(stripesim.PayOpts{Amount: 5000})
	po := b.sim.Payout(2000, "usd")
	paid := b.sim.EventsOf(po.ID)
	require.Len(t, paid, 1)
	b.sim.SkipEvent(paid[0].ID)
	b.deliver(t)
	_, err := inbox.Get(context.Background(), b.world.Pool, "stripe", paid[0].ID)
	require.ErrorIs(t, err, inbox.ErrNotFound)
	require.Zero(t, countRefs(t, b, "stripe:payout:%"))

	run, items := b.run(t, day)
	require.Equal(t, 1, run.Report.Recovery.Recovered)
	require.Equal(t, 1, run.Report.Counts.RecoveredEvents)
	require.Equal(t, 1, run.Report.Recovery.Settled)
	require.Equal(t, []string{paid[0].ID}, run.Report.Recovery.EventIDs)
	require.Equal(t, 3, run.Report.Recovery.Listed)

	ev, err := inbox.Get(context.Background(), b.world.Pool, "stripe", paid[0].ID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusProcessed, ev.Status)
	require.JSONEq(t, string(paid[0].Payload), string(ev.Payload), "the provider's JSON for the event, as listed")
	tx, err := ledger.TransactionByRef(context.Background(), b.world.Pool, "stripe:payout:"+po.ID)
	require.NoError(t, err)
	require.Equal(t, "20.00", ledger.Format(tx.Amount(), "usd"))
	require.Equal(t, reconcile.StatusMatched, find(t, items, byRef("stripe:payout:"+po.ID)).Status)
	require.Zero(t, run.Report.Summary[reconcile.StatusMissingInLedger])

	// Nothing is left to recover the second time.
	again, _ := b.run(t, day)
	require.Zero(t, again.Report.Recovery.Recovered)
}

// TestProviderFailureFailsTheRun: a key the provider refuses fails the run
// with the provider's reason; nothing is stored but the failed run.
func TestProviderFailureFailsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	srv := b.sim.Start(t)
	provider, err := striperef.NewAPI(striperef.APIConfig{APIKey: "sk_test_wrong", URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	runner := reconcile.New(reconcile.Config{Pool: b.world.Pool, Provider: provider})
	run, err := runner.RunDay(context.Background(), day, reconcile.TriggerCLI, "test")
	require.ErrorIs(t, err, reconcile.ErrProvider)
	require.Equal(t, reconcile.RunFailed, run.Status)
	require.NotNil(t, run.FinishedAt)
	require.True(t, strings.Contains(run.Error, "Invalid API Key"), run.Error)
	items, err := reconcile.Items(context.Background(), b.world.Pool, run.ID)
	require.NoError(t, err)
	require.Empty(t, items)

	_, err = striperef.NewAPI(striperef.APIConfig{URL: srv.URL})
	require.ErrorIs(t, err, striperef.ErrNoAPIKey)
}

// TestScheduledRunIsOncePerDay: the day's scheduled run is created once,
// whoever asks and however often.
func TestScheduledRunIsOncePerDay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	first, created, err := reconcile.ScheduledRun(ctx, b.world.Pool, reconcile.DayScope(striperef.Name, day))
	require.NoError(t, err)
	require.True(t, created)
	second, created, err := reconcile.ScheduledRun(ctx, b.world.Pool, reconcile.DayScope(striperef.Name, day))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, second.ID)
	// On-demand runs of the same day are not limited.
	_, err = reconcile.CreateRunTx(ctx, b.world.Pool, reconcile.DayScope(striperef.Name, day), reconcile.TriggerAPI, "token:x")
	require.NoError(t, err)
	_, created, err = reconcile.ScheduledRun(ctx, b.world.Pool, reconcile.DayScope(striperef.Name, day.AddDate(0, 0, -1)))
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 2, b.world.Count(t, `SELECT count(*) FROM reconciliation_runs WHERE trigger = 'scheduled'`))
}

// flakyPayouts fails the payout listing once, after the fees are posted.
type flakyPayouts struct {
	reconcile.Provider
	failed atomic.Bool
}

func (f *flakyPayouts) PayoutTransactions(ctx context.Context, id string) ([]reconcile.BalanceTransaction, error) {
	if f.failed.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%w: connection reset", reconcile.ErrProvider)
	}
	return f.Provider.PayoutTransactions(ctx, id)
}

// TestRetriedAttemptKeepsItsFees: an attempt that fails after posting fees
// stores nothing; the retry completes the same run and still reports the
// fees as posted by it (the ledger marks them with the run), once.
func TestRetriedAttemptKeepsItsFees(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.sim.Pay(stripesim.PayOpts{Amount: 10000})
	b.sim.Payout(5000, "usd")
	b.deliver(t)
	srv := b.sim.Start(t)
	inner, err := striperef.NewAPI(striperef.APIConfig{APIKey: b.sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	runner := reconcile.New(reconcile.Config{Pool: b.world.Pool, Provider: &flakyPayouts{Provider: inner}})

	ctx := context.Background()
	run, err := reconcile.CreateRunTx(ctx, b.world.Pool, reconcile.DayScope(striperef.Name, day), reconcile.TriggerAPI, "test")
	require.NoError(t, err)
	_, err = runner.Perform(ctx, run.ID)
	require.ErrorIs(t, err, reconcile.ErrProvider)
	require.NoError(t, runner.NoteError(ctx, run.ID, err))
	require.Equal(t, 1, countRefs(t, b, "stripe:fee:%"), "the first attempt posted the charge's fee")
	items, err := reconcile.Items(ctx, b.world.Pool, run.ID)
	require.NoError(t, err)
	require.Empty(t, items)
	running, err := reconcile.GetRun(ctx, b.world.Pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.RunRunning, running.Status)
	require.Contains(t, running.Error, "connection reset")

	done, err := runner.Perform(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.RunCompleted, done.Status)
	require.Empty(t, done.Error)
	require.Equal(t, 1, done.Report.Summary[reconcile.StatusFeePosted])
	require.Equal(t, 1, countRefs(t, b, "stripe:fee:%"))

	_, err = runner.Perform(ctx, run.ID)
	require.ErrorIs(t, err, reconcile.ErrRunFinished)
}

// TestPayoutTheProviderCannotList: a payout the provider refuses to filter
// by keeps the reason in the report; the run completes.
func TestPayoutTheProviderCannotList(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Type: stripesim.TxnPayout, Source: "po_manual", Amount: -100})
	run, items := b.run(t, day)
	require.Len(t, run.Report.Payouts, 1)
	require.Equal(t, "po_manual", run.Report.Payouts[0].PayoutID)
	require.Contains(t, run.Report.Payouts[0].Error, "No such payout")
	require.Equal(t, reconcile.StatusMissingInLedger, find(t, items, byRef("stripe:payout:po_manual")).Status)
}
