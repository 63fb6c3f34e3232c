package jobs_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

// adyenPayment is what Adyen's own account says of one payment once the
// script ran: what was captured and refunded, in Adyen's minor units.
type adyenPayment struct {
	psp                string
	currency           string
	captured, refunded int64
}

// adyenScript plays a random lifecycle on sim, days passing between steps
// as at Adyen: authorisations refused or granted in currencies whose minor
// units Adyen counts its own way (CLP with two decimals, ISK two, IDR none),
// captures days later that may fail at the scheme, cancellations (plain and
// CANCEL_OR_REFUND), refunds partial or full that may be refused, fail or be
// reversed a week later, chargebacks accepted, left open, reversed, and
// charged back a second time. It returns the items in the order Adyen sent
// them and the truth of each payment.
func adyenScript(t *rapid.T, sim *adyensim.Sim) (items []adyensim.Item, truth []adyenPayment) {
	hours := func(label string, lo, hi int) {
		sim.Advance(time.Duration(rapid.IntRange(lo, hi).Draw(t, label)) * time.Hour)
	}
	for i := range rapid.IntRange(1, 3).Draw(t, "payments") {
		name := func(s string) string { return s + "_" + string(rune('a'+i)) }
		currency := rapid.SampledFrom([]string{"EUR", "JPY", "KWD", "CLP", "ISK", "IDR"}).Draw(t, name("currency"))
		unit := int64(1)
		if currency == "CLP" || currency == "ISK" {
			unit = 100 // whole pesos and krónur: what the ledger can hold
		}
		amount := unit * rapid.Int64Range(1, 100_000).Draw(t, name("amount"))
		granted := rapid.IntRange(0, 4).Draw(t, name("refused")) > 0
		psp, it := sim.Authorise(amount, currency, name("order"), granted)
		items = append(items, it)
		if !granted {
			continue
		}
		p := adyenPayment{psp: psp, currency: currency}
		hours(name("capture_after_hours"), 0, 7*24)
		switch rapid.IntRange(0, 5).Draw(t, name("then")) {
		case 0: // left authorised
			truth = append(truth, p)
			continue
		case 1:
			_, it := sim.Cancel(psp)
			items = append(items, it)
			truth = append(truth, p)
			continue
		case 2:
			_, it := sim.CancelOrRefund(psp, "cancel")
			items = append(items, it)
			truth = append(truth, p)
			continue
		}
		capture, it := sim.Capture(psp, amount)
		items = append(items, it)
		p.captured = amount
		if rapid.IntRange(0, 5).Draw(t, name("capture_fails")) == 0 {
			hours(name("capture_fails_after_hours"), 24, 5*24)
			items = append(items, sim.CaptureFailed(psp, capture, amount))
			p.captured = 0
			truth = append(truth, p)
			continue
		}
		left := amount
		for range rapid.IntRange(0, 3).Draw(t, name("refunds")) {
			if left == 0 {
				break
			}
			hours(name("refund_after_hours"), 0, 72)
			value := left
			if !rapid.Bool().Draw(t, name("full")) {
				value = unit * rapid.Int64Range(1, left/unit).Draw(t, name("refund"))
			}
			accepted := rapid.IntRange(0, 5).Draw(t, name("refund_refused")) > 0
			refund, it := sim.Refund(psp, value, accepted)
			items = append(items, it)
			if !accepted {
				continue
			}
			left -= value
			p.refunded += value
			switch rapid.IntRange(0, 5).Draw(t, name("refund_after")) {
			case 0:
				hours(name("refund_fails_after_hours"), 24, 10*24)
				items = append(items, sim.RefundFailed(psp, refund, value))
				p.refunded -= value
			case 1:
				hours(name("refund_reversed_after_hours"), 24, 10*24)
				items = append(items, sim.RefundedReversed(psp, refund, value))
				p.refunded -= value
			}
		}
		hours(name("dispute_after_hours"), 0, 30*24)
		switch rapid.IntRange(0, 4).Draw(t, name("dispute")) {
		case 1:
			_, it := sim.Chargeback(psp, amount, "Undefended") // left open
			items = append(items, it)
		case 2:
			_, it := sim.Chargeback(psp, amount, "Accepted")
			items = append(items, it)
		case 3, 4:
			dispute, it := sim.Chargeback(psp, amount, "Pending")
			items = append(items, it)
			hours(name("dispute_reversed_after_hours"), 24, 60*24)
			items = append(items, sim.ChargebackReversed(psp, dispute, amount))
			if rapid.Bool().Draw(t, name("second_chargeback")) {
				hours(name("second_chargeback_after_hours"), 24, 30*24)
				items = append(items, sim.SecondChargeback(psp, dispute, amount))
			}
		}
		truth = append(truth, p)
	}
	return items, truth
}

