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
	// Reference is the shop's order the payment is for (ord-1001), and
	// Customer the shopper: a Stripe Customer (cus_…), or the shop's own
	// id of the shopper at Adyen (its shopperReference).
	Reference string `json:"reference"`
	Customer  string `json:"customer"`
	// Story is what happened to it during the day.
	Story string `json:"story"`
}

// Refund is a refund the day's story asks of paygate: the demo command
// requests it through paygate's refund API, so that paygate's saga submits
// it to the provider, which settles it with its webhooks.
type Refund struct {
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"`
	// Reference is the order of the payment.
	Reference string `json:"reference"`
	Currency  string `json:"currency"`
	// Amount is in the currency's major unit; empty asks for everything
	// refundable.
	Amount string `json:"amount,omitempty"`
	Reason string `json:"reason"`
	Note   string `json:"note"`
}

// DoubleCharge is an order the day charges more than once: paygate finds
// its payments by their common reference, and the refund of Extra, one of
// the day's Refunds, leaves one.
type DoubleCharge struct {
	Reference string   `json:"reference"`
	Payments  []string `json:"payments"`
	Extra     string   `json:"extra"`
}

// shop is the shop's own books, which run on from one day to the next:
// its order numbers, and the Customers it keeps at Stripe, one per
// shopper, made at the shopper's first payment. The world plays every day
// through one shop, in the same order when its journal is replayed, so
// the numbers and Customers come out the same.
type shop struct {
	orders    int               // orders numbered so far
	customers map[string]string // a shopper's email → its Stripe Customer
}

func newShop() *shop { return &shop{customers: map[string]string{}} }

// ordersPerDay is how many orders a day's story numbers: each provider's
// sales name theirs by their place in the day (sale.n), 1 to ordersPerDay.
const ordersPerDay = 18

// order is the reference of the day's nth order, for a day whose orders
// start after base.
func order(base, n int) string {
	if n < 1 || n > ordersPerDay {
		panic(fmt.Sprintf("demo: order %d of a day of %d", n, ordersPerDay))
	}
	return OrderReference(base + n)
}

// OrderReference is the reference of the shop's nth order (ord-1001 the
// first).
func OrderReference(n int) string { return fmt.Sprintf("ord-%d", 1000+n) }

// sale is one payment of the scripted day.
type sale struct {
	n        int    // the order's place among the day's orders
	at       string // HH:MM, UTC
	amount   int64  // minor units
	currency string
	name     string
	email    string
	item     string // what was bought
}

// metadata is what the shop's checkout sends with an order's payment.
func (s sale) metadata(ref string) map[string]string {
	return map[string]string{"cart_id": "cart-" + strings.TrimPrefix(ref, "ord-")}
}

// The Stripe account settles in USD, as a US account does: charges in
// other currencies are converted at these rates, so reconciliation shows
// each conversion with its rate.
const stripeSettlement = "usd"

var stripeRates = map[string]string{"eur": "1.085", "gbp": "1.27", "jpy": "0.0067"}

