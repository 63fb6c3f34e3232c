package jobs_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	striperef "github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/refund"
)

type sagaBundle struct {
	sim   *stripesim.Sim
	world *worldtest.World
	seen  int // events of sim already applied
}

// sagaSetup is a world whose submit_refund worker calls the Stripe
// simulator's API through paygate's own stripe-go client, with a short call
// timeout so that a slow answer is an indeterminate attempt.
func sagaSetup(t *testing.T) *sagaBundle {
	t.Helper()
	sim := stripesim.New(stripesim.Config{})
	srv := sim.Start(t)
	api, err := striperef.NewAPI(striperef.APIConfig{APIKey: sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	world := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.Refunders = map[string]provider.Refunder{"stripe": api}
		c.RefundCallTimeout = 2 * time.Second
		c.Email.OpsEmail = "ops@example.test"
	}})
	return &sagaBundle{sim: sim, world: world}
}

// deliver applies the simulator's events not applied yet, as its webhooks
// would deliver them.
func (b *sagaBundle) deliver(t *testing.T) {
	t.Helper()
	events := b.sim.Events()
	b.world.Apply(t, events[b.seen:]...)
	b.seen = len(events)
}

func (b *sagaBundle) request(t *testing.T, paymentID, amount string) refund.Request {
	t.Helper()
	ctx := context.Background()
	var r refund.Request
	require.NoError(t, pgx.BeginFunc(ctx, b.world.Pool, func(tx pgx.Tx) error {
		var err error
		n := refund.New{PaymentID: paymentID, Actor: "ops:test", Reason: "requested_by_customer", CanRefund: b.world.Jobs.CanRefund}
		if amount != "" {
			n.Amount = decimal.NewNullDecimal(decimal.RequireFromString(amount))
		}
		if r, err = refund.CreateTx(ctx, tx, n); err != nil {
			return err
		}
		return b.world.Jobs.InsertSubmitRefundTx(ctx, tx, r.ID)
	}))
	return r
}

// await polls the request until done says it is where the test wants it.
func (b *sagaBundle) await(t *testing.T, id string, what string, done func(refund.Request) bool) refund.Request {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := refund.Get(context.Background(), b.world.Pool, id)
		require.NoError(t, err)
		if done(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("refund request %s never %s: %+v", id, what, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func submitted(r refund.Request) bool { return r.ProviderRefundID != "" }

func settled(r refund.Request) bool { return !r.State.Open() }

// TestRefundSagaSucceeds: a request is submitted with its derived key and
// its id in the refund's metadata, and the refund's events settle it; one
// refund at Stripe, one ledger refund, one confirmation email.
func TestRefundSagaSucceeds(t *testing.T) {
	t.Parallel()
	b := sagaSetup(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 10000, Currency: "usd", Email: "buyer@example.test"})
	b.deliver(t)

	r := b.request(t, p.ID, "30.00")
	r = b.await(t, r.ID, "submitted", submitted)
	require.Equal(t, refund.StateSubmitted, r.State)
	refunds := b.sim.Refunds(p)
	require.Len(t, refunds, 1)
	require.Equal(t, r.ProviderRefundID, refunds[0].ID)
	require.Equal(t, int64(3000), refunds[0].Amount)
	require.Equal(t, r.ID, refunds[0].Metadata[provider.RefundReferenceKey])

	b.deliver(t)
	r = b.await(t, r.ID, "settled", settled)
	require.Equal(t, refund.StateSucceeded, r.State)
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE kind = 'refund' AND payment_id = $1`, p.ID))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM email_outbox WHERE kind = 'refund_confirmation' AND payment_id = $1`, p.ID))

	// 100.00 − 30.00 refunded: what is left is refundable, and no more.
	rest := b.request(t, p.ID, "")
	require.Equal(t, "70.00", rest.Amount.StringFixed(2))
}

// TestRefundSagaRefusalCompensates: Stripe refuses the refund (nothing is
// made): the request fails at once with Stripe's reason, its amount is
// refundable again, ops get one alert and the audit log one entry.
func TestRefundSagaRefusalCompensates(t *testing.T) {
	t.Parallel()
	b := sagaSetup(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "usd"})
	b.deliver(t)

	b.sim.RefuseNextRefund("invalid_request_error", "charge_disputed", "Charge ch_x has been charged back; cannot issue a refund.")
	r := b.request(t, p.ID, "")
	r = b.await(t, r.ID, "settled", settled)
	require.Equal(t, refund.StateFailed, r.State)
	require.Contains(t, r.FailureReason, "charge_disputed")
	require.Empty(t, b.sim.Refunds(p))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM email_outbox WHERE kind = 'refund_failed_alert' AND object_id = $1`, r.ID))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM ops_audit_log WHERE action = 'refund_failed' AND event_id = $1 AND actor = 'paygate'`, r.ID))

	again := b.request(t, p.ID, "")
	require.Equal(t, "50.00", again.Amount.StringFixed(2), "the failed request's reservation is released")
}

