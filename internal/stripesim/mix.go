package stripesim

import (
	"fmt"
	mrand "math/rand/v2"
)

// PayMix scripts payments of the benchmarks' mix and returns the events
// they emitted, in the order emitted: amounts from 5.00 to 505.00, half of
// them in usd and the rest in eur, gbp and jpy, each with a receipt email
// (so a charge.succeeded and a payment_intent.succeeded each) and an order
// of its own (metadata order_id, and a description), and
// refundShare of them refunded in full (refund.created, charge.refunded,
// refund.updated, charge.refund.updated). make bench sends this mix and
// make bench-growth fills its database with it, so that the filled rows
// are the ones the measured traffic leaves; rng and the simulator's seed
// decide everything, so seeds repeat a mix.
func (s *Sim) PayMix(rng *mrand.Rand, payments int, refundShare float64) []Event {
	before := len(s.Events())
	currencies := []string{"usd", "usd", "usd", "eur", "gbp", "jpy"}
	for i := range payments {
		// Every order of its own: the seed keeps two mixes sent to one
		// database (make bench's levels) from sharing orders.
		order := fmt.Sprintf("ord-%x-%d", uint64(s.seed), i)
		p := s.Pay(PayOpts{
			Amount:      int64(500 + rng.IntN(50000)),
			Currency:    currencies[rng.IntN(len(currencies))],
			Email:       fmt.Sprintf("customer%d@example.com", i),
			OrderID:     order,
			Description: "Order " + order,
		})
		if rng.Float64() < refundShare {
			s.Refund(p, 0)
		}
	}
	return s.Events()[before:]
}
