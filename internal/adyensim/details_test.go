package adyensim_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/provider/adyen"
)

// TestAuthorisationCarriesTheShopsWords: the AUTHORISATION names the order
// (merchantReference), the shopper (additionalData.shopperReference) and
// the request's metadata (additionalData.metadata.<key>), signed, and
// paygate's mapper reads them as the payment's details; the items of its
// modifications carry none of the shopper's words.
func TestAuthorisationCarriesTheShopsWords(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	k := keys(t, sim)
	psp, auth := sim.AuthoriseWith(adyensim.AuthoriseOpts{Value: 6500, Currency: "eur", Reference: "ord-1001",
		ShopperReference: "cust-ada", Metadata: map[string]string{"cart_id": "cart_9", "channel": "web"}})
	require.Equal(t, "ord-1001", auth.MerchantReference)
	require.Equal(t, "cust-ada", auth.AdditionalData["shopperReference"])
	require.Equal(t, "cart_9", auth.AdditionalData["metadata.cart_id"])
	require.Equal(t, "web", auth.AdditionalData["metadata.channel"])
	require.Equal(t, "true", auth.Success)

	decoded := func(it adyensim.Item) adyen.Item {
		t.Helper()
		raw, err := json.Marshal(it)
		require.NoError(t, err)
		got, err := adyen.DecodeItem(raw)
		require.NoError(t, err)
		require.NoError(t, adyen.Verify(got, k), it.EventCode)
		return got
	}
	decoded(auth)
	eff, err := adyen.Effects(mustJSON(t, auth))
	require.NoError(t, err)
	require.Equal(t, "ord-1001", eff.Details.Reference)
	require.Equal(t, "cust-ada", eff.Details.Customer)
	require.Empty(t, eff.Details.Description, "Adyen has no description")
	require.Equal(t, map[string]string{"cart_id": "cart_9", "channel": "web"}, eff.Details.Metadata)

	_, capture := sim.Capture(psp, 6500)
	_, refund := sim.Refund(psp, 500, true)
	for _, it := range []adyensim.Item{capture, refund} {
		decoded(it)
		require.NotContains(t, it.AdditionalData, "shopperReference", it.EventCode)
		require.NotContains(t, it.AdditionalData, "metadata.cart_id", it.EventCode)
	}

	_, refused := sim.AuthoriseWith(adyensim.AuthoriseOpts{Value: 100, Currency: "EUR", Reference: "ord-1002",
		ShopperReference: "cust-bob", Refused: true})
	decoded(refused)
	require.Equal(t, "false", refused.Success)
	require.Equal(t, "cust-bob", refused.AdditionalData["shopperReference"], "a refused payment names its shopper too")

	// Authorise is AuthoriseWith without the shopper's words.
	_, plain := sim.Authorise(100, "EUR", "ord-1003", true)
	require.NotContains(t, plain.AdditionalData, "shopperReference")
	require.Equal(t, []string{"authCode", "cardBin", "cardSummary", "expiryDate", "hmacSignature"}, keysOf(anyMap(plain.AdditionalData)))
}

// TestModificationsCarryTheirRequestsReference: a modification whose
// request gave a reference is named by it in each of its items
// (merchantReference, signed) and in its settlement row; one whose request
// gave none carries the payment's, as before.
func TestModificationsCarryTheirRequestsReference(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	k := keys(t, sim)
	psp, _ := sim.Authorise(9000, "EUR", "ord-1001", true)

	sim.ReferenceNextModification("capture-ord-1001")
	capture, captured := sim.Capture(psp, 9000)
	sim.ReferenceNextModification("refund-1")
	refund, refunded := sim.Refund(psp, 2000, true)
	unnamed, plain := sim.Refund(psp, 1000, true)
	items := []adyensim.Item{captured, refunded, sim.RefundFailed(psp, refund, 2000), plain}
	want := []string{"capture-ord-1001", "refund-1", "refund-1", "ord-1001"}
	for i, it := range items {
		require.Equal(t, want[i], it.MerchantReference, it.EventCode)
		require.Equal(t, psp, it.OriginalReference, it.EventCode)
		got, err := adyen.DecodeItem(mustJSON(t, it))
		require.NoError(t, err)
		require.NoError(t, adyen.Verify(got, k), "%s: signed with its reference", it.EventCode)
		eff, err := adyen.Effects(mustJSON(t, it))
		require.NoError(t, err, it.EventCode)
		require.Empty(t, eff.Details.Reference, "%s: only the AUTHORISATION names the order", it.EventCode)
	}

	b := sim.NewBatch(1)
	require.Equal(t, "capture-ord-1001", b.Settled(capture, adyensim.Fees{}).ModificationMerchantReference)
	row := b.Refunded(refund, adyensim.Fees{})
	require.Equal(t, "ord-1001", row.MerchantReference, "the row's payment")
	require.Equal(t, "refund-1", row.ModificationMerchantReference)
	require.Empty(t, b.Refunded(unnamed, adyensim.Fees{}).ModificationMerchantReference)
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
