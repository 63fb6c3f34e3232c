package reliability

import (
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"time"

	"github.com/paygate/paygate/internal/stripesim"
)

// WorkloadOpts sizes a workload.
type WorkloadOpts struct {
	Payments int   // payment lifecycles
	Seed     int64 // the simulator's and the generator's seed (0: random)
	// PoisonEvery adds one impossible event per this many payments (0:
	// none): unknown currencies, negative amounts, and refunds in another
	// currency than their payment.
	PoisonEvery int
}

// Workload is a simulated Stripe account's history and what it implies: the
// direct model of the simulator's truth.
type Workload struct {
	Sim *stripesim.Sim
	// Payments are every payment id the lifecycles created.
	Payments []string
	// PayoutRefs are the ledger refs of movements outside payments.
	PayoutRefs []string
	// Refs is every ledger ref the simulator's history implies: a capture
	// per captured charge, a refund (and its reversal when it failed) per
	// refund, a withdrawal per dispute that moved money and a
	// reinstatement per dispute won, a payout (and its reversal).
	Refs map[string]bool
	// Poison maps the impossible events to why they are impossible.
	Poison map[string]string
	// Ignored are events of types paygate does not use.
	Ignored map[string]bool
	// Waves are the events in delivery waves: the first holds every event
	// whose outcome is independent of order; the second the refunds in
	// another currency than their payment, whose verdict depends on the
	// payment's currency being known first (see docs/reliability.md).
	Waves [][]stripesim.Event
}

// Events returns every event of every wave, in creation order.
func (w *Workload) Events() []stripesim.Event {
	var out []stripesim.Event
	for _, wave := range w.Waves {
		out = append(out, wave...)
	}
	return out
}

