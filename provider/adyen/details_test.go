package adyen_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider/adyen"
)

// TestDetailsOfItems: the AUTHORISATION names the order (merchantReference),
// the shopper (shopperReference) and the metadata (metadata.<key> entries);
// a modification's merchantReference is its own request's, never the order.
func TestDetailsOfItems(t *testing.T) {
	t.Parallel()
	auth := item(adyen.CodeAuthorisation, payPSP, "", 4500, "EUR", true, map[string]any{
		"shopperReference": "shopper-42", "metadata.cartId": "cart-9", "metadata.channel": "web",
		"metadata.ignored": 7, // not a string: not kept, nothing refused
	})
	fx, err := adyen.Effects(auth)
	require.NoError(t, err)
	d := fx.Details
	require.Equal(t, "order-1", d.Reference)
	require.Equal(t, "shopper-42", d.Customer)
	require.Empty(t, d.Description)
	require.Equal(t, map[string]string{"cartId": "cart-9", "channel": "web"}, d.Metadata)
	require.Equal(t, eventAt, d.Stamps.Reference.At)
	require.Equal(t, adyen.EventID(mustDecode(t, auth)), d.Stamps.Reference.EventID)

	refused, err := adyen.Effects(item(adyen.CodeAuthorisation, payPSP, "", 4500, "EUR", false, nil))
	require.NoError(t, err)
	require.Equal(t, "order-1", refused.Details.Reference, "a refused payment is still the order's")

	for _, code := range []string{adyen.CodeCapture, adyen.CodeRefund, adyen.CodeChargeback} {
		fx, err := adyen.Effects(item(code, refundPSP, payPSP, 4500, "EUR", true, nil))
		require.NoError(t, err, code)
		require.True(t, fx.Details.IsZero(), "%s carries its own request's reference, not the order's", code)
	}
}

func mustDecode(t *testing.T, raw []byte) adyen.Item {
	t.Helper()
	it, err := adyen.DecodeItem(raw)
	require.NoError(t, err)
	return it
}
