package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
)

// orderCases numbers the property's cases, so that each case's orders have
// references of their own in worlds that outlive it.
var orderCases atomic.Int64

// orderModel is what the model says of a case's orders.
type orderModel struct {
	refs []string // every order's reference
	open []string // those left with two or more payments net captured
	// detections are, per reference, the times its count of net captured
	// payments reached two, applied in the order the providers sent them.
	detections map[string]int
}

// ordersScript plays orders paid once, twice, paid–refunded–paid again,
// with their payments split across Stripe and Adyen, days passing between
// steps. It returns every provider event, in the order the providers sent
// them, and the model's view of the orders.
func ordersScript(t *rapid.T, stripeSim *stripesim.Sim, adyenSim *adyensim.Sim) (events []provider.Event, m orderModel) {
	hours := func(label string, lo, hi int) {
		d := time.Duration(rapid.IntRange(lo, hi).Draw(t, label)) * time.Hour
		stripeSim.Advance(d)
		adyenSim.Advance(d)
	}
	caseID := orderCases.Add(1)
	seen := len(stripeSim.Events())
	takeStripe := func() {
		for _, e := range stripeSim.Events()[seen:] {
			ev, err := stripe.DecodeEvent(e.Payload)
			require.NoError(t, err)
			events = append(events, ev)
		}
		seen = len(stripeSim.Events())
	}
	takeAdyen := func(items ...adyensim.Item) {
		events = append(events, adyenEvents(t, adyenSim, items)...)
	}
	m.detections = map[string]int{}
	for o := range rapid.IntRange(1, 4).Draw(t, "orders") {
		ref := fmt.Sprintf("ord-%d-%d", caseID, o)
		m.refs = append(m.refs, ref)
		name := func(s string) string { return fmt.Sprintf("%s_%d", s, o) }
		net := 0
		for p := range rapid.IntRange(1, 3).Draw(t, name("payments")) {
			pname := func(s string) string { return fmt.Sprintf("%s_%d_%d", s, o, p) }
			amount := rapid.Int64Range(100, 50_000).Draw(t, pname("amount"))
			refunded := rapid.IntRange(0, 2).Draw(t, pname("refunded")) == 0
			if rapid.Bool().Draw(t, pname("adyen")) {
				psp, auth := adyenSim.Authorise(amount, "EUR", ref, true)
				hours(pname("capture_after_hours"), 0, 48)
				_, capture := adyenSim.Capture(psp, amount)
				takeAdyen(auth, capture)
				if refunded {
					hours(pname("refund_after_hours"), 0, 72)
					_, refund := adyenSim.Refund(psp, amount, true)
					takeAdyen(refund)
				}
			} else {
				pay := stripeSim.Pay(stripesim.PayOpts{Amount: amount, Currency: "usd", OrderID: ref})
				if refunded {
					hours(pname("refund_after_hours"), 0, 72)
					stripeSim.Refund(pay, amount)
				}
				takeStripe()
			}
			// Captured: one more; refunded at once: one fewer again.
			if net++; net == 2 {
				m.detections[ref]++
			}
			if refunded {
				net--
			}
			hours(pname("next_after_hours"), 0, 96)
		}
		if net >= 2 {
			m.open = append(m.open, ref)
		}
	}
	slices.Sort(m.open)
	return events, m
}

// doubleCharges reads a world's double charges of the references prefixed
// by this case: state by reference, and detections and double_charge
// emails by reference.
func doubleCharges(t *rapid.T, w *worldtest.World, refs []string) (open []string, detections, emails map[string]int) {
	ctx := context.Background()
	detections, emails = map[string]int{}, map[string]int{}
	rows, err := w.Pool.Query(ctx, `SELECT reference, state, detections FROM double_charges WHERE reference = ANY($1)`, refs)
	require.NoError(t, err)
	type row struct {
		Reference, State string
		Detections       int
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	for _, r := range got {
		if r.State == "open" {
			open = append(open, r.Reference)
		}
		detections[r.Reference] = r.Detections
	}
	rows, err = w.Pool.Query(ctx, `SELECT data->>'reference', count(*)::int FROM email_outbox
		WHERE kind = $1 AND data->>'reference' = ANY($2) GROUP BY 1`, string(jobs.EmailDoubleCharge), refs)
	require.NoError(t, err)
	type count struct {
		Reference string
		N         int
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[count])
	require.NoError(t, err)
	for _, c := range counts {
		emails[c.Reference] = c.N
	}
	slices.Sort(open)
	return open, detections, emails
}

// TestDoubleChargesOrderFree: for orders paid once, twice, or paid,
// refunded and paid again, across Stripe and Adyen, delivered in the
// providers' order, shuffled with duplicates through concurrent workers,
// or all at once in large batches, the open double charges are exactly
// the orders with two or more payments net captured; each detection sends
// ops one email, never one per event or per copy; and a reference that was
// never charged twice at once in the providers' order is never detected
// in it.
func TestDoubleChargesOrderFree(t *testing.T) {
	t.Parallel()
	canonical := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.EventWorkers = 1
		c.Email.OpsEmail = "ops@example.test"
	}})
	shuffled := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.Email.OpsEmail = "ops@example.test" }})
	batched := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.Email.OpsEmail = "ops@example.test" }})

	rapid.Check(t, func(rt *rapid.T) {
		start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
		stripeSim := stripesim.New(stripesim.Config{Now: start})
		adyenSim := adyensim.New(adyensim.Config{Start: start})
		events, model := ordersScript(rt, stripeSim, adyenSim)

		canonical.ApplyEvents(rt, events...)
		var delivery []provider.Event
		for _, e := range events {
			for range rapid.IntRange(1, 3).Draw(rt, "copies") {
				delivery = append(delivery, e)
			}
		}
		shuffled.ApplyEvents(rt, rapid.Permutation(delivery).Draw(rt, "order")...)
		batched.ApplyEventsAtOnce(rt, rapid.Permutation(delivery).Draw(rt, "order_at_once")...)

		for name, w := range map[string]*worldtest.World{"canonical": canonical, "shuffled": shuffled, "batched": batched} {
			open, detections, emails := doubleCharges(rt, w, model.refs)
			if !slices.Equal(open, model.open) {
				rt.Fatalf("%s: open double charges %v, the model says %v", name, open, model.open)
			}
			for _, ref := range model.refs {
				if name == "canonical" && detections[ref] != model.detections[ref] {
					rt.Fatalf("in the providers' order, %s detected %d times, the model says %d",
						ref, detections[ref], model.detections[ref])
				}
				if emails[ref] != detections[ref] {
					rt.Fatalf("%s: %s detected %d times, %d emails", name, ref, detections[ref], emails[ref])
				}
				if slices.Contains(model.open, ref) && detections[ref] == 0 {
					rt.Fatalf("%s: %s open without a detection", name, ref)
				}
			}
		}
	})
}
