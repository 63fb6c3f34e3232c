package stripe

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/statemachine"
)

// fuzzSeeds are real simulator events of every type paygate maps, the
// impossible ones the poison tests use, and hand-made shapes of older API
// versions and expanded references.
func fuzzSeeds() [][]byte {
	sim := stripesim.New(stripesim.Config{Seed: 8})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd", Email: "a@example.test", Processing: true, FailFirst: 1})
	r := sim.Refund(p, 6000)
	sim.FailRefund(r.ID)
	sim.Refund(p, 0)
	sim.CloseDispute(sim.Dispute(sim.Pay(stripesim.PayOpts{Amount: 1500, Currency: "jpy"}), 0), true)
	sim.CloseDispute(sim.Dispute(sim.Pay(stripesim.PayOpts{Amount: 1234, Currency: "kwd"}), 0), false)
	sim.CloseDispute(sim.Inquiry(sim.Pay(stripesim.PayOpts{Amount: 999, Currency: "eur"}), 0), false)
	m := sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "eur", ManualCapture: true})
	sim.Capture(m)
	sim.Cancel(sim.Pay(stripesim.PayOpts{Amount: 700, ManualCapture: true}))
	sim.Pay(stripesim.PayOpts{Amount: 100, Declined: true})
	sim.FailPayout(sim.Payout(20000, "usd"))
	sim.Ignored()
	sim.Emit("charge.succeeded", map[string]any{"id": "ch_x", "object": "charge", "amount": 100, "captured": true, "currency": "zzz"})
	sim.Emit("refund.updated", map[string]any{"id": "re_neg", "object": "refund", "amount": -5, "currency": "usd", "status": "succeeded", "payment_intent": p.ID})
	sim.Emit("refund.updated", map[string]any{"id": "re_none", "object": "refund", "currency": "usd", "status": "succeeded", "charge": map[string]any{"id": p.ChargeID}})
	var seeds [][]byte
	for _, e := range sim.Events() {
		seeds = append(seeds, e.Payload)
	}
	for _, s := range []string{
		`{"id":"evt_1","type":"payment_intent.succeeded","created":1,"data":{"object":{"id":"pi_1","amount":100,"amount_received":100,"currency":"usd","charges":{"data":[{"id":"ch_1"}]}}}}`,
		`{"id":"evt_2","type":"payment_intent.succeeded","created":1,"data":{"object":{"id":"pi_1","amount":100,"amount_received":100,"currency":"USD","latest_charge":{"id":"ch_1","object":"charge"}}}}`,
		`{"id":"evt_3","type":"charge.refunded","created":1,"data":{"object":{"id":"ch_1","amount":100,"amount_refunded":40,"captured":true,"currency":"usd"}}}`,
		`{"id":"evt_4","type":"payout.paid","created":1,"data":{"object":{"id":"po_1","amount":9223372036854775807,"currency":"jpy"}}}`,
		`{"id":"evt_5","type":"charge.dispute.closed","created":1,"data":{"object":{"id":"dp_1","amount":1,"charge":"ch_1","currency":"usd","status":"under_review"}}}`,
		`{"id":"evt_6","type":"refund.failed","data":{"object":{"id":"re_1","amount":5,"payment_intent":"pi_1","currency":"bhd","status":"failed"}}}`,
		`{}`, `null`, `[]`, `{"type":"charge.succeeded","data":{"object":null}}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// FuzzStripeEffects: any payload either maps to effects the ledger and the
// fold accept, the same for the same JSON however it is spaced, or fails as
// ignored or permanent (poison), never with anything the worker would retry
// forever; it never panics.
func FuzzStripeEffects(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		fx, err := Effects(payload)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) && !errors.Is(err, provider.ErrIgnored) {
				t.Fatalf("error neither permanent nor ignored: %v", err)
			}
			return
		}
		if len(fx.Facts) > 0 && fx.PaymentID == "" {
			t.Fatalf("facts without a payment: %+v", fx)
		}
		for _, fact := range fx.Facts {
			if err := statemachine.Validate(fact); err != nil {
				t.Fatalf("invalid fact %+v: %v", fact, err)
			}
		}
		for _, p := range fx.Postings {
			if err := p.Validate(); err != nil {
				t.Fatalf("posting the ledger would refuse %+v: %v", p, err)
			}
			if !strings.HasPrefix(p.Ref, "stripe:") {
				t.Fatalf("ref %q is not a stripe ref", p.Ref)
			}
			if p.PaymentID != fx.PaymentID && p.Kind != ledger.KindPayout && p.Kind != ledger.KindPayoutReversal {
				t.Fatalf("posting %s for payment %q in effects of payment %q", p.Ref, p.PaymentID, fx.PaymentID)
			}
		}
		// The mapping reads JSON, not bytes: the same document compacted
		// gives the same effects.
		var compact bytes.Buffer
		if err := json.Compact(&compact, payload); err == nil {
			again, err := Effects(compact.Bytes())
			if err != nil {
				t.Fatalf("compacted payload fails: %v", err)
			}
			if !reflect.DeepEqual(fx, again) {
				t.Fatalf("compacted payload maps differently:\n%+v\n%+v", fx, again)
			}
		}
	})
}
