package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
)

// refWorld is a real world (PostgreSQL, River workers applying the
// simulator's signed events) behind the API.
type refWorld struct {
	w       *worldtest.World
	e       *echo.Echo
	sim     *stripesim.Sim
	applied int
}

func setupRefWorld(t *testing.T) *refWorld {
	t.Helper()
	w := worldtest.New(t, nil)
	return &refWorld{w: w, e: newEcho(t, w), sim: stripesim.New(stripesim.Config{})}
}

// apply applies the events emitted since the last apply.
func (r *refWorld) apply(t *testing.T) {
	t.Helper()
	events := r.sim.Events()
	r.w.Apply(t, events[r.applied:]...)
	r.applied = len(events)
}

// chargeOpts are the merchant's words on a charge of its own (a payment
// without a PaymentIntent, whose id is the charge's).
type chargeOpts struct {
	currency, reference, customer, description, email string
	metadata                                          map[string]string
}

// charge emits a captured charge without a PaymentIntent, carrying what
// o says as Stripe's charge object does.
func (r *refWorld) charge(id string, amount int64, o chargeOpts) {
	obj := map[string]any{"id": id, "object": "charge", "amount": amount, "amount_captured": amount,
		"captured": true, "currency": o.currency}
	meta := map[string]string{}
	for k, v := range o.metadata {
		meta[k] = v
	}
	if o.reference != "" {
		meta["order_id"] = o.reference
	}
	obj["metadata"] = meta
	if o.customer != "" {
		obj["customer"] = o.customer
	}
	if o.description != "" {
		obj["description"] = o.description
	}
	if o.email != "" {
		obj["receipt_email"] = o.email
	}
	r.sim.Emit("charge.succeeded", obj)
}

// paymentIDs lists the ids GET path answers token, following every page.
func (r *refWorld) paymentIDs(t *testing.T, path, token string) []string {
	t.Helper()
	ids := []string{}
	for {
		var page struct {
			Payments []struct {
				ID string `json:"id"`
			} `json:"payments"`
			NextCursor *string `json:"next_cursor"`
		}
		rec := get(t, r.e, path, token, &page)
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", path, rec.Body.String())
		for _, p := range page.Payments {
			ids = append(ids, p.ID)
		}
		if page.NextCursor == nil {
			return ids
		}
		path = withQuery(path, "cursor", *page.NextCursor)
	}
}