// TestRefundSagaIndeterminateAnswersRetryWithTheSameKey: Stripe commits the
// refund and answers too late (the call times out), or its edge answers
// 503 before the API ran: each time the job retries with the same key, and
// Stripe holds one refund per request.
func TestRefundSagaIndeterminateAnswersRetryWithTheSameKey(t *testing.T) {
	t.Parallel()
	b := sagaSetup(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 9000, Currency: "eur"})
	b.deliver(t)

	b.sim.DelayRefundAnswer(1, 5*time.Second) // beyond the 2s call timeout
	slow := b.request(t, p.ID, "10.00")
	slow = b.await(t, slow.ID, "submitted", submitted)

	b.sim.FailNextRefundRequest(http.StatusServiceUnavailable)
	flaky := b.request(t, p.ID, "20.00")
	flaky = b.await(t, flaky.ID, "submitted", submitted)

	refunds := b.sim.Refunds(p)
	require.Len(t, refunds, 2, "one refund per request, however many attempts")
	byRequest := map[string]string{}
	for _, re := range refunds {
		byRequest[re.Metadata[provider.RefundReferenceKey]] = re.ID
	}
	require.Equal(t, slow.ProviderRefundID, byRequest[slow.ID])
	require.Equal(t, flaky.ProviderRefundID, byRequest[flaky.ID])
	attempts := b.world.Count(t, `SELECT max(attempt) FROM river_job WHERE kind = 'submit_refund' AND args->>'request_id' = $1`, slow.ID)
	require.GreaterOrEqual(t, attempts, 2, "the slow request was tried again")

	b.deliver(t)
	for _, id := range []string{slow.ID, flaky.ID} {
		require.Equal(t, refund.StateSucceeded, b.await(t, id, "settled", settled).State)
	}
	require.Equal(t, 2, b.world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE kind = 'refund' AND payment_id = $1`, p.ID))
}

// TestRefundSagaPastTheKeyWindowFails: a request that could not be
// submitted within Stripe's key window is failed, never sent under a key
// Stripe may have forgotten.
func TestRefundSagaPastTheKeyWindowFails(t *testing.T) {
	t.Parallel()
	b := sagaSetup(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "usd"})
	b.deliver(t)
	ctx := context.Background()
	require.NoError(t, b.world.Jobs.River.QueuePause(ctx, "default", nil))
	r := b.request(t, p.ID, "")
	_, err := b.world.Pool.Exec(ctx, `UPDATE refund_requests SET created_at = now() - interval '23 hours 1 minute' WHERE id = $1`, r.ID)
	require.NoError(t, err)
	require.NoError(t, b.world.Jobs.River.QueueResume(ctx, "default", nil))

	r = b.await(t, r.ID, "settled", settled)
	require.Equal(t, refund.StateFailed, r.State)
	require.True(t, strings.Contains(r.FailureReason, "key window"), r.FailureReason)
	require.Empty(t, b.sim.Refunds(p), "nothing was sent")
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM email_outbox WHERE kind = 'refund_failed_alert' AND object_id = $1`, r.ID))
}

// TestRefundFailedLaterAtStripeCompensates: a refund Stripe reports failed
// after it succeeded fails its request, reverses it in the ledger and
// alerts ops, once.
func TestRefundFailedLaterAtStripeCompensates(t *testing.T) {
	t.Parallel()
	b := sagaSetup(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "usd", Email: "buyer@example.test"})
	b.deliver(t)
	r := b.request(t, p.ID, "")
	r = b.await(t, r.ID, "submitted", submitted)
	b.deliver(t)
	require.Equal(t, refund.StateSucceeded, b.await(t, r.ID, "settled", settled).State)

	b.sim.Advance(7 * 24 * time.Hour)
	b.sim.FailRefund(r.ProviderRefundID)
	b.deliver(t)
	r = b.await(t, r.ID, "failed", func(r refund.Request) bool { return r.State == refund.StateFailed })
	require.Contains(t, r.FailureReason, "Stripe reported the refund failed")
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE kind = 'refund_reversal' AND payment_id = $1`, p.ID))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM email_outbox WHERE kind = 'refund_failed_alert' AND object_id = $1`, r.ID))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM ops_audit_log WHERE action = 'refund_failed' AND event_id = $1 AND actor = 'provider'`, r.ID))
}
