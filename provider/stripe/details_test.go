package stripe_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider/stripe"
)

// event is a stored Stripe event of typ whose data.object is obj.
func event(t *testing.T, id, typ string, created int64, obj map[string]any) []byte {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": created,
		"data": map[string]any{"object": obj}})
	require.NoError(t, err)
	return raw
}

// TestDetailsOfStripeObjects: the PaymentIntent's own words name the
// payment; its charge carries a copy (Stripe copies the PaymentIntent's
// metadata into the charge it creates); a charge without a PaymentIntent is
// the payment's own object; the reference is the metadata entry under the
// configured key; values that are not strings are dropped, not refused.
func TestDetailsOfStripeObjects(t *testing.T) {
	t.Parallel()
	pi := map[string]any{
		"id": "pi_1", "object": "payment_intent", "amount": 4500, "amount_received": 4500, "currency": "eur",
		"latest_charge": "ch_1", "customer": "cus_9", "description": "Two mugs",
		"metadata": map[string]any{"order_id": "ord-1042", "shop_order": "S-77", "n": 3, "note": "a \"gift\" <é>", "none": nil},
	}
	fx, err := stripe.Effects(event(t, "evt_pi", "payment_intent.succeeded", 1_780_000_000, pi))
	require.NoError(t, err)
	require.Equal(t, "ord-1042", fx.Details.Reference)
	require.Equal(t, "cus_9", fx.Details.Customer)
	require.Equal(t, "Two mugs", fx.Details.Description)
	require.Equal(t, map[string]string{"order_id": "ord-1042", "shop_order": "S-77", "note": `a "gift" <é>`}, fx.Details.Metadata,
		"strings read through their escapes; a number and a null dropped")
	require.False(t, fx.Details.Stamps.Reference.Copy)
	require.Equal(t, "evt_pi", fx.Details.Stamps.Reference.EventID)

	custom, err := stripe.NewMapper("shop_order").Effects(event(t, "evt_pi", "payment_intent.succeeded", 1_780_000_000, pi))
	require.NoError(t, err)
	require.Equal(t, "S-77", custom.Details.Reference)

	charge := map[string]any{
		"id": "ch_1", "object": "charge", "amount": 4500, "amount_captured": 4500, "captured": true, "currency": "eur",
		"payment_intent": map[string]any{"id": "pi_1", "object": "payment_intent"}, "customer": map[string]any{"id": "cus_9", "object": "customer"},
		"description": "Two mugs", "metadata": map[string]any{"order_id": "ord-1042"},
	}
	fx, err = stripe.Effects(event(t, "evt_ch", "charge.succeeded", 1_780_000_000, charge))
	require.NoError(t, err)
	require.Equal(t, "pi_1", fx.PaymentID, "an expanded PaymentIntent names its id")
	require.Equal(t, "ord-1042", fx.Details.Reference)
	require.Equal(t, "cus_9", fx.Details.Customer, "an expanded customer names its id")
	require.True(t, fx.Details.Stamps.Reference.Copy, "a PaymentIntent's charge carries a copy")

	delete(charge, "payment_intent")
	fx, err = stripe.Effects(event(t, "evt_ch2", "charge.succeeded", 1_780_000_000, charge))
	require.NoError(t, err)
	require.Equal(t, "ch_1", fx.PaymentID)
	require.False(t, fx.Details.Stamps.Reference.Copy, "a charge without a PaymentIntent is the payment itself")

	dispute := map[string]any{"id": "dp_1", "object": "dispute", "amount": 4500, "currency": "eur", "charge": "ch_1",
		"payment_intent": "pi_1", "status": "needs_response"}
	fx, err = stripe.Effects(event(t, "evt_dp", "charge.dispute.created", 1_780_000_000, dispute))
	require.NoError(t, err)
	require.True(t, fx.Details.IsZero(), "a dispute says nothing of the order")
}
