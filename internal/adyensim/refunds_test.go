package adyensim_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

// refundAPI is paygate's Checkout client pointed at the simulator, and a
// captured payment of 50.00 EUR to refund.
func refundAPI(t *testing.T, timeout time.Duration) (*adyensim.Sim, string, *adyen.API, string) {
	t.Helper()
	sim := newSim(t)
	srv := sim.StartCheckout(t)
	psp, _ := sim.Authorise(5000, "EUR", "order-1", true)
	sim.Capture(psp, 5000)
	api, err := adyen.NewAPI(adyen.APIConfig{APIKey: sim.APIKey(), MerchantAccount: sim.MerchantAccount(),
		CheckoutURL: srv.URL + adyensim.CheckoutPath, Timeout: timeout})
	require.NoError(t, err)
	return sim, srv.URL, api, psp
}

func refundOf(psp, key string) provider.RefundRequest {
	return provider.RefundRequest{PaymentID: psp, Amount: decimal.RequireFromString("20.00"), Currency: "eur",
		IdempotencyKey: key, Reference: "request-" + key}
}

// TestHeldRefundAnswer: a held refund is made at once; its caller waits,
// and gives up at its own bound; the key is in progress (409, 704,
// transient) until the answer is released, then replayed; one refund.
func TestHeldRefundAnswer(t *testing.T) {
	t.Parallel()
	sim, base, api, psp := refundAPI(t, 300*time.Millisecond)
	sim.HoldNextRefundAnswers(1)

	_, err := api.Refund(context.Background(), refundOf(psp, "held"))
	require.ErrorIs(t, err, provider.ErrAPI)
	require.NotErrorIs(t, err, provider.ErrRefundRefused, "a timeout is indeterminate")
	require.Len(t, sim.CheckoutRefunds(), 1, "the refund was made before the answer was held")

	// The same key and body while Adyen still works on it, seen raw.
	body := `{"merchantAccount":"` + sim.MerchantAccount() + `","amount":{"currency":"EUR","value":2000},"reference":"request-held"}`
	req, err := http.NewRequest(http.MethodPost, base+adyensim.CheckoutPath+"/payments/"+psp+"/refunds", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", sim.APIKey())
	req.Header.Set("Idempotency-Key", "held")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var se adyensim.ServiceError
	require.NoError(t, json.NewDecoder(res.Body).Decode(&se))
	res.Body.Close()
	require.Equal(t, http.StatusConflict, res.StatusCode)
	require.Equal(t, "704", se.ErrorCode)
	require.Equal(t, "true", res.Header.Get("Transient-Error"))
	require.Equal(t, "held", res.Header.Get("Idempotency-Key"))

	_, err = api.Refund(context.Background(), refundOf(psp, "held"))
	require.ErrorIs(t, err, provider.ErrAPI)
	require.NotErrorIs(t, err, provider.ErrRefundRefused, "a key in progress is indeterminate")

	require.Equal(t, 1, sim.ReleaseRefundAnswers())
	got, err := api.Refund(context.Background(), refundOf(psp, "held"))
	require.NoError(t, err)
	made := sim.CheckoutRefunds()
	require.Len(t, made, 1, "one refund for one key")
	require.Equal(t, made[0].PspReference, got.ProviderRefundID)
	require.Equal(t, 4, sim.RefundCalls())
}

// TestHeldRefundAnswerReachesAWaitingCaller: released while its caller
// still waits, the answer goes to it.
func TestHeldRefundAnswerReachesAWaitingCaller(t *testing.T) {
	t.Parallel()
	sim, _, api, psp := refundAPI(t, time.Minute)
	sim.HoldNextRefundAnswers(1)
	type outcome struct {
		res provider.RefundResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := api.Refund(context.Background(), refundOf(psp, "waiting"))
		done <- outcome{res, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(sim.CheckoutRefunds()) == 0 {
		require.True(t, time.Now().Before(deadline), "the refund is made")
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case o := <-done:
		t.Fatalf("answered while held: %+v", o)
	case <-time.After(200 * time.Millisecond):
	}
	require.False(t, sim.ReleaseRefundAnswer(psp), "the payment's reference is not the refund's")
	require.True(t, sim.ReleaseRefundAnswer(sim.CheckoutRefunds()[0].PspReference))
	o := <-done
	require.NoError(t, o.err)
	require.Equal(t, sim.CheckoutRefunds()[0].PspReference, o.res.ProviderRefundID)
	require.Zero(t, sim.ReleaseRefundAnswers(), "nothing left held")
}

// TestCheckoutRefundItemsNameTheRequest: every item about a refund asked
// through the Checkout API carries its request's reference, signed; a
// refund of the script keeps the payment's.
func TestCheckoutRefundItemsNameTheRequest(t *testing.T) {
	t.Parallel()
	sim, _, api, psp := refundAPI(t, time.Minute)
	res, err := api.Refund(context.Background(), refundOf(psp, "named"))
	require.NoError(t, err)
	refundPSP := res.ProviderRefundID
	for _, it := range []adyensim.Item{
		sim.RefundOutcome(refundPSP, true, ""),
		sim.RefundFailed(psp, refundPSP, 2000),
		sim.RefundedReversed(psp, refundPSP, 2000),
	} {
		require.Equal(t, "request-named", it.MerchantReference, it.EventCode)
		require.Equal(t, adyensim.Sign(it, sim.HMACKey()), it.AdditionalData[adyensim.SignatureField], it.EventCode)
	}
	scripted, _ := sim.Refund(psp, 100, true)
	require.Equal(t, "order-1", sim.RefundFailed(psp, scripted, 100).MerchantReference)
}
