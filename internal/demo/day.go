package demo

import (
	"fmt"
	"strings"
	"time"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/ledger"
)

// Payment is one payment of a day, as the report tells it.
type Payment struct {
	Provider string `json:"provider"`
	ID       string `json:"id"`
	Currency string `json:"currency"`
	// Amount is in the currency's major unit, as paygate writes it.
	Amount string `json:"amount"`
	// Story is what happened to it during the day.
	Story string `json:"story"`
}

// Refund is a refund the day's story asks of paygate: the demo command
// requests it through paygate's refund API, so that paygate's saga submits
// it to the provider, which settles it with its webhooks.
type Refund struct {
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"`
	Currency  string `json:"currency"`
	// Amount is in the currency's major unit; empty asks for everything
	// refundable.
	Amount string `json:"amount,omitempty"`
	Reason string `json:"reason"`
	Note   string `json:"note"`
}

// sale is one payment of the scripted day.
type sale struct {
	at       string // HH:MM, UTC
	amount   int64  // minor units
	currency string
	name     string
	email    string
	order    string
}

// The Stripe account settles in USD, as a US account does: charges in
// other currencies are converted at these rates, so reconciliation shows
// each conversion with its rate.
const stripeSettlement = "usd"

var stripeRates = map[string]string{"eur": "1.085", "gbp": "1.27", "jpy": "0.0067"}

// stripeDay scripts a day of a shop's Stripe account on sim, dated day
// (midnight UTC), and returns its payments and the refunds to ask of
// paygate. The story is fixed; only the ids differ from one day to the
// next, so a report reads the same every time.
func stripeDay(sim *stripesim.Sim, day time.Time) ([]Payment, []Refund) {
	var out []Payment
	at := func(hhmm string) {
		t, err := time.Parse("15:04", hhmm)
		if err != nil {
			panic(fmt.Sprintf("demo: time %q: %v", hhmm, err))
		}
		sim.SetNow(day.Add(time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute))
	}
	pay := func(s sale, opts stripesim.PayOpts, story string) *stripesim.Payment {
		at(s.at)
		opts.Amount, opts.Currency, opts.Name, opts.Email = s.amount, s.currency, s.name, s.email
		opts.Metadata = map[string]string{"order": s.order}
		p := sim.Pay(opts)
		out = append(out, Payment{Provider: "stripe", ID: p.ID, Currency: p.Currency, Amount: major(p.Amount, p.Currency), Story: story})
		return p
	}

	pay(sale{"08:12", 36000, "usd", "Ada Lovelace", "ada@example.com", "1101"}, stripesim.PayOpts{}, "paid by card")
	mug := pay(sale{"08:47", 4500, "eur", "Émilie du Châtelet", "emilie@example.com", "1102"}, stripesim.PayOpts{},
		"paid in euros, settled in dollars; partly refunded through paygate")
	pay(sale{"09:30", 12900, "gbp", "Mary Somerville", "mary@example.com", "1103"}, stripesim.PayOpts{FailFirst: 1},
		"declined once, then paid with another card")
	pay(sale{"10:05", 500, "jpy", "Kōwa Seki", "kowa@example.com", "1104"}, stripesim.PayOpts{}, "paid in yen (no minor unit)")
	held := pay(sale{"10:52", 8900, "usd", "Grace Hopper", "grace@example.com", "1105"}, stripesim.PayOpts{ManualCapture: true},
		"authorized, captured when the order shipped")
	pay(sale{"11:15", 2500, "usd", "Alan Turing", "alan@example.com", "1106"}, stripesim.PayOpts{Declined: true},
		"declined: the customer gave up")
	lamp := pay(sale{"12:03", 18900, "eur", "Lise Meitner", "lise@example.com", "1107"}, stripesim.PayOpts{},
		"partly refunded from Stripe's Dashboard")
	chair := pay(sale{"13:20", 129900, "usd", "Charles Babbage", "charles@example.com", "1108"}, stripesim.PayOpts{},
		"disputed as fraudulent by the card holder")
	at("14:20")
	sim.Capture(held)
	pay(sale{"14:41", 3400, "gbp", "Rosalind Franklin", "rosalind@example.com", "1109"}, stripesim.PayOpts{}, "paid in pounds")
	canceled := pay(sale{"15:10", 4999, "usd", "Hedy Lamarr", "hedy@example.com", "1110"}, stripesim.PayOpts{ManualCapture: true},
		"authorized, then canceled: out of stock")
	pay(sale{"16:25", 12800, "jpy", "Hideki Yukawa", "hideki@example.com", "1111"}, stripesim.PayOpts{}, "paid in yen")
	pay(sale{"17:02", 7450, "usd", "Katherine Johnson", "katherine@example.com", "1112"}, stripesim.PayOpts{Processing: true},
		"a bank debit: processing, then paid")
	at("17:45")
	sim.Refund(lamp, 5000)
	at("18:00")
	sim.Cancel(canceled)
	at("19:05")
	sim.Dispute(chair, 0)
	pay(sale{"20:15", 6200, "eur", "Marie Curie", "marie@example.com", "1113"}, stripesim.PayOpts{}, "paid in euros")
	twice := pay(sale{"22:48", 15800, "usd", "Edsger Dijkstra", "edsger@example.com", "1114"}, stripesim.PayOpts{},
		"charged twice for one order; refunded in full through paygate")

	refunds := []Refund{
		{Provider: "stripe", PaymentID: mug.ID, Currency: mug.Currency, Amount: major(1500, mug.Currency),
			Reason: "requested_by_customer", Note: "one of three mugs arrived broken"},
		{Provider: "stripe", PaymentID: twice.ID, Currency: twice.Currency,
			Reason: "duplicate", Note: "order 1114 was paid twice"},
	}
	return out, refunds
}