// adyenEvents turns items into the events the webhook files, through
// paygate's own Receiver: each item arrives as a batch of its own.
func adyenEvents(t *rapid.T, sim *adyensim.Sim, items []adyensim.Item) []provider.Event {
	r, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{sim.HMACKey()}})
	require.NoError(t, err)
	var events []provider.Event
	for _, it := range items {
		evs, err := r.Receive(http.Header{}, sim.Batch(false, it), sim.Now())
		require.NoError(t, err)
		events = append(events, evs...)
	}
	return events
}

// TestAdyenAnyOrderAnyDuplicatesSameBooks is the order property for Adyen's
// lifecycles: the same items applied one at a time in the order Adyen sent
// them, shuffled with duplicates through concurrent workers, and shuffled
// with duplicates all at once give the same payments and the same ledger,
// balanced; and the books agree with what Adyen's account says was
// captured and refunded (invariants 3 and 8).
func TestAdyenAnyOrderAnyDuplicatesSameBooks(t *testing.T) {
	t.Parallel()
	canonical := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.EventWorkers = 1 }})
	shuffled := worldtest.New(t, nil)
	batched := worldtest.New(t, nil)

	rapid.Check(t, func(rt *rapid.T) {
		sim := adyensim.New(adyensim.Config{Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
		items, truth := adyenScript(rt, sim)
		events := adyenEvents(rt, sim, items)
		var payments []string
		for _, p := range truth {
			payments = append(payments, p.psp)
		}

		canonical.ApplyEvents(rt, events...)
		var delivery []provider.Event
		for _, e := range events {
			for range rapid.IntRange(1, 3).Draw(rt, "copies") {
				delivery = append(delivery, e)
			}
		}
		shuffled.ApplyEvents(rt, rapid.Permutation(delivery).Draw(rt, "order")...)
		batched.ApplyEventsAtOnce(rt, rapid.Permutation(delivery).Draw(rt, "order_at_once")...)

		want := canonical.Snapshot(rt, payments)
		for name, w := range map[string]*worldtest.World{"shuffled with duplicates": shuffled, "all at once": batched} {
			got := w.Snapshot(rt, payments)
			require.Equal(rt, want, got, "items in Adyen's order vs %s", name)
			for _, tb := range got.TrialBalance {
				require.Contains(rt, tb, "balanced=true")
			}
			require.Zero(rt, w.Count(rt, `SELECT count(*) FROM inbox_events WHERE status = 'poison'`))
		}
		requireAdyenTruth(rt, canonical, truth)
	})
}

// requireAdyenTruth checks each payment's captured and refunded amounts,
// and its ledger's captures and refunds net of their corrections, against
// Adyen's account.
func requireAdyenTruth(t *rapid.T, w *worldtest.World, truth []adyenPayment) {
	ctx := context.Background()
	for _, p := range truth {
		got, err := ledger.GetPayment(ctx, w.Pool, p.psp)
		require.NoError(t, err, "payment %s", p.psp)
		require.Equal(t, adyen.Name, got.Provider)
		wantCaptured, _, err := adyen.FromMinor(&p.captured, p.currency, "captured")
		require.NoError(t, err)
		wantRefunded, _, err := adyen.FromMinor(&p.refunded, p.currency, "refunded")
		require.NoError(t, err)
		require.True(t, wantCaptured.Equal(got.AmountCaptured), "%s captured: adyen %s, paygate %s", p.psp, wantCaptured, got.AmountCaptured)
		require.True(t, wantRefunded.Equal(got.AmountRefunded), "%s refunded: adyen %s, paygate %s", p.psp, wantRefunded, got.AmountRefunded)
		txs, err := ledger.TransactionsForPayment(ctx, w.Pool, p.psp)
		require.NoError(t, err)
		sales, refunds := decimal.Zero, decimal.Zero
		for _, tx := range txs {
			for _, e := range tx.Entries {
				switch e.Account {
				case ledger.AccountSales:
					sales = sales.Add(e.Credit).Sub(e.Debit)
				case ledger.AccountRefunds:
					refunds = refunds.Add(e.Debit).Sub(e.Credit)
				}
			}
		}
		require.True(t, sales.Equal(got.AmountCaptured), "%s: ledger sales %s, API amount_captured %s", p.psp, sales, got.AmountCaptured)
		require.True(t, refunds.Equal(got.AmountRefunded), "%s: ledger refunds %s, API amount_refunded %s", p.psp, refunds, got.AmountRefunded)
	}
}
