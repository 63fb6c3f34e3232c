package jobs_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/refund"
)

const adyenOpsToken = "ops-token-adyen-refunds-0123456789abcdef"

// adyenSagaBundle is the refund saga of Adyen payments end to end: the API
// takes the request, the submit_refund worker calls the simulated
// Checkout API through paygate's Adyen client, and the simulator's signed
// REFUND webhooks, read by paygate's Adyen receiver, settle it.
type adyenSagaBundle struct {
	sim      *adyensim.Sim
	world    *worldtest.World
	echo     *echo.Echo
	receiver *adyen.Receiver
	saga     *sagaBundle // await and friends
}

func adyenSagaSetup(t *testing.T) *adyenSagaBundle {
	t.Helper()
	sim := adyensim.New(adyensim.Config{})
	srv := sim.StartCheckout(t)
	client, err := adyen.NewAPI(adyen.APIConfig{APIKey: sim.APIKey(), MerchantAccount: sim.MerchantAccount(),
		CheckoutURL: srv.URL + adyensim.CheckoutPath})
	require.NoError(t, err)
	world := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.Refunders = map[string]provider.Refunder{adyen.Name: client}
		c.RefundCallTimeout = 2 * time.Second
		c.Email.OpsEmail = "ops@example.test"
	}})
	e, _ := api.NewEcho(api.Config{Pool: world.Pool, Jobs: world.Jobs, OpsTokens: []string{adyenOpsToken}})
	r, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{sim.HMACKey()}})
	require.NoError(t, err)
	return &adyenSagaBundle{sim: sim, world: world, echo: e, receiver: r, saga: &sagaBundle{world: world}}
}

// apply delivers items as Adyen's webhooks, through paygate's receiver,
// and waits for them to be applied.
func (b *adyenSagaBundle) apply(t *testing.T, items ...adyensim.Item) {
	t.Helper()
	var events []provider.Event
	for _, it := range items {
		evs, err := b.receiver.Receive(http.Header{}, b.sim.Batch(false, it), b.sim.Now())
		require.NoError(t, err)
		events = append(events, evs...)
	}
	b.world.ApplyEvents(t, events...)
}

// pay authorises and captures value of currency, and books both.
func (b *adyenSagaBundle) pay(t *testing.T, value int64, currency string) string {
	t.Helper()
	psp, auth := b.sim.Authorise(value, currency, "order-"+currency, true)
	_, capture := b.sim.Capture(psp, value)
	b.apply(t, auth, capture)
	return psp
}

// post asks the API for a refund; amount "" asks for everything
// refundable.
func (b *adyenSagaBundle) post(t *testing.T, paymentID, key, amount string) *httptest.ResponseRecorder {
	t.Helper()
	body := `{"reason":"requested_by_customer"}`
	if amount != "" {
		body = fmt.Sprintf(`{"amount":%q,"reason":"requested_by_customer"}`, amount)
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/payments/"+paymentID+"/refunds", strings.NewReader(body))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	req.Header.Set(echo.HeaderAuthorization, "Bearer "+adyenOpsToken)
	req.Header.Set(api.HeaderIdempotencyKey, key)
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	return rec
}

func (b *adyenSagaBundle) request(t *testing.T, paymentID, key, amount string) refund.Request {
	t.Helper()
	rec := b.post(t, paymentID, key, amount)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	var v api.RefundRequestView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	return b.saga.await(t, v.ID, "recorded", func(refund.Request) bool { return true })
}

func (b *adyenSagaBundle) checkoutRefundOf(t *testing.T, requestID string) adyensim.CheckoutRefund {
	t.Helper()
	var found []adyensim.CheckoutRefund
	for _, r := range b.sim.CheckoutRefunds() {
		if r.Reference == requestID {
			found = append(found, r)
		}
	}
	require.Len(t, found, 1, "one refund at Adyen for request %s", requestID)
	return found[0]
}

// TestAdyenRefundSagaPartialAndFull: a partial and then a full refund of an
// Adyen payment are made once each at Adyen, in its minor units, under the
// request's reference, and the REFUND webhooks settle them; the ledger
// books both and nothing is left to refund.
func TestAdyenRefundSagaPartialAndFull(t *testing.T) {
	t.Parallel()
	b := adyenSagaSetup(t)
	psp := b.pay(t, 10000, "EUR")

	partial := b.request(t, psp, "adyen-partial", "30.00")
	partial = b.saga.await(t, partial.ID, "submitted", submitted)
	require.Equal(t, refund.StateSubmitted, partial.State)
	at := b.checkoutRefundOf(t, partial.ID)
	require.Equal(t, partial.ProviderRefundID, at.PspReference)
	require.Equal(t, int64(3000), at.Value)
	require.Equal(t, "EUR", at.Currency)
	require.Equal(t, "CUSTOMER REQUEST", at.MerchantRefundReason)

	b.apply(t, b.sim.RefundOutcome(at.PspReference, true, ""))
	require.Equal(t, refund.StateSucceeded, b.saga.await(t, partial.ID, "settled", settled).State)

	full := b.request(t, psp, "adyen-full", "")
	require.Equal(t, "70.00", full.Amount.StringFixed(2), "what is left is refundable")
	full = b.saga.await(t, full.ID, "submitted", submitted)
	at = b.checkoutRefundOf(t, full.ID)
	require.Equal(t, int64(7000), at.Value)
	b.apply(t, b.sim.RefundOutcome(at.PspReference, true, ""))
	require.Equal(t, refund.StateSucceeded, b.saga.await(t, full.ID, "settled", settled).State)

	require.Equal(t, 2, b.world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE kind = 'refund' AND payment_id = $1`, psp))
	require.Equal(t, 2, len(b.sim.CheckoutRefunds()))
	rec := b.post(t, psp, "adyen-more", "0.01")
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code, "nothing is left: %s", rec.Body.String())
}

// TestAdyenRefundSagaRefused: Adyen refuses the refund at once (422), or
// takes it and reports it refused in the REFUND webhook: either way the
// request fails with Adyen's message, ops get an alert, and the amount is
// refundable again.
func TestAdyenRefundSagaRefused(t *testing.T) {
	t.Parallel()
	b := adyenSagaSetup(t)
	psp := b.pay(t, 5000, "EUR")

	b.sim.RefuseNextRefund("167", "Original pspReference required for this operation")
	r := b.request(t, psp, "adyen-refused-now", "")
	r = b.saga.await(t, r.ID, "settled", settled)
	require.Equal(t, refund.StateFailed, r.State)
	require.Contains(t, r.FailureReason, "Original pspReference required for this operation")
	require.Empty(t, b.sim.CheckoutRefunds())
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM email_outbox WHERE kind = 'refund_failed_alert' AND object_id = $1`, r.ID))

	later := b.request(t, psp, "adyen-refused-later", "")
	require.Equal(t, "50.00", later.Amount.StringFixed(2), "the refused request's reservation is released")
	later = b.saga.await(t, later.ID, "submitted", submitted)
	b.apply(t, b.sim.RefundOutcome(later.ProviderRefundID, false, "Insufficient balance on payment"))
	later = b.saga.await(t, later.ID, "settled", settled)
	require.Equal(t, refund.StateFailed, later.State)
	require.Contains(t, later.FailureReason, "Insufficient balance on payment")
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM email_outbox WHERE kind = 'refund_failed_alert' AND object_id = $1`, later.ID))
	require.Zero(t, b.world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE kind = 'refund' AND payment_id = $1`, psp))

	again := b.request(t, psp, "adyen-again", "")
	require.Equal(t, "50.00", again.Amount.StringFixed(2), "a refund Adyen reported refused is refundable again")
}

