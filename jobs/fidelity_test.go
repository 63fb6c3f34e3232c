package jobs_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider/stripe"
)

// The tests below send what Stripe really sends for API version 2024-06-20
// (charges without refund lists, captures days after authorizations) in
// every order that matters, and check the books against what Stripe did.

var day0 = time.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC)

// orders lists the arrival orders these tests try: as created, reversed,
// and each event first with the rest as created.
func orders(events []stripesim.Event) map[string][]stripesim.Event {
	out := map[string][]stripesim.Event{
		"as created": events,
		"reversed":   reversedEvents(events),
	}
	for i, e := range events {
		rest := append(slices.Clone(events[:i]), events[i+1:]...)
		out[string(e.Type)+" first ("+e.ID+")"] = append([]stripesim.Event{e}, rest...)
	}
	return out
}

func reversedEvents(events []stripesim.Event) []stripesim.Event {
	r := slices.Clone(events)
	slices.Reverse(r)
	return r
}

func onlyTypes(events []stripesim.Event, types ...stripesim.EventType) []stripesim.Event {
	var out []stripesim.Event
	for _, e := range events {
		if slices.Contains(types, e.Type) {
			out = append(out, e)
		}
	}
	return out
}

// TestRefundFailureAfterListlessChargeRefunded: charge.refunded carries only
// amount_refunded; when the refund later fails, the payment is no longer
// refunded, whatever the order and even when the refund's own success was
// never delivered, and the API agrees with the ledger.
func TestRefundFailureAfterListlessChargeRefunded(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	ctx := context.Background()
	build := func() (*stripesim.Sim, *stripesim.Payment, *stripesim.Refund) {
		sim := stripesim.New(stripesim.Config{Now: day0})
		p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd", Email: "buyer@example.com"})
		sim.Advance(24 * time.Hour)
		r := sim.Refund(p, 0)
		sim.Advance(7 * 24 * time.Hour)
		sim.FailRefund(r.ID)
		return sim, p, r
	}
	probe, _, _ := build()
	cases := orders(probe.Events())
	cases["without the refund's success"] = nil
	for name := range cases {
		sim, p, r := build()
		events := sim.Events()
		if name == "without the refund's success" {
			events = onlyTypes(events, stripesim.EventChargeSucceeded, stripesim.EventPaymentIntentSucceeded,
				stripesim.EventChargeRefunded, stripesim.EventRefundFailed)
		} else {
			events = orders(events)[renameOrder(name, probe, sim)]
		}
		w.Apply(t, events...)

		got, err := ledger.GetPayment(ctx, w.Pool, p.ID)
		require.NoError(t, err)
		require.Equal(t, "succeeded", string(got.State), name)
		require.Equal(t, "0.00", ledger.Format(got.AmountRefunded, "usd"), name)

		txs, err := ledger.TransactionsForPayment(ctx, w.Pool, p.ID)
		require.NoError(t, err)
		var kinds []string
		refunds := decimal.Zero
		for _, tx := range txs {
			kinds = append(kinds, string(tx.Kind))
			for _, e := range tx.Entries {
				if e.Account == ledger.AccountRefunds {
					refunds = refunds.Add(e.Debit).Sub(e.Credit)
				}
			}
		}
		slices.Sort(kinds)
		require.Equal(t, []string{"capture", "refund", "refund_reversal"}, kinds, name)
		require.True(t, refunds.IsZero(), "%s: the ledger nets refund %s to zero, as the API does; left %s", name, r.ID, refunds)
	}
}

// renameOrder maps an order's name built from probe's events to the same
// order of sim's events: the two simulators ran the same script, so their
// events match by position.
func renameOrder(name string, probe, sim *stripesim.Sim) string {
	pe, se := probe.Events(), sim.Events()
	for i, e := range pe {
		if name == string(e.Type)+" first ("+e.ID+")" {
			return string(se[i].Type) + " first (" + se[i].ID + ")"
		}
	}
	return name
}

// TestMovementsDatedWhenMoneyMoved: a manual capture three days after its
// authorization is dated on the capture, and a refund that fails a week
// later is reversed on the day it failed, in every arrival order.
func TestMovementsDatedWhenMoneyMoved(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	ctx := context.Background()
	build := func() (*stripesim.Sim, *stripesim.Payment, *stripesim.Refund) {
		sim := stripesim.New(stripesim.Config{Now: day0})
		p := sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "eur", Email: "buyer@example.com", ManualCapture: true})
		sim.Advance(3 * 24 * time.Hour)
		sim.Capture(p)
		sim.Advance(24 * time.Hour)
		r := sim.Refund(p, 2000)
		sim.Advance(7 * 24 * time.Hour)
		sim.FailRefund(r.ID)
		return sim, p, r
	}
	probe, _, _ := build()
	captured, refunded, failed := day0.Add(72*time.Hour), day0.Add(96*time.Hour), day0.Add(264*time.Hour)
	for name := range orders(probe.Events()) {
		sim, p, r := build()
		w.Apply(t, orders(sim.Events())[renameOrder(name, probe, sim)]...)

		want := map[string]time.Time{
			stripe.CaptureRef(p.ChargeID):  captured,
			stripe.RefundRef(r.ID):         refunded,
			stripe.RefundReversalRef(r.ID): failed,
		}
		for ref, at := range want {
			tx, err := ledger.TransactionByRef(ctx, w.Pool, ref)
			require.NoError(t, err, "%s: %s", name, ref)
			require.True(t, at.Equal(tx.OccurredAt), "%s: %s dated %s, want %s", name, ref, tx.OccurredAt, at)
		}
	}
}

// TestReceiptWhenTheAddressArrivesLate: a charge made without an address,
// given one later (charge.updated), gets its one receipt and its refund
// confirmation, whichever event comes first.
func TestReceiptWhenTheAddressArrivesLate(t *testing.T) {
	t.Parallel()
	w, mp := emailWorld(t)
	ctx := context.Background()
	build := func() (*stripesim.Sim, *stripesim.Payment, *stripesim.Refund) {
		sim := stripesim.New(stripesim.Config{Now: day0})
		p := sim.Pay(stripesim.PayOpts{Amount: 1200, Currency: "usd"})
		sim.Advance(time.Hour)
		sim.SetReceiptEmail(p, "late@example.com")
		sim.Advance(time.Hour)
		r := sim.Refund(p, 200)
		return sim, p, r
	}
	probe, _, _ := build()
	var want []string
	for name := range orders(probe.Events()) {
		sim, p, r := build()
		w.Apply(t, orders(sim.Events())[renameOrder(name, probe, sim)]...)
		settleEmails(t, w)
		for _, e := range []struct {
			kind jobs.EmailKind
			id   string
		}{{jobs.EmailPaymentReceipt, p.ID}, {jobs.EmailRefundConfirmation, r.ID}} {
			rec, err := jobs.GetEmail(ctx, w.Pool, e.kind, e.id)
			require.NoError(t, err, "%s: %s", name, e.kind)
			require.Equal(t, jobs.EmailSent, rec.Status, "%s: %s: %s", name, e.kind, rec.Error)
			require.Equal(t, "late@example.com", rec.Recipient, "%s: %s", name, e.kind)
			want = append(want, "late@example.com "+jobs.EmailMessageID(e.kind, e.id))
		}
	}
	require.Equal(t, sortedWithin(want), subjectsByRecipient(t, mp), "one email per intent, none twice")
}