// stripeDay scripts a day of a shop's Stripe account on sim, dated day
// (midnight UTC), and returns its payments, the refunds to ask of paygate
// and the order it charges twice. The story is fixed; only the ids and the
// order numbers differ from one day to the next, so a report reads the
// same every time. Every payment names its order (metadata order_id, the
// key paygate reads by default), its shopper's Customer and what was
// bought.
func stripeDay(sim *stripesim.Sim, sh *shop, day time.Time) ([]Payment, []Refund, DoubleCharge) {
	var out []Payment
	base := sh.orders
	at := func(hhmm string) {
		t, err := time.Parse("15:04", hhmm)
		if err != nil {
			panic(fmt.Sprintf("demo: time %q: %v", hhmm, err))
		}
		sim.SetNow(day.Add(time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute))
	}
	pay := func(s sale, opts stripesim.PayOpts, story string) *stripesim.Payment {
		at(s.at)
		cus, ok := sh.customers[s.email]
		if !ok {
			cus = sim.CreateCustomer(stripesim.CustomerOpts{Email: s.email, Name: s.name})
			sh.customers[s.email] = cus
		}
		ref := order(base, s.n)
		opts.Amount, opts.Currency, opts.Name, opts.Email = s.amount, s.currency, s.name, s.email
		opts.OrderID, opts.Customer, opts.Metadata = ref, cus, s.metadata(ref)
		opts.Description = "Order " + ref + ": " + s.item
		p := sim.Pay(opts)
		out = append(out, Payment{Provider: "stripe", ID: p.ID, Currency: p.Currency, Amount: major(p.Amount, p.Currency),
			Reference: ref, Customer: cus, Story: story})
		return p
	}

	pay(sale{1, "08:12", 36000, "usd", "Ada Lovelace", "ada@example.com", "a brass orrery"}, stripesim.PayOpts{}, "paid by card")
	mug := pay(sale{3, "08:47", 4500, "eur", "Émilie du Châtelet", "emilie@example.com", "three mugs"}, stripesim.PayOpts{},
		"paid in euros, settled in dollars; partly refunded through paygate")
	pay(sale{4, "09:30", 12900, "gbp", "Mary Somerville", "mary@example.com", "a star atlas"}, stripesim.PayOpts{FailFirst: 1},
		"declined once, then paid with another card")
	pay(sale{5, "10:05", 500, "jpy", "Kōwa Seki", "kowa@example.com", "a soroban"}, stripesim.PayOpts{}, "paid in yen (no minor unit)")
	held := pay(sale{6, "10:52", 8900, "usd", "Grace Hopper", "grace@example.com", "a nanosecond of wire"}, stripesim.PayOpts{ManualCapture: true},
		"authorized, captured when the order shipped")
	pay(sale{8, "11:15", 2500, "usd", "Alan Turing", "alan@example.com", "a chess set"}, stripesim.PayOpts{Declined: true},
		"declined: the customer gave up")
	lamp := pay(sale{9, "12:03", 18900, "eur", "Lise Meitner", "lise@example.com", "a desk lamp"}, stripesim.PayOpts{},
		"partly refunded from Stripe's Dashboard")
	chair := pay(sale{10, "13:20", 129900, "usd", "Charles Babbage", "charles@example.com", "an office chair"}, stripesim.PayOpts{},
		"disputed as fraudulent by the card holder")
	at("14:20")
	sim.Capture(held)
	pay(sale{12, "14:41", 3400, "gbp", "Rosalind Franklin", "rosalind@example.com", "a set of slides"}, stripesim.PayOpts{}, "paid in pounds")
	canceled := pay(sale{13, "15:10", 4999, "usd", "Hedy Lamarr", "hedy@example.com", "a radio kit"}, stripesim.PayOpts{ManualCapture: true},
		"authorized, then canceled: out of stock")
	pay(sale{15, "16:25", 12800, "jpy", "Hideki Yukawa", "hideki@example.com", "a cloud chamber"}, stripesim.PayOpts{}, "paid in yen")
	pay(sale{16, "17:02", 7450, "usd", "Katherine Johnson", "katherine@example.com", "a slide rule"}, stripesim.PayOpts{Processing: true},
		"a bank debit: processing, then paid")
	at("17:45")
	sim.Refund(lamp, 5000)
	at("18:00")
	sim.Cancel(canceled)
	at("19:05")
	sim.Dispute(chair, 0)
	keyboard := sale{18, "22:46", 15800, "usd", "Edsger Dijkstra", "edsger@example.com", "a mechanical keyboard"}
	first := pay(keyboard, stripesim.PayOpts{}, "paid")
	keyboard.at = "22:48"
	twice := pay(keyboard, stripesim.PayOpts{},
		"the same order charged again (the checkout was sent twice); refunded in full through paygate")

	ref := order(base, keyboard.n)
	refunds := []Refund{
		{Provider: "stripe", PaymentID: mug.ID, Reference: order(base, 3), Currency: mug.Currency, Amount: major(1500, mug.Currency),
			Reason: "requested_by_customer", Note: "one of three mugs arrived broken"},
		{Provider: "stripe", PaymentID: twice.ID, Reference: ref, Currency: twice.Currency,
			Reason: "duplicate", Note: "order " + ref + " was paid twice"},
	}
	return out, refunds, DoubleCharge{Reference: ref, Payments: []string{first.ID, twice.ID}, Extra: twice.ID}
}

// adyenDay scripts the same day of the shop's Adyen merchant account on
// sim: card payments authorised and captured (Adyen sends a CAPTURE for
// each), one refused, each for an order of the day, with the shop's id of
// the shopper (shopperReference) and the cart in its metadata. It returns
// the items Adyen sends for them, in order, its payments and the refunds to
// ask of paygate.
func adyenDay(sim *adyensim.Sim, sh *shop, day time.Time) ([]adyensim.Item, []Payment, []Refund) {
	var (
		items []adyensim.Item
		out   []Payment
		base  = sh.orders
	)
	at := func(hhmm string) {
		t, err := time.Parse("15:04", hhmm)
		if err != nil {
			panic(fmt.Sprintf("demo: time %q: %v", hhmm, err))
		}
		sim.SetNow(day.Add(time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute))
	}
	authorise := func(s sale, refused bool) (string, adyensim.Item, Payment) {
		at(s.at)
		ref := order(base, s.n)
		shopper := "cust-" + strings.ToLower(strings.Fields(s.name)[0])
		psp, auth := sim.AuthoriseWith(adyensim.AuthoriseOpts{Value: s.amount, Currency: s.currency, Reference: ref,
			ShopperReference: shopper, Metadata: s.metadata(ref), Refused: refused})
		cur := strings.ToLower(s.currency)
		return psp, auth, Payment{Provider: "adyen", ID: psp, Currency: cur, Amount: major(s.amount, cur), Reference: ref, Customer: shopper}
	}
	sell := func(s sale, story string) string {
		psp, auth, p := authorise(s, false)
		sim.Advance(2 * time.Minute)
		_, capture := sim.Capture(psp, s.amount)
		items = append(items, auth, capture)
		p.Story = story
		out = append(out, p)
		return psp
	}

	sell(sale{n: 2, at: "08:30", amount: 6500, currency: "EUR", name: "Sophie Germain"}, "authorised and captured")
	sell(sale{n: 7, at: "11:10", amount: 49900, currency: "SEK", name: "Sofia Kovalevskaya"}, "paid in Swedish kronor")
	_, refused, p := authorise(sale{n: 11, at: "13:45", amount: 2300, currency: "EUR", name: "Maria Agnesi"}, true)
	items = append(items, refused)
	p.Story = "refused by the issuer"
	out = append(out, p)
	late := sell(sale{n: 14, at: "15:20", amount: 8900, currency: "GBP", name: "Dorothy Hodgkin"}, "delivered late; partly refunded through paygate")
	sell(sale{n: 17, at: "18:05", amount: 12000, currency: "EUR", name: "Emmy Noether"}, "authorised and captured")

	refunds := []Refund{{Provider: "adyen", PaymentID: late, Reference: order(base, 14), Currency: "gbp", Amount: major(2000, "gbp"),
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