// TestAdyenRefundSagaAnswerLostAfterCommit: Adyen makes the refund and the
// connection drops before its answer: the job retries with the same
// Idempotency-Key, Adyen replays its first answer, and one refund exists.
func TestAdyenRefundSagaAnswerLostAfterCommit(t *testing.T) {
	t.Parallel()
	b := adyenSagaSetup(t)
	psp := b.pay(t, 9000, "EUR")

	b.sim.DropNextRefundAnswers(1)
	r := b.request(t, psp, "adyen-dropped", "10.00")
	r = b.saga.await(t, r.ID, "submitted", submitted)
	at := b.checkoutRefundOf(t, r.ID)
	require.Equal(t, r.ProviderRefundID, at.PspReference, "the replayed answer names the refund made")
	require.Len(t, b.sim.CheckoutRefunds(), 1)
	require.GreaterOrEqual(t, b.sim.RefundCalls(), 2, "the call was made again")
	require.Equal(t, adyen.IdempotencyKey(r.ProviderKey()), at.IdempotencyKey)

	b.apply(t, b.sim.RefundOutcome(at.PspReference, true, ""))
	require.Equal(t, refund.StateSucceeded, b.saga.await(t, r.ID, "settled", settled).State)
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE kind = 'refund' AND payment_id = $1`, psp))
}

// TestAdyenConcurrentRefundRequests: twenty requests of 10.00 for a 100.00
// payment, at once: exactly ten are accepted, Adyen makes ten refunds
// totalling the payment, and the refund requests sum to it.
func TestAdyenConcurrentRefundRequests(t *testing.T) {
	t.Parallel()
	b := adyenSagaSetup(t)
	psp := b.pay(t, 10000, "EUR")

	codes := make([]int, 20)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range codes {
		wg.Go(func() {
			<-start
			codes[i] = b.post(t, psp, fmt.Sprintf("adyen-race-%d", i), "10.00").Code
		})
	}
	close(start)
	wg.Wait()
	accepted := 0
	for _, c := range codes {
		require.Contains(t, []int{http.StatusAccepted, http.StatusUnprocessableEntity}, c)
		if c == http.StatusAccepted {
			accepted++
		}
	}
	require.Equal(t, 10, accepted, "codes %v", codes)

	var ids []string
	rows, err := b.world.Pool.Query(t.Context(), `SELECT id FROM refund_requests WHERE payment_id = $1`, psp)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, 10)
	for _, id := range ids {
		b.saga.await(t, id, "submitted", submitted)
	}
	var total int64
	for _, r := range b.sim.CheckoutRefunds() {
		total += r.Value
	}
	require.Len(t, b.sim.CheckoutRefunds(), 10)
	require.Equal(t, int64(10000), total, "exactly the captured amount is refunded at Adyen")
	var sum decimal.Decimal
	require.NoError(t, b.world.Pool.QueryRow(t.Context(),
		`SELECT sum(amount) FROM refund_requests WHERE payment_id = $1 AND state = 'submitted'`, psp).Scan(&sum))
	require.Equal(t, "100.00", sum.StringFixed(2))
}
