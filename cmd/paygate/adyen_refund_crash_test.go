package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/reliability"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/refund"
)

// adyenCrashBundle is the crash harness with Adyen's simulator: its
// Checkout API behind the gateways' API key, its signed notifications
// delivered to their /webhooks/adyen.
type adyenCrashBundle struct {
	*crashHarness
	sim *adyensim.Sim
}

func adyenCrashSetup(t *testing.T) *adyenCrashBundle {
	t.Helper()
	sim := adyensim.New(adyensim.Config{})
	srv := sim.StartCheckout(t)
	h := newCrashHarness(t,
		"PAYGATE_ADYEN_HMAC_KEYS="+sim.HMACKeyHex(),
		"PAYGATE_ADYEN_API_KEY="+sim.APIKey(),
		"PAYGATE_ADYEN_MERCHANT_ACCOUNT="+sim.MerchantAccount(),
		"PAYGATE_ADYEN_CHECKOUT_URL="+srv.URL+adyensim.CheckoutPath,
	)
	return &adyenCrashBundle{crashHarness: h, sim: sim}
}

// deliver sends items to g as one batch of Adyen's notifications.
func (b *adyenCrashBundle) deliver(g *reliability.Gateway, items ...adyensim.Item) {
	b.t.Helper()
	res, err := b.sim.Deliver(context.Background(), g.URL()+"/webhooks/adyen", "", items...)
	require.NoError(b.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(b.t, err)
	require.Equal(b.t, http.StatusOK, res.StatusCode, string(body))
	require.Equal(b.t, "[accepted]", string(body))
}

// pay authorises and captures 120.00 EUR and waits for paygate to book it.
func (b *adyenCrashBundle) pay(g *reliability.Gateway) {
	b.t.Helper()
	psp, auth := b.sim.Authorise(12000, "EUR", "order-crash", true)
	_, capture := b.sim.Capture(psp, 12000)
	b.paymentID = psp
	b.deliver(g, auth, capture)
	b.awaitPayment(g, "120.00")
}

// heldRefund is where the scenarios start: one gateway, a payment, and a
// refund of 40.00 asked under key, which Adyen makes and whose answer it
// holds until released.
func heldRefund(t *testing.T, key string) (*adyenCrashBundle, *reliability.Gateway, refundView) {
	b := adyenCrashSetup(t)
	g := b.start()
	b.pay(g)
	b.sim.HoldNextRefundAnswers(1)
	r := b.ask(g, key, "40.00")
	b.awaitAdyenCommitted()
	return b, g, r
}

func (b *adyenCrashBundle) awaitAdyenCommitted() {
	b.t.Helper()
	b.waitFor("Adyen to make the refund", 30*time.Second, func() bool { return len(b.sim.CheckoutRefunds()) == 1 })
}

// awaitKeyInUse waits until an attempt after the first came back
// indeterminate: Adyen answered 704, the key still in progress.
func (b *adyenCrashBundle) awaitKeyInUse() {
	b.t.Helper()
	b.waitFor("a second attempt with the key", 120*time.Second, func() bool { return b.sim.RefundCalls() >= 2 })
}

// requireOneRefund is what every scenario must end with: exactly one
// refund at Adyen, made under the key derived from the request and the
// request's reference; once the REFUND notification arrives, the request
// succeeded and the ledger holds one refund of 40.00.
func (b *adyenCrashBundle) requireOneRefund(g *reliability.Gateway, id string) {
	b.t.Helper()
	b.waitFor("the request to be submitted", 90*time.Second, func() bool { return b.state(g, id).ProviderRefundID != nil })
	made := b.sim.CheckoutRefunds()
	require.Len(b.t, made, 1, "one refund at Adyen")
	require.Equal(b.t, id, made[0].Reference)
	require.Equal(b.t, adyen.IdempotencyKey(refund.Request{ID: id}.ProviderKey()), made[0].IdempotencyKey)
	require.Equal(b.t, int64(4000), made[0].Value)
	require.Equal(b.t, made[0].PspReference, *b.state(g, id).ProviderRefundID)

	outcome := b.sim.RefundOutcome(made[0].PspReference, true, "")
	b.deliver(g, outcome)
	b.deliver(g, b.sim.Redeliver(outcome)) // Adyen delivers at least once
	b.waitFor("the request to succeed", 30*time.Second, func() bool { return b.state(g, id).State == "succeeded" })
	b.requireLedgerRefund(g, "40.00")
}

// TestAdyenRefundSurvivesSIGKILLMidCall: Adyen makes the refund and holds
// its answer; the gateway is SIGKILLed waiting for it, before it records
// anything. Adyen finishes; restarted, the gateway's rescued job asks again
// with the same Idempotency-Key and gets Adyen's first answer.
func TestAdyenRefundSurvivesSIGKILLMidCall(t *testing.T) {
	t.Parallel()
	b, g, r := heldRefund(t, "adyen-crash-kill")
	require.NoError(t, g.Kill())
	require.Equal(t, 1, b.sim.ReleaseRefundAnswers())
	require.Nil(t, b.state(b.start(), r.ID).ProviderRefundID, "nothing was recorded before the kill")
	b.requireOneRefund(b.gateways[1], r.ID)
}

// TestAdyenRefundSurvivesATimeoutAfterCommit: Adyen makes the refund but
// holds its answer past the call's bound (PAYGATE_REFUND_TIMEOUT): the
// attempt is indeterminate, the next one finds the key still in progress
// (704, indeterminate too), and the one after Adyen answered records its
// first answer.
func TestAdyenRefundSurvivesATimeoutAfterCommit(t *testing.T) {
	t.Parallel()
	b, g, r := heldRefund(t, "adyen-crash-timeout")
	b.awaitKeyInUse()
	require.Nil(t, b.state(g, r.ID).ProviderRefundID, "no answer, nothing recorded")
	require.Equal(t, 1, b.sim.ReleaseRefundAnswers())
	b.requireOneRefund(g, r.ID)
}

// TestAdyenRefundSurvivesADroppedConnection: Adyen makes the refund and
// the connection drops before its answer; the retry with the same key gets
// Adyen's stored answer.
func TestAdyenRefundSurvivesADroppedConnection(t *testing.T) {
	t.Parallel()
	b := adyenCrashSetup(t)
	g := b.start()
	b.pay(g)
	b.sim.DropNextRefundAnswers(1)
	r := b.ask(g, "adyen-crash-dropped", "40.00")
	b.requireOneRefund(g, r.ID)
	require.GreaterOrEqual(t, b.sim.RefundCalls(), 2, "the call was made again")
}

// TestAdyenRefundWithTwoInstancesAfterARescue: the instance working the
// refund freezes while Adyen holds its answer; River rescues the job and
// the other instance works it too, with the same key: Adyen answers 704
// while the first request is in progress, then its first answer. Thawed,
// the first instance records the same refund.
func TestAdyenRefundWithTwoInstancesAfterARescue(t *testing.T) {
	t.Parallel()
	b, first, r := heldRefund(t, "adyen-crash-two")
	require.NoError(t, first.Pause())
	second := b.start()
	b.awaitKeyInUse()
	require.Len(t, b.sim.CheckoutRefunds(), 1, "the key in use made nothing new")
	require.Equal(t, 1, b.sim.ReleaseRefundAnswers())
	b.waitFor("the second instance to record the refund", 120*time.Second, func() bool {
		return b.state(second, r.ID).ProviderRefundID != nil
	})
	require.NoError(t, first.Resume())
	time.Sleep(2 * time.Second) // the first instance's attempt ends too
	b.requireOneRefund(second, r.ID)
}