// adyenDay scripts the same day of the shop's Adyen merchant account on
// sim: card payments authorised and captured (Adyen sends a CAPTURE for
// each), one refused. It returns the items Adyen sends for them, in order,
// its payments and the refunds to ask of paygate.
func adyenDay(sim *adyensim.Sim, day time.Time) ([]adyensim.Item, []Payment, []Refund) {
	var (
		items []adyensim.Item
		out   []Payment
	)
	at := func(hhmm string) {
		t, err := time.Parse("15:04", hhmm)
		if err != nil {
			panic(fmt.Sprintf("demo: time %q: %v", hhmm, err))
		}
		sim.SetNow(day.Add(time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute))
	}
	sell := func(hhmm string, value int64, currency, order string, story string) string {
		at(hhmm)
		psp, auth := sim.Authorise(value, currency, order, true)
		sim.Advance(2 * time.Minute)
		_, capture := sim.Capture(psp, value)
		items = append(items, auth, capture)
		cur := strings.ToLower(currency)
		out = append(out, Payment{Provider: "adyen", ID: psp, Currency: cur, Amount: major(value, cur), Story: story})
		return psp
	}

	sell("08:30", 6500, "EUR", "order-2201", "authorised and captured")
	sell("11:10", 49900, "SEK", "order-2202", "paid in Swedish kronor")
	at("13:45")
	psp, refused := sim.Authorise(2300, "EUR", "order-2203", false)
	items = append(items, refused)
	out = append(out, Payment{Provider: "adyen", ID: psp, Currency: "eur", Amount: major(2300, "eur"), Story: "refused by the issuer"})
	late := sell("15:20", 8900, "GBP", "order-2204", "delivered late; partly refunded through paygate")
	sell("18:05", 12000, "EUR", "order-2205", "authorised and captured")

	refunds := []Refund{{Provider: "adyen", PaymentID: late, Currency: "gbp", Amount: major(2000, "gbp"),
		Reason: "requested_by_customer", Note: "goodwill refund for a late delivery"}}
	return items, out, refunds
}

// major is minor units of currency as paygate writes amounts: "45.00",
// "500" for yen. The day's currencies are all known to the ledger.
func major(minor int64, currency string) string {
	d, err := ledger.FromMinor(minor, currency)
	if err != nil {
		panic(fmt.Sprintf("demo: %d %s: %v", minor, currency, err))
	}
	return ledger.Format(d, currency)
}
