package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/mailpit"
	"github.com/paygate/paygate/internal/reliability"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
)

// crashHarness is the refund saga against the real binary, whatever the
// provider: one or more `paygate serve` on one database, configured with
// env, and the payment the scenario refunds.
type crashHarness struct {
	t         *testing.T
	db        string
	env       []string
	bin       string
	paymentID string
	gateways  []*reliability.Gateway
}

func newCrashHarness(t *testing.T, env ...string) *crashHarness {
	t.Helper()
	ctx := context.Background()
	_, dbURL := testdb.NewWithURL(t)
	bin, err := reliability.Binary(ctx)
	require.NoError(t, err)
	require.NoError(t, reliability.Migrate(ctx, bin, dbURL))
	return &crashHarness{t: t, db: dbURL, bin: bin, env: append([]string{
		// A short call bound, so that a crashed worker's refund is rescued
		// within the test's patience.
		"PAYGATE_REFUND_TIMEOUT=4s",
	}, env...)}
}

// crashBundle is the harness with Stripe's simulator behind the gateways'
// API key and its webhooks delivered to them, mailpit as their SMTP
// server.
type crashBundle struct {
	*crashHarness
	sim     *stripesim.Sim
	mail    *mailpit.Server
	payment *stripesim.Payment
	seen    int
}

func crashSetup(t *testing.T) *crashBundle {
	t.Helper()
	sim := stripesim.New(stripesim.Config{})
	srv := sim.Start(t)
	mail := mailpit.Start(t)
	h := newCrashHarness(t,
		"PAYGATE_STRIPE_WEBHOOK_SECRETS="+sim.WebhookSecret(),
		"PAYGATE_STRIPE_API_KEY="+sim.APIKey(),
		"PAYGATE_STRIPE_API_URL="+srv.URL,
		"PAYGATE_SMTP_URL="+mail.SMTPURL(),
		"PAYGATE_EMAIL_FROM=paygate@example.test",
		"PAYGATE_OPS_EMAIL=ops@example.test",
	)
	return &crashBundle{crashHarness: h, sim: sim, mail: mail}
}

func (b *crashHarness) start() *reliability.Gateway {
	b.t.Helper()
	g, err := reliability.NewGateway(reliability.GatewayConfig{Binary: b.bin, DatabaseURL: b.db, Env: b.env})
	require.NoError(b.t, err)
	require.NoError(b.t, g.Start(context.Background()))
	b.t.Cleanup(func() {
		_ = g.Resume()
		g.Stop()
	})
	b.gateways = append(b.gateways, g)
	return g
}

// deliver sends the simulator's new events to g, as Stripe's webhooks.
func (b *crashBundle) deliver(g *reliability.Gateway) {
	b.t.Helper()
	events := b.sim.Events()
	_, err := b.sim.Deliver(context.Background(), g.WebhookURL(), events[b.seen:], nil)
	require.NoError(b.t, err)
	b.seen = len(events)
}

type refundView struct {
	ID               string  `json:"id"`
	State            string  `json:"state"`
	ProviderRefundID *string `json:"provider_refund_id"`
}

func (b *crashHarness) ask(g *reliability.Gateway, key, amount string) refundView {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.URL()+"/v1/payments/"+b.paymentID+"/refunds",
		bytes.NewReader([]byte(fmt.Sprintf(`{"amount":%q,"reason":"requested_by_customer"}`, amount))))
	require.NoError(b.t, err)
	req.Header.Set("Authorization", "Bearer "+reliability.OpsToken)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	require.Equal(b.t, http.StatusAccepted, resp.StatusCode)
	var v refundView
	require.NoError(b.t, json.NewDecoder(resp.Body).Decode(&v))
	return v
}

func (b *crashHarness) state(g *reliability.Gateway, id string) refundView {
	b.t.Helper()
	var v refundView
	require.Equal(b.t, http.StatusOK, getJSON(b.t, g.URL()+"/v1/refund-requests/"+id, reliability.OpsToken, &v))
	return v
}