func withQuery(path, name, value string) string {
	u, err := url.Parse(path)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestPaymentsCarryTheMerchantsWords: a payment and the list's items carry
// its reference, customer, description and metadata as its events gave
// them; a payment whose events gave none has null and {}.
func TestPaymentsCarryTheMerchantsWords(t *testing.T) {
	t.Parallel()
	r := setupRefWorld(t)
	r.charge("ch_words", 4200, chargeOpts{currency: "usd", reference: "ord_1001", customer: "cus_words",
		description: "Order 1001, two mugs", metadata: map[string]string{"channel": "web"}})
	fromIntent := r.sim.Pay(stripesim.PayOpts{Amount: 1500, Currency: "eur", Metadata: map[string]string{"order_id": "ord_1002"}})
	bare := r.sim.Pay(stripesim.PayOpts{Amount: 900, Currency: "usd"})
	r.apply(t)

	type details struct {
		ID          string            `json:"id"`
		Reference   *string           `json:"reference"`
		Customer    *string           `json:"customer"`
		Description *string           `json:"description"`
		Metadata    map[string]string `json:"metadata"`
	}
	want := map[string]details{
		"ch_words": {ID: "ch_words", Reference: new("ord_1001"), Customer: new("cus_words"),
			Description: new("Order 1001, two mugs"), Metadata: map[string]string{"order_id": "ord_1001", "channel": "web"}},
		fromIntent.ID: {ID: fromIntent.ID, Reference: new("ord_1002"), Metadata: map[string]string{"order_id": "ord_1002"}},
		bare.ID:       {ID: bare.ID, Metadata: map[string]string{}},
	}
	for id, w := range want {
		for _, token := range []string{opsToken, financeToken} {
			var got details
			rec := get(t, r.e, "/v1/payments/"+id, token, &got)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Equal(t, w, got, id)
		}
	}
	// Unknown is null, not absent; no metadata is {}, not null.
	var raw map[string]json.RawMessage
	get(t, r.e, "/v1/payments/"+bare.ID, financeToken, &raw)
	for _, k := range []string{"reference", "customer", "description"} {
		require.Equal(t, "null", string(raw[k]), k)
	}
	require.Equal(t, "{}", string(raw["metadata"]))

	var page struct {
		Payments []details `json:"payments"`
	}
	rec := get(t, r.e, "/v1/payments", financeToken, &page)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Len(t, page.Payments, 3)
	for _, p := range page.Payments {
		require.Equal(t, want[p.ID], p, "the list's item of %s", p.ID)
	}
}

// TestPaymentsFoundByReferenceCustomerAndSearch: ?reference= and
// ?customer= select exactly, ?q= finds a payment id, a reference or a
// customer, and for ops a receipt email whatever its case; each combines
// with the other filters, and a value too long to be stored is a 400.
func TestPaymentsFoundByReferenceCustomerAndSearch(t *testing.T) {
	t.Parallel()
	r := setupRefWorld(t)
	r.charge("ch_a", 1000, chargeOpts{currency: "usd", reference: "ord_A", customer: "cus_1", email: "Buyer@Example.com"})
	r.charge("ch_b", 2000, chargeOpts{currency: "eur", reference: "ord_B", customer: "cus_1"})
	r.charge("ch_c", 3000, chargeOpts{currency: "usd", reference: "ord_A", customer: "cus_2"})
	// A reference that is another payment's customer: q finds both.
	r.charge("ch_d", 4000, chargeOpts{currency: "usd", reference: "cus_2"})
	d := r.sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "usd", Email: "buyer@example.com"})
	r.sim.Refund(d, 5000)
	r.apply(t)

	for _, c := range []struct {
		query string
		ops   []string // what ops find
		fin   []string // what finance find; nil: the same as ops
	}{
		{"reference=ord_A", []string{"ch_a", "ch_c"}, nil},
		{"reference=ord_a", []string{}, nil},
		{"reference=ord_A&currency=eur", []string{}, nil},
		{"reference=ord_B&currency=eur", []string{"ch_b"}, nil},
		{"customer=cus_1", []string{"ch_a", "ch_b"}, nil},
		{"customer=cus_1&currency=usd", []string{"ch_a"}, nil},
		{"customer=cus_", []string{}, nil},
		{"customer=cus_1&reference=ord_B", []string{"ch_b"}, nil},
		{"q=ch_c", []string{"ch_c"}, nil},
		{"q=" + d.ID, []string{d.ID}, nil},
		{"q=ord_B", []string{"ch_b"}, nil},
		{"q=%20ord_B%20", []string{"ch_b"}, nil},
		{"q=cus_1", []string{"ch_a", "ch_b"}, nil},
		{"q=cus_2", []string{"ch_c", "ch_d"}, nil},
		{"q=ord", []string{}, nil},
		{"q=buyer%40example.com", []string{"ch_a", d.ID}, []string{}},
		{"q=BUYER%40EXAMPLE.COM", []string{"ch_a", d.ID}, []string{}},
		{"q=buyer%40example.com&status=refunded", []string{d.ID}, []string{}},
		{"q=buyer%40example.com&status=succeeded", []string{"ch_a"}, []string{}},
		{"q=Buyer%40Example", []string{}, nil},
		{"q=ord_A&status=succeeded&currency=usd", []string{"ch_a", "ch_c"}, nil},
	} {
		fin := c.fin
		if fin == nil {
			fin = c.ops
		}
		require.ElementsMatch(t, c.ops, r.paymentIDs(t, "/v1/payments?"+c.query, opsToken), "ops: %s", c.query)
		require.ElementsMatch(t, fin, r.paymentIDs(t, "/v1/payments?"+c.query, financeToken), "finance: %s", c.query)
	}
	// Paging a search keeps to it.
	ids := r.paymentIDs(t, "/v1/payments?q=cus_1&limit=1", opsToken)
	require.ElementsMatch(t, []string{"ch_a", "ch_b"}, ids)

	long := strings.Repeat("é", 501)
	for _, name := range []string{"reference", "customer", "q"} {
		rec := get(t, r.e, "/v1/payments?"+name+"="+url.QueryEscape(long), opsToken, nil)
		require.Equal(t, http.StatusBadRequest, rec.Code, name)
		require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType))
		require.Contains(t, rec.Body.String(), name+" must be at most 500 characters")
		// 500 characters is a search, even if it finds nothing.
		require.Empty(t, r.paymentIDs(t, "/v1/payments?"+name+"="+url.QueryEscape(long[len("é"):]), opsToken), name)
	}
}
