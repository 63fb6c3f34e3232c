package jobs_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
)

// script plays a random lifecycle on sim: payments in several currencies,
// failed attempts, manual captures and cancels, partial and full refunds,
// refund failures, disputes won, lost or open, payouts paid or failed. It
// returns the payments' ids and the refs of movements outside payments.
func script(t *rapid.T, sim *stripesim.Sim) (payments, refs []string) {
	for i := range rapid.IntRange(1, 3).Draw(t, "payments") {
		name := func(s string) string { return s + "_" + string(rune('a'+i)) }
		p := sim.Pay(stripesim.PayOpts{
			Amount:        rapid.Int64Range(100, 1_000_000).Draw(t, name("amount")),
			Currency:      rapid.SampledFrom([]string{"usd", "eur", "jpy", "kwd"}).Draw(t, name("currency")),
			ManualCapture: rapid.Bool().Draw(t, name("manual")),
			Processing:    rapid.Bool().Draw(t, name("processing")),
			FailFirst:     rapid.IntRange(0, 2).Draw(t, name("failures")),
			Email:         "buyer@example.com",
		})
		payments = append(payments, p.ID)
		if p.ManualCapture {
			switch rapid.IntRange(0, 2).Draw(t, name("then")) {
			case 0:
				continue // left authorized
			case 1:
				sim.Cancel(p)
				continue
			}
			sim.Capture(p)
		}
		left := p.Amount
		for j := range rapid.IntRange(0, 3).Draw(t, name("refunds")) {
			if left == 0 {
				break
			}
			amount := left
			if !rapid.Bool().Draw(t, name("full")) {
				amount = rapid.Int64Range(1, left).Draw(t, name("refund"))
			}
			r := sim.Refund(p, amount)
			left -= amount
			if rapid.IntRange(0, 3).Draw(t, name("refund_fails")) == 0 {
				sim.FailRefund(r.ID)
			}
			_ = j
		}
		switch rapid.IntRange(0, 3).Draw(t, name("dispute")) {
		case 1:
			sim.Dispute(p, 0) // left open
		case 2:
			sim.CloseDispute(sim.Dispute(p, 0), true)
		case 3:
			sim.CloseDispute(sim.Dispute(p, 0), false)
		}
	}
	if rapid.Bool().Draw(t, "payout") {
		po := sim.Payout(rapid.Int64Range(1, 100_000).Draw(t, "payout_amount"), "usd")
		refs = append(refs, "stripe:payout:"+po.ID)
		if rapid.Bool().Draw(t, "payout_fails") {
			sim.FailPayout(po)
			refs = append(refs, "stripe:payout:"+po.ID+":reversal")
		}
	}
	return payments, refs
}

// TestAnyOrderAnyDuplicatesSameBooks: the same events applied one at a time
// in creation order, shuffled with duplicates through concurrent workers as
// they arrive, and shuffled with duplicates all at once (applied together
// in large batches), give the same payments, the same ledger and a
// balanced trial balance (invariant 3).
func TestAnyOrderAnyDuplicatesSameBooks(t *testing.T) {
	t.Parallel()
	canonical := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.EventWorkers = 1 }})
	shuffled := worldtest.New(t, nil)
	batched := worldtest.New(t, nil)

	rapid.Check(t, func(rt *rapid.T) {
		sim := stripesim.New(stripesim.Config{}) // fresh random ids: the worlds outlive each case
		payments, refs := script(rt, sim)
		events := sim.Events()

		// One worker works jobs in insertion order: the canonical order.
		canonical.Apply(rt, events...)

		var delivery []stripesim.Event
		for _, e := range events {
			for range rapid.IntRange(1, 3).Draw(rt, "copies") {
				delivery = append(delivery, e)
			}
		}
		delivery = rapid.Permutation(delivery).Draw(rt, "order")
		shuffled.Apply(rt, delivery...)
		batched.ApplyAtOnce(rt, rapid.Permutation(delivery).Draw(rt, "order_at_once")...)

		want := canonical.Snapshot(rt, payments, refs...)
		for name, w := range map[string]*worldtest.World{"shuffled with duplicates": shuffled, "all at once": batched} {
			got := w.Snapshot(rt, payments, refs...)
			require.Equal(rt, want, got, "events in creation order vs %s", name)
			for _, tb := range got.TrialBalance {
				require.Contains(rt, tb, "balanced=true")
			}
			require.Zero(rt, w.Count(rt, `SELECT count(*) FROM inbox_events WHERE status = 'poison'`))
		}
	})
}
