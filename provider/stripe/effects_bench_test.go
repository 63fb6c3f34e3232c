package stripe_test

import (
	"testing"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/provider/stripe"
)

// BenchmarkStripeEffects maps the events of one payment's life (success,
// refund) to facts and postings, per event: the pure part of process_event.
// Run: go test ./provider/stripe -run '^$' -bench StripeEffects -benchmem.
func BenchmarkStripeEffects(b *testing.B) {
	sim := stripesim.New(stripesim.Config{Seed: 1})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd", Email: "a@example.com"})
	sim.Refund(p, 1000)
	for _, e := range sim.Events() {
		b.Run(string(e.Type), func(b *testing.B) {
			if _, err := stripe.Effects(e.Payload); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(e.Payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := stripe.Effects(e.Payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
