package stripesim_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
)

// TestPaymentCarriesTheShopsWords: the intent carries the order, the
// customer and the description it was made with, and every charge of it,
// declined attempts included, a copy of them, as Stripe sends them (the
// customer an id, not expanded).
func TestPaymentCarriesTheShopsWords(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	cus := sim.CreateCustomer(stripesim.CustomerOpts{Email: "ada@example.com", Name: "Ada Lovelace"})
	require.Regexp(t, `^cus_[0-9A-Za-z]{24}$`, cus)
	created := sim.Events()[0]
	require.Equal(t, stripesim.EventCustomerCreated, created.Type)
	_, c := decode[stripe.Customer](t, created)
	require.Equal(t, cus, c.ID)
	require.Equal(t, "ada@example.com", c.Email)

	p := sim.Pay(stripesim.PayOpts{
		Amount: 4200, Email: "ada@example.com", FailFirst: 1,
		OrderID: "ord-1001", Customer: cus, Description: "Order ord-1001: 2 notebooks",
		Metadata: map[string]string{"cart_id": "cart_77", "order_id": "replaced by OrderID"},
	})
	want := map[string]string{"order_id": "ord-1001", "cart_id": "cart_77"}
	require.Equal(t, want, p.Metadata)
	require.Equal(t, cus, p.Customer)
	require.Equal(t, "Order ord-1001: 2 notebooks", p.Description)

	evs := sim.EventsOf(p.ID)
	require.Equal(t, []stripesim.EventType{
		stripesim.EventChargeFailed, stripesim.EventPaymentIntentPaymentFailed,
		stripesim.EventChargeSucceeded, stripesim.EventPaymentIntentSucceeded,
	}, types(evs))
	for _, ev := range evs {
		var raw struct {
			Data struct {
				Object struct {
					Object      string            `json:"object"`
					Customer    any               `json:"customer"`
					Description any               `json:"description"`
					Metadata    map[string]string `json:"metadata"`
				} `json:"object"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(ev.Payload, &raw))
		obj := raw.Data.Object
		require.Equal(t, cus, obj.Customer, "%s: customer is the id", ev.Type)
		require.Equal(t, "Order ord-1001: 2 notebooks", obj.Description, ev.Type)
		require.Equal(t, want, obj.Metadata, ev.Type)
	}

	// Without them Stripe sends null, and empty metadata.
	bare := sim.Pay(stripesim.PayOpts{Amount: 100})
	for _, ev := range sim.EventsOf(bare.ID) {
		var raw struct {
			Data struct {
				Object map[string]any `json:"object"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(ev.Payload, &raw))
		obj := raw.Data.Object
		require.Contains(t, obj, "customer")
		require.Nil(t, obj["customer"], ev.Type)
		require.Contains(t, obj, "description")
		require.Nil(t, obj["description"], ev.Type)
		require.Equal(t, map[string]any{}, obj["metadata"], ev.Type)
	}
}

// TestChargeKeepsTheCopyItTookAtConfirmation: Stripe copies an intent's
// metadata and description into its charge once, when the charge is made;
// an update of the intent afterwards shows in the intent's later events
// and never in the charge's.
func TestChargeKeepsTheCopyItTookAtConfirmation(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 5000, ManualCapture: true, OrderID: "ord-7", Description: "first words",
		Metadata: map[string]string{"cart_id": "cart_1", "gift": "yes"}})
	sim.Advance(time.Hour)
	before := len(sim.Events())
	sim.UpdatePayment(p, stripesim.PaymentUpdate{Description: "second words",
		Metadata: map[string]string{"order_id": "ord-8", "gift": ""}})
	require.Len(t, sim.Events(), before, "Stripe has no payment_intent.updated")
	require.Equal(t, map[string]string{"order_id": "ord-8", "cart_id": "cart_1"}, p.Metadata)
	require.Equal(t, "second words", p.Description)

	sim.Capture(p)
	evs := sim.Events()[before:]
	require.Equal(t, []stripesim.EventType{stripesim.EventChargeCaptured, stripesim.EventPaymentIntentSucceeded}, types(evs))
	_, ch := decode[stripe.Charge](t, evs[0])
	require.Equal(t, map[string]string{"order_id": "ord-7", "cart_id": "cart_1", "gift": "yes"}, ch.Metadata, "the charge's copy")
	require.Equal(t, "first words", ch.Description)
	_, pi := decode[stripe.PaymentIntent](t, evs[1])
	require.Equal(t, map[string]string{"order_id": "ord-8", "cart_id": "cart_1"}, pi.Metadata, "the intent's own")
	require.Equal(t, "second words", pi.Description)

	sim.Refund(p, 0)
	for _, ev := range sim.Events()[before+2:] {
		if ev.Type == stripesim.EventChargeRefunded {
			_, ch := decode[stripe.Charge](t, ev)
			require.Equal(t, "ord-7", ch.Metadata["order_id"], "a refund does not copy again")
		}
	}
}

// TestPayRefusesWhatStripeRefuses: a customer the account does not have,
// and metadata beyond Stripe's limits (50 keys, keys of 40 characters,
// values of 500), are a bad script.
func TestPayRefusesWhatStripeRefuses(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	require.PanicsWithValue(t, `stripesim: Pay: no such customer "cus_nobody"`, func() {
		sim.Pay(stripesim.PayOpts{Amount: 100, Customer: "cus_nobody"})
	})
	many := map[string]string{}
	for i := range 51 {
		many[fmt.Sprintf("key_%02d", i)] = "v"
	}
	require.Len(t, many, 51)
	require.Panics(t, func() { sim.Pay(stripesim.PayOpts{Amount: 100, Metadata: many}) })
	require.Panics(t, func() {
		sim.Pay(stripesim.PayOpts{Amount: 100, Metadata: map[string]string{strings.Repeat("k", 41): "v"}})
	})
	require.Panics(t, func() { sim.Pay(stripesim.PayOpts{Amount: 100, OrderID: strings.Repeat("9", 501)}) })
	require.Empty(t, sim.Events(), "nothing refused was emitted")

	delete(many, "key_00")
	delete(many, "key_01")
	p := sim.Pay(stripesim.PayOpts{Amount: 100, Metadata: many, OrderID: strings.Repeat("9", 500)})
	require.Len(t, p.Metadata, 50, "49 keys and order_id: at the limit")
	require.Panics(t, func() { sim.UpdatePayment(p, stripesim.PaymentUpdate{Metadata: map[string]string{"one_more": "v"}}) })
}
