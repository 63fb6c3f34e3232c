package stripe

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/strictjson"
)

// TestObjectsDecodeAsEncodingJSON: every object of every event the
// simulator emits (payments in four currencies, captures, cancels, refunds
// that succeed and fail, disputes won and lost, payouts paid and failed)
// fills the envelope and the object types Effects reads exactly as
// encoding/json fills them, so strictjson's own decoding pass changes no
// effect.
func TestObjectsDecodeAsEncodingJSON(t *testing.T) {
	sim := stripesim.New(stripesim.Config{Seed: 11})
	for i, cur := range []string{"usd", "eur", "gbp", "jpy"} {
		p := sim.Pay(stripesim.PayOpts{Amount: 1999 + int64(i), Currency: cur, Email: "buyer@example.test"})
		sim.Refund(p, 500)
		r := sim.Refund(p, 0)
		sim.FailRefund(r.ID)
		sim.CloseDispute(sim.Dispute(p, 0), i%2 == 0)
	}
	sim.Cancel(sim.Pay(stripesim.PayOpts{Amount: 700, Currency: "usd", ManualCapture: true}))
	sim.Pay(stripesim.PayOpts{Amount: 900, Currency: "gbp", Processing: true, FailFirst: 1, Metadata: map[string]string{"order": "o-1"}})
	sim.Pay(stripesim.PayOpts{Amount: 950, Currency: "usd", Declined: true})
	sim.Capture(sim.Pay(stripesim.PayOpts{Amount: 800, Currency: "eur", ManualCapture: true}))
	sim.Payout(10000, "usd")
	sim.FailPayout(sim.Payout(5000, "eur"))
	events := append(sim.Events(), sim.Ignored())
	if len(events) < 40 {
		t.Fatalf("the simulator emitted %d events", len(events))
	}
	for _, ev := range events {
		var env stripeEnvelope
		same(t, ev.Payload, &env)
		for _, target := range []func() any{
			func() any { return new(stripePaymentIntent) }, func() any { return new(stripeCharge) },
			func() any { return new(stripeRefund) }, func() any { return new(stripeDispute) },
			func() any { return new(stripePayout) },
		} {
			same(t, env.Data.Object, target())
		}
	}
}

func same(t *testing.T, body []byte, got any) {
	t.Helper()
	want := reflect.New(reflect.TypeOf(got).Elem()).Interface()
	err, jerr := strictjson.Unmarshal(body, got), json.Unmarshal(body, want)
	if (err == nil) != (jerr == nil) {
		t.Fatalf("%T: strictjson %v, encoding/json %v", got, err, jerr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%T:\n got %#v\nwant %#v", got, got, want)
	}
}