// waitFor polls until cond holds, for up to d.
func (b *crashHarness) waitFor(what string, d time.Duration, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requireOneRefund is what every scenario must end with: exactly one
// refund at Stripe, one refund in the ledger, one confirmation email sent,
// and the request succeeded.
func (b *crashBundle) requireOneRefund(g *reliability.Gateway, id string) {
	b.t.Helper()
	b.waitFor("the request to be submitted", 90*time.Second, func() bool { return b.state(g, id).ProviderRefundID != nil })
	refunds := b.sim.Refunds(b.payment)
	require.Len(b.t, refunds, 1, "one refund at Stripe")
	require.Equal(b.t, id, refunds[0].Metadata["paygate_refund_request"])
	b.deliver(g)
	b.waitFor("the request to succeed", 30*time.Second, func() bool { return b.state(g, id).State == "succeeded" })
	b.requireLedgerRefund(g, "40.00")
	b.waitFor("the confirmation email", 30*time.Second, func() bool { return countSubject(b.mail.Messages(b.t), "refund") == 1 })
	time.Sleep(time.Second) // a second email, were there one, would be on its way by now
	require.Equal(b.t, 1, countSubject(b.mail.Messages(b.t), "refund"), "one confirmation email")
}

// requireLedgerRefund checks the books once the provider reported the
// refund: one refund transaction for the payment, and amount refunded.
func (b *crashHarness) requireLedgerRefund(g *reliability.Gateway, amount string) {
	b.t.Helper()
	var ledger struct {
		Transactions []struct{ Kind string } `json:"transactions"`
	}
	require.Equal(b.t, http.StatusOK, getJSON(b.t, g.URL()+"/v1/payments/"+b.paymentID+"/ledger", reliability.OpsToken, &ledger))
	refundTxns := 0
	for _, tx := range ledger.Transactions {
		if tx.Kind == "refund" {
			refundTxns++
		}
	}
	require.Equal(b.t, 1, refundTxns, "one refund transaction in the ledger")
	var p struct {
		AmountRefunded string `json:"amount_refunded"`
	}
	require.Equal(b.t, http.StatusOK, getJSON(b.t, g.URL()+"/v1/payments/"+b.paymentID, reliability.OpsToken, &p))
	require.Equal(b.t, amount, p.AmountRefunded)
}

// awaitPayment waits until the payment's webhooks are applied: captured
// for amount.
func (b *crashHarness) awaitPayment(g *reliability.Gateway, amount string) {
	b.t.Helper()
	b.waitFor("the payment", 30*time.Second, func() bool {
		var p struct {
			Status         string
			AmountCaptured string `json:"amount_captured"`
		}
		return getJSON(b.t, g.URL()+"/v1/payments/"+b.paymentID, reliability.OpsToken, &p) == http.StatusOK &&
			p.Status == "succeeded" && p.AmountCaptured == amount
	})
}

func countSubject(msgs []mailpit.Message, word string) int {
	n := 0
	for _, m := range msgs {
		if bytes.Contains(bytes.ToLower([]byte(m.Subject)), []byte(word)) {
			n++
		}
	}
	return n
}

func (b *crashBundle) pay(g *reliability.Gateway) {
	b.t.Helper()
	b.payment = b.sim.Pay(stripesim.PayOpts{Amount: 12000, Currency: "usd", Email: "buyer@example.test"})
	b.paymentID = b.payment.ID
	b.deliver(g)
	b.awaitPayment(g, "120.00")
	b.mail.DeleteAll(b.t) // the receipt: the scenarios count refund emails only
}

// slowRefund is where every scenario starts: one gateway, a payment, and a
// refund of 40.00 asked under key whose answer Stripe holds for delay after
// making it.
func slowRefund(t *testing.T, key string, delay time.Duration) (*crashBundle, *reliability.Gateway, refundView) {
	b := crashSetup(t)
	g := b.start()
	b.pay(g)
	b.sim.DelayRefundAnswer(1, delay)
	return b, g, b.ask(g, key, "40.00")
}

func (b *crashBundle) awaitStripeCommitted() {
	b.t.Helper()
	b.waitFor("Stripe to commit the refund", 30*time.Second, func() bool { return len(b.sim.Refunds(b.payment)) == 1 })
}

// TestRefundSurvivesSIGKILLAfterTheStripeCall: Stripe makes the refund and
// is slow to answer; the gateway is SIGKILLed before it records anything.
// Restarted, its rescued job asks again with the same key and gets
// Stripe's first answer.
func TestRefundSurvivesSIGKILLAfterTheStripeCall(t *testing.T) {
	t.Parallel()
	b, g, r := slowRefund(t, "crash-kill", 3*time.Second)
	b.awaitStripeCommitted()
	require.NoError(t, g.Kill())
	require.Nil(t, b.state(b.start(), r.ID).ProviderRefundID, "nothing was recorded before the kill")
	b.requireOneRefund(b.gateways[1], r.ID)
}

// TestRefundSurvivesATimeoutAfterStripeCommitted: Stripe makes the refund
// but answers after the call's bound: the attempt is indeterminate, and the
// next one, with the same key, records Stripe's first answer.
func TestRefundSurvivesATimeoutAfterStripeCommitted(t *testing.T) {
	t.Parallel()
	b, g, r := slowRefund(t, "crash-timeout", 6*time.Second) // past PAYGATE_REFUND_TIMEOUT
	b.requireOneRefund(g, r.ID)
}

// TestRefundWithTwoInstancesAfterARescue: the instance working the refund
// freezes while Stripe holds its answer; River rescues the job and the
// other instance works it too, with the same key. Thawed, the first
// instance records the same refund.
func TestRefundWithTwoInstancesAfterARescue(t *testing.T) {
	t.Parallel()
	b, first, r := slowRefund(t, "crash-two", 3*time.Second)
	b.awaitStripeCommitted()
	require.NoError(t, first.Pause())
	second := b.start()
	b.waitFor("the second instance to record the refund", 120*time.Second, func() bool {
		return b.state(second, r.ID).ProviderRefundID != nil
	})
	require.NoError(t, first.Resume())
	time.Sleep(2 * time.Second) // the first instance's attempt ends too
	b.requireOneRefund(second, r.ID)
}