// NewWorkload plays Payments random lifecycles on a fresh simulator:
// currencies with 0, 2 and 3 decimals, declined attempts, manual captures
// left authorized, canceled or captured, partial and full refunds, refunds
// that fail, disputes open, won and lost, inquiries, payouts paid and
// failed, events paygate ignores, and the poison share.
func NewWorkload(opts WorkloadOpts) *Workload {
	// The account's history is ten days old, so the daily reconciliation
	// a scenario may schedule (it looks at yesterday) never sees it and
	// never posts to the ledger the model is compared with.
	sim := stripesim.New(stripesim.Config{WebhookSecret: WebhookSecret, Seed: opts.Seed, Now: time.Now().AddDate(0, 0, -10)})
	rng := mrand.New(mrand.NewPCG(uint64(sim.Seed()), 0x5eed))
	w := &Workload{Sim: sim, Refs: map[string]bool{}, Poison: map[string]string{}, Ignored: map[string]bool{}}
	type captured struct {
		id, currency string
	}
	var capturedPayments []captured
	currencies := []string{"usd", "usd", "eur", "jpy", "kwd"}
	poisonN := 0
	for i := range opts.Payments {
		cur := currencies[rng.IntN(len(currencies))]
		declined := rng.IntN(25) == 0
		p := sim.Pay(stripesim.PayOpts{
			Amount:        100 + rng.Int64N(500_000),
			Currency:      cur,
			Email:         fmt.Sprintf("buyer-%d@example.test", i),
			ManualCapture: rng.IntN(5) == 0,
			Processing:    rng.IntN(5) == 0,
			FailFirst:     rng.IntN(3) / 2, // a third of payments see a decline first
			Declined:      declined,
		})
		w.Payments = append(w.Payments, p.ID)
		if declined {
			continue // the customer gave up
		}
		if p.ManualCapture {
			switch rng.IntN(3) {
			case 0:
				continue // left authorized
			case 1:
				sim.Cancel(p)
				continue
			}
			sim.Capture(p)
		}
		w.Refs["stripe:charge:"+p.ChargeID+":capture"] = true
		capturedPayments = append(capturedPayments, captured{p.ID, p.Currency})
		left := p.Amount
		for range rng.IntN(3) {
			if left == 0 {
				break
			}
			amount := left
			if rng.IntN(2) == 0 {
				amount = 1 + rng.Int64N(left)
			}
			r := sim.Refund(p, amount)
			left -= amount
			w.Refs["stripe:refund:"+r.ID] = true
			if rng.IntN(4) == 0 {
				sim.FailRefund(r.ID)
				w.Refs["stripe:refund:"+r.ID+":reversal"] = true
				left += amount
			}
		}
		if left == p.Amount {
			switch rng.IntN(8) {
			case 0: // left open
				d := sim.Dispute(p, 0)
				w.Refs["stripe:dispute:"+d.ID+":withdrawal"] = true
			case 1:
				d := sim.CloseDispute(sim.Dispute(p, 0), true)
				w.Refs["stripe:dispute:"+d.ID+":withdrawal"] = true
				w.Refs["stripe:dispute:"+d.ID+":reinstatement"] = true
			case 2:
				d := sim.CloseDispute(sim.Dispute(p, 0), false)
				w.Refs["stripe:dispute:"+d.ID+":withdrawal"] = true
			case 3:
				sim.CloseDispute(sim.Inquiry(p, 0), false)
			}
		}
		if i%40 == 39 {
			po := sim.Payout(1+rng.Int64N(100_000), "usd")
			ref := "stripe:payout:" + po.ID
			w.Refs[ref] = true
			w.PayoutRefs = append(w.PayoutRefs, ref)
			if rng.IntN(3) == 0 {
				sim.FailPayout(po)
				w.Refs[ref+":reversal"] = true
				w.PayoutRefs = append(w.PayoutRefs, ref+":reversal")
			}
		}
		if i%25 == 24 {
			w.Ignored[sim.Ignored().ID] = true
		}
		if opts.PoisonEvery > 0 && i%opts.PoisonEvery == opts.PoisonEvery-1 && len(capturedPayments) > 0 {
			target := capturedPayments[rng.IntN(len(capturedPayments))]
			switch poisonN % 2 {
			case 0:
				ev := sim.Emit(stripesim.EventChargeSucceeded, map[string]any{
					"id": fmt.Sprintf("ch_poison_currency_%d_%d", sim.Seed(), i), "object": "charge",
					"payment_intent": fmt.Sprintf("pi_poison_currency_%d_%d", sim.Seed(), i),
					"amount":         1000, "amount_captured": 1000, "captured": true, "currency": "xyz",
				})
				w.Poison[ev.ID] = "unknown currency"
			case 1:
				ev := sim.Emit(stripesim.EventRefundUpdated, map[string]any{
					"id": fmt.Sprintf("re_poison_negative_%d_%d", sim.Seed(), i), "object": "refund",
					"amount": -500, "currency": target.currency, "status": "succeeded", "payment_intent": target.id,
				})
				w.Poison[ev.ID] = "negative amount"
			}
			poisonN++
		}
	}
	w.Waves = append(w.Waves, sim.Events())

	// Refunds in another currency than their (captured) payment: delivered
	// once the first wave is applied, so the payment's currency is known.
	var second []stripesim.Event
	if opts.PoisonEvery > 0 {
		for j := 0; j < len(capturedPayments)/opts.PoisonEvery; j++ {
			target := capturedPayments[rng.IntN(len(capturedPayments))]
			other := "eur"
			if target.currency == "eur" {
				other = "usd"
			}
			ev := sim.Emit(stripesim.EventRefundUpdated, map[string]any{
				"id": fmt.Sprintf("re_poison_mismatch_%d_%d", sim.Seed(), j), "object": "refund",
				"amount": 100, "currency": other, "status": "succeeded", "payment_intent": target.id,
			})
			w.Poison[ev.ID] = "currency differs from the payment's"
			second = append(second, ev)
		}
	}
	if len(second) > 0 {
		w.Waves = append(w.Waves, second)
	}
	return w
}

// SortedRefs returns Refs in order.
func (w *Workload) SortedRefs() []string {
	out := make([]string, 0, len(w.Refs))
	for r := range w.Refs {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}
