package stripesim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/paygate/paygate/internal/stripesim"
)

// refundParams is a refund by payment intent, with key as its
// Idempotency-Key.
func refundParams(pi string, amount int64, key string) *stripe.RefundParams {
	params := &stripe.RefundParams{PaymentIntent: stripe.String(pi)}
	if amount != 0 {
		params.Amount = stripe.Int64(amount)
	}
	params.SetIdempotencyKey(key)
	return params
}

// stripeErr is err as the *stripe.Error stripe-go answers with.
func stripeErr(t *testing.T, err error) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	require.Truef(t, errors.As(err, &se), "want a *stripe.Error, got %T: %v", err, err)
	return se
}

// rawAnswer is one HTTP exchange with the simulator, without stripe-go.
type rawAnswer struct {
	status int
	header http.Header
	body   string
}

func (a rawAnswer) refundID(t *testing.T) string {
	t.Helper()
	require.Equal(t, http.StatusOK, a.status, a.body)
	var re struct {
		ID     string `json:"id"`
		Object string `json:"object"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &re))
	require.Equal(t, "refund", re.Object)
	return re.ID
}

// postRefund sends POST /v1/refunds as a form; key "" sends no
// Idempotency-Key at all (stripe-go always sends one).
func postRefund(t *testing.T, sim *stripesim.Sim, srv *httptest.Server, key string, form url.Values) rawAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/refunds", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+sim.APIKey())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return rawAnswer{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func TestCreateRefundWithStripeGo(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	sc := stripeClient(sim.APIKey(), sim.Start(t).URL)
	p := sim.Pay(stripesim.PayOpts{Amount: 3000, Currency: "eur"})
	mark := len(sim.Events())

	params := refundParams(p.ID, 1000, "key-1")
	params.Reason = stripe.String("requested_by_customer")
	params.AddMetadata("paygate_refund_request", "rr_1")
	re, err := sc.Refunds.New(params)
	require.NoError(t, err)
	require.Regexp(t, `^re_`, re.ID)
	require.Equal(t, stripe.RefundStatusSucceeded, re.Status)
	require.Equal(t, int64(1000), re.Amount)
	require.Equal(t, stripe.Currency("eur"), re.Currency)
	require.Equal(t, p.ID, re.PaymentIntent.ID)
	require.Equal(t, p.ChargeID, re.Charge.ID)
	require.Equal(t, stripe.RefundReasonRequestedByCustomer, re.Reason)
	require.Equal(t, map[string]string{"paygate_refund_request": "rr_1"}, re.Metadata)
	require.Equal(t, "key-1", re.LastResponse.IdempotencyKey, "Stripe echoes the key")
	require.Empty(t, re.LastResponse.Header.Get("Idempotent-Replayed"), "a first answer is no replay")

	// The same objects and events as Sim.Refund, the metadata in each.
	evs := sim.Events()[mark:]
	require.Equal(t, []stripesim.EventType{
		stripesim.EventRefundCreated, stripesim.EventChargeRefunded,
		stripesim.EventRefundUpdated, stripesim.EventChargeRefundUpdated,
	}, types(evs))
	for _, i := range []int{0, 2, 3} {
		_, obj := decode[stripe.Refund](t, evs[i])
		require.Equal(t, re.ID, obj.ID)
		require.Equal(t, "rr_1", obj.Metadata["paygate_refund_request"], "%s", evs[i].Type)
	}
	e, ch := decode[stripe.Charge](t, evs[1])
	require.Equal(t, int64(1000), ch.AmountRefunded)
	require.Equal(t, re.LastResponse.RequestID, e.Request.ID, "the events name the API request that made the refund")
	_, refunded := sim.Refunded(p)
	require.Equal(t, int64(1000), refunded)

	got := sim.Refunds(p)
	require.Len(t, got, 1)
	require.Equal(t, re.ID, got[0].ID)
	require.Equal(t, "requested_by_customer", got[0].Reason)
	require.Equal(t, map[string]string{"paygate_refund_request": "rr_1"}, got[0].Metadata)
	byID, ok := sim.RefundByID(re.ID)
	require.True(t, ok)
	require.Equal(t, got[0], byID)
	_, ok = sim.RefundByID("re_missing")
	require.False(t, ok)
	bt := txn(t, sim, got[0].BalanceTransactionID)
	require.Equal(t, stripesim.TxnRefund, bt.Type)
	require.Equal(t, re.ID, bt.Source)

	// By charge, without an amount or a reason: all that is left.
	params = &stripe.RefundParams{Charge: stripe.String(p.ChargeID)}
	params.SetIdempotencyKey("key-2")
	rest, err := sc.Refunds.New(params)
	require.NoError(t, err)
	require.Equal(t, int64(2000), rest.Amount)
	require.Empty(t, rest.Reason, "no reason given, none set")
	require.Empty(t, rest.Metadata)
	got = sim.Refunds(p)
	require.Len(t, got, 2)
	require.Equal(t, []string{re.ID, rest.ID}, []string{got[0].ID, got[1].ID}, "oldest first")
	require.NotNil(t, got[1].Metadata)

	// A refund made by the API fails later as any other.
	failed := sim.FailRefund(rest.ID)
	require.Equal(t, "failed", failed.Status)
	require.Equal(t, "failed", sim.Refunds(p)[1].Status)
}

func TestCreateRefundRefusals(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	srv := sim.Start(t)
	sc := stripeClient(sim.APIKey(), srv.URL)
	p := sim.Pay(stripesim.PayOpts{Amount: 2145, Currency: "usd"})

	_, err := sc.Refunds.New(refundParams(p.ID, 2500, "too-large"))
	se := stripeErr(t, err)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeInvalidRequest, se.Type)
	require.Equal(t, stripe.ErrorCodeAmountTooLarge, se.Code)
	require.Equal(t, "amount", se.Param)
	require.Equal(t, "Refund amount ($25.00) is greater than unrefunded amount on charge ($21.45)", se.Msg)

	_, err = sc.Refunds.New(refundParams(p.ID, 0, "full"))
	require.NoError(t, err)
	_, err = sc.Refunds.New(refundParams(p.ID, 1, "again"))
	se = stripeErr(t, err)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorCodeChargeAlreadyRefunded, se.Code)
	require.Equal(t, "Charge "+p.ChargeID+" has already been refunded.", se.Msg)

	_, err = sc.Refunds.New(refundParams("pi_missing", 100, "missing-pi"))
	se = stripeErr(t, err)
	require.Equal(t, http.StatusNotFound, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorCodeResourceMissing, se.Code)
	require.Equal(t, "payment_intent", se.Param)
	params := &stripe.RefundParams{Charge: stripe.String("ch_missing")}
	params.SetIdempotencyKey("missing-ch")
	_, err = sc.Refunds.New(params)
	se = stripeErr(t, err)
	require.Equal(t, http.StatusNotFound, se.HTTPStatusCode)
	require.Equal(t, "No such charge: 'ch_missing'", se.Msg)

	declined := sim.Pay(stripesim.PayOpts{Amount: 500, Declined: true})
	authorized := sim.Pay(stripesim.PayOpts{Amount: 500, ManualCapture: true})
	disputed := sim.Pay(stripesim.PayOpts{Amount: 500})
	sim.Dispute(disputed, 0)
	inquired := sim.Pay(stripesim.PayOpts{Amount: 500})
	sim.Inquiry(inquired, 0)
	for name, c := range map[string]struct {
		form url.Values
		code string
	}{
		"declined":         {form: url.Values{"payment_intent": {declined.ID}}},
		"declined charge":  {form: url.Values{"charge": {declined.ChargeID}}},
		"uncaptured":       {form: url.Values{"payment_intent": {authorized.ID}}},
		"uncaptured ch":    {form: url.Values{"charge": {authorized.ChargeID}}},
		"charged back":     {form: url.Values{"payment_intent": {disputed.ID}}, code: "charge_disputed"},
		"neither":          {form: url.Values{"amount": {"100"}}, code: "parameter_missing"},
		"both":             {form: url.Values{"payment_intent": {p.ID}, "charge": {p.ChargeID}}},
		"bad reason":       {form: url.Values{"payment_intent": {p.ID}, "reason": {"changed_mind"}}},
		"bad amount":       {form: url.Values{"payment_intent": {p.ID}, "amount": {"ten"}}, code: "parameter_invalid_integer"},
		"zero amount":      {form: url.Values{"payment_intent": {p.ID}, "amount": {"0"}}, code: "parameter_invalid_integer"},
		"unknown":          {form: url.Values{"payment_intent": {p.ID}, "bogus": {"1"}}, code: "parameter_unknown"},
		"not modelled":     {form: url.Values{"payment_intent": {p.ID}, "reverse_transfer": {"true"}}},
		"not modelled too": {form: url.Values{"payment_intent": {p.ID}, "expand[0]": {"charge"}}},
	} {
		a := postRefund(t, sim, srv, "", c.form)
		require.Equal(t, http.StatusBadRequest, a.status, "%s: %s", name, a.body)
		var body struct {
			Error struct {
				Type, Code, Message string
			}
		}
		require.NoError(t, json.Unmarshal([]byte(a.body), &body), name)
		require.Equal(t, "invalid_request_error", body.Error.Type, name)
		require.Equal(t, c.code, body.Error.Code, name)
		require.NotEmpty(t, body.Error.Message, name)
	}
	_, err = sc.Refunds.New(refundParams(inquired.ID, 0, "inquiry"))
	require.NoError(t, err, "an inquiry moves no money and does not stop a refund")

	// Nothing was created by any refusal.
	require.Len(t, sim.Refunds(p), 1)
	for _, q := range []*stripesim.Payment{declined, authorized, disputed} {
		require.Empty(t, sim.Refunds(q))
	}

	// Without the API key nothing runs, and the key is not spent.
	_, err = stripeClient("sk_test_wrong_key_9999", srv.URL).Refunds.New(refundParams(inquired.ID, 0, "unauthorized"))
	require.Equal(t, http.StatusUnauthorized, stripeErr(t, err).HTTPStatusCode)
}

func TestRefundIdempotencyKeys(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	srv := sim.Start(t)
	sc := stripeClient(sim.APIKey(), srv.URL)
	p := sim.Pay(stripesim.PayOpts{Amount: 5000})

	first, err := sc.Refunds.New(refundParams(p.ID, 1000, "k"))
	require.NoError(t, err)
	events := len(sim.Events())
	again, err := sc.Refunds.New(refundParams(p.ID, 1000, "k"))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, "true", again.LastResponse.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(first.LastResponse.RawJSON), string(again.LastResponse.RawJSON), "the stored body, byte for byte")
	require.NotEqual(t, first.LastResponse.RequestID, again.LastResponse.RequestID, "a replay is a request of its own")
	require.Len(t, sim.Refunds(p), 1)
	require.Len(t, sim.Events(), events, "a replay emits nothing")

	// The key with other parameters, even a metadata value, is refused.
	for name, params := range map[string]*stripe.RefundParams{
		"amount":   refundParams(p.ID, 999, "k"),
		"metadata": func() *stripe.RefundParams { r := refundParams(p.ID, 1000, "k"); r.AddMetadata("a", "b"); return r }(),
		"by charge": func() *stripe.RefundParams {
			r := &stripe.RefundParams{Charge: stripe.String(p.ChargeID), Amount: stripe.Int64(1000)}
			r.SetIdempotencyKey("k")
			return r
		}(),
	} {
		_, err = sc.Refunds.New(params)
		se := stripeErr(t, err)
		require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode, name)
		require.Equal(t, stripe.ErrorTypeIdempotency, se.Type, name)
		require.Equal(t, "Keys for idempotent requests can only be used with the same parameters they were first used with. "+
			"Try using a key other than 'k' if you meant to execute a different request.", se.Msg, name)
	}
	require.Len(t, sim.Refunds(p), 1)

	// An error is stored as well, and replayed even once it would no
	// longer happen.
	_, err = sc.Refunds.New(refundParams(p.ID, 4500, "big"))
	require.Equal(t, stripe.ErrorCodeAmountTooLarge, stripeErr(t, err).Code)
	sim.FailRefund(first.ID) // 5000 is refundable again
	_, err = sc.Refunds.New(refundParams(p.ID, 4500, "big"))
	se := stripeErr(t, err)
	require.Equal(t, stripe.ErrorCodeAmountTooLarge, se.Code)
	require.Equal(t, "true", se.LastResponse.Header.Get("Idempotent-Replayed"))
	ok, err := sc.Refunds.New(refundParams(p.ID, 4500, "big-2"))
	require.NoError(t, err, "a new key runs")
	require.Len(t, sim.Refunds(p), 2)

	// A request that fails validation stores nothing: the key is free for
	// a corrected request.
	bad := postRefund(t, sim, srv, "v", url.Values{"payment_intent": {p.ID}, "amount": {"100"}, "reason": {"nope"}})
	require.Equal(t, http.StatusBadRequest, bad.status)
	good := postRefund(t, sim, srv, "v", url.Values{"payment_intent": {p.ID}, "amount": {"100"}, "reason": {"duplicate"}})
	goodID := good.refundID(t)
	require.Empty(t, good.header.Get("Idempotent-Replayed"))

	// Keys expire 24 hours after their first use, on the simulator clock.
	sim.Advance(stripesim.IdempotencyKeyTTL - time.Second)
	replay := postRefund(t, sim, srv, "v", url.Values{"payment_intent": {p.ID}, "amount": {"100"}, "reason": {"duplicate"}})
	require.Equal(t, goodID, replay.refundID(t))
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	sim.Advance(time.Second)
	fresh := postRefund(t, sim, srv, "v", url.Values{"payment_intent": {p.ID}, "amount": {"100"}, "reason": {"duplicate"}})
	require.NotEqual(t, goodID, fresh.refundID(t), "an expired key makes a new request")
	require.Empty(t, fresh.header.Get("Idempotent-Replayed"))
	_, other := sim.Refunded(p)
	require.Equal(t, ok.Amount+200, other)

	// Without a key nothing is deduplicated.
	n := len(sim.Refunds(p))
	a := postRefund(t, sim, srv, "", url.Values{"payment_intent": {p.ID}, "amount": {"10"}})
	b := postRefund(t, sim, srv, "", url.Values{"payment_intent": {p.ID}, "amount": {"10"}})
	require.NotEqual(t, a.refundID(t), b.refundID(t))
	require.Len(t, sim.Refunds(p), n+2)
}

func TestRefuseNextRefund(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	sc := stripeClient(sim.APIKey(), sim.Start(t).URL)
	p := sim.Pay(stripesim.PayOpts{Amount: 5000})

	sim.RefuseNextRefund("card_error", "expired_card", "Your card has expired.")
	sim.RefuseNextRefund("invalid_request_error", "charge_disputed", "")
	_, err := sc.Refunds.New(refundParams(p.ID, 100, "a"))
	se := stripeErr(t, err)
	require.Equal(t, http.StatusPaymentRequired, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeCard, se.Type)
	require.Equal(t, stripe.ErrorCode("expired_card"), se.Code)
	require.Equal(t, "Your card has expired.", se.Msg)
	_, err = sc.Refunds.New(refundParams(p.ID, 100, "b"))
	se = stripeErr(t, err)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeInvalidRequest, se.Type)
	require.Empty(t, sim.Refunds(p), "a refusal creates nothing")

	// The refusal is the key's answer from now on; the knob is spent.
	_, err = sc.Refunds.New(refundParams(p.ID, 100, "a"))
	se = stripeErr(t, err)
	require.Equal(t, stripe.ErrorTypeCard, se.Type)
	require.Equal(t, "true", se.LastResponse.Header.Get("Idempotent-Replayed"))
	_, err = sc.Refunds.New(refundParams(p.ID, 100, "c"))
	require.NoError(t, err)
	require.Len(t, sim.Refunds(p), 1)

	require.Panics(t, func() { sim.RefuseNextRefund("api_error", "", "") })
}

func TestFailNextRefundRequest(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	srv := sim.Start(t)
	sc := stripeClient(sim.APIKey(), srv.URL)
	p := sim.Pay(stripesim.PayOpts{Amount: 5000})

	// A 500 from inside the API is stored and replayed, as Stripe does.
	sim.FailNextRefundRequest(http.StatusInternalServerError)
	_, err := sc.Refunds.New(refundParams(p.ID, 100, "k500"))
	se := stripeErr(t, err)
	require.Equal(t, http.StatusInternalServerError, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeAPI, se.Type)
	require.Equal(t, "false", se.LastResponse.Header.Get("Stripe-Should-Retry"))
	require.Empty(t, sim.Refunds(p))
	_, err = sc.Refunds.New(refundParams(p.ID, 100, "k500"))
	se = stripeErr(t, err)
	require.Equal(t, http.StatusInternalServerError, se.HTTPStatusCode)
	require.Equal(t, "true", se.LastResponse.Header.Get("Idempotent-Replayed"))
	require.Empty(t, sim.Refunds(p))

	// A 503 in front of the API stores nothing: stripe-go's own retry,
	// with the same key, makes the refund.
	sim.FailNextRefundRequest(http.StatusServiceUnavailable)
	retrying := retryingClient(sim.APIKey(), srv.URL, nil)
	re, err := retrying.Refunds.New(refundParams(p.ID, 100, "k503"))
	require.NoError(t, err)
	require.Len(t, sim.Refunds(p), 1)
	require.Equal(t, re.ID, sim.Refunds(p)[0].ID)

	require.Panics(t, func() { sim.FailNextRefundRequest(http.StatusTeapot) })
}

// retryingClient is stripe-go with its network retries on (two), as
// paygate runs it, and hc as its HTTP client.
func retryingClient(key, url string, hc *http.Client) *client.API {
	cfg := &stripe.BackendConfig{
		URL:               stripe.String(url),
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(2),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	return client.New(key, &stripe.Backends{
		API:     stripe.GetBackendWithConfig(stripe.APIBackend, cfg),
		Connect: stripe.GetBackendWithConfig(stripe.ConnectBackend, cfg),
		Uploads: stripe.GetBackendWithConfig(stripe.UploadsBackend, cfg),
	})
}

func TestDelayRefundAnswerCommitsThenTimesOut(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	srv := sim.Start(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 5000})

	// The client gives up; the refund exists all the same.
	sim.DelayRefundAnswer(1, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	params := refundParams(p.ID, 700, "slow")
	params.Context = ctx
	start := time.Now()
	_, err := stripeClient(sim.APIKey(), srv.URL).Refunds.New(params)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second, "the wait ends with the client")
	refunds := sim.Refunds(p)
	require.Len(t, refunds, 1, "committed before the wait")
	require.Equal(t, int64(700), refunds[0].Amount)

	// The retry with the key gets the refund, once the first request's
	// answer is stored (when the server sees the client gone).
	var re *stripe.Refund
	require.Eventually(t, func() bool {
		re, err = stripeClient(sim.APIKey(), srv.URL).Refunds.New(refundParams(p.ID, 700, "slow"))
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "last error: %v", err)
	require.Equal(t, refunds[0].ID, re.ID)
	require.Equal(t, "true", re.LastResponse.Header.Get("Idempotent-Replayed"))
	require.Len(t, sim.Refunds(p), 1)

	// stripe-go's own retries after a client timeout reuse the key: one
	// refund.
	sim.DelayRefundAnswer(1, time.Hour)
	hc := &http.Client{Timeout: 300 * time.Millisecond}
	re, err = retryingClient(sim.APIKey(), srv.URL, hc).Refunds.New(refundParams(p.ID, 300, "retried"))
	require.NoError(t, err, "stripe-go backs off for longer than the server takes to see the client gone and store its answer")
	require.Equal(t, "true", re.LastResponse.Header.Get("Idempotent-Replayed"))
	require.Equal(t, sim.Refunds(p)[1].ID, re.ID)
	require.Len(t, sim.Refunds(p), 2, "two attempts, one refund")
}

func TestConcurrentRequestWithTheKeyInUse(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	srv := sim.Start(t)
	sc := stripeClient(sim.APIKey(), srv.URL)
	p := sim.Pay(stripesim.PayOpts{Amount: 5000})

	sim.DelayRefundAnswer(1, 2*time.Second)
	done := make(chan *stripe.Refund)
	go func() {
		re, err := sc.Refunds.New(refundParams(p.ID, 100, "busy"))
		if err != nil {
			t.Errorf("first request: %v", err)
		}
		done <- re
	}()
	require.Eventually(t, func() bool { return len(sim.Refunds(p)) == 1 }, 5*time.Second, time.Millisecond)

	_, err := sc.Refunds.New(refundParams(p.ID, 100, "busy"))
	se := stripeErr(t, err)
	require.Equal(t, http.StatusConflict, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeIdempotency, se.Type)
	require.Equal(t, stripe.ErrorCodeIdempotencyKeyInUse, se.Code)
	require.Contains(t, se.Msg, "There is currently another in-progress request using this Idempotent Key")
	other, err := sc.Refunds.New(refundParams(p.ID, 100, "other"))
	require.NoError(t, err, "other keys, and the delay spent, answer at once")

	first := <-done
	require.NotNil(t, first)
	require.Equal(t, sim.Refunds(p)[0].ID, first.ID)
	again, err := sc.Refunds.New(refundParams(p.ID, 100, "busy"))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, []string{first.ID, other.ID}, []string{sim.Refunds(p)[0].ID, sim.Refunds(p)[1].ID})
}

// TestSameKeyFromManyClientsRefundsOnce is the property the saga rests on:
// whatever the interleaving, requests sharing a key make one refund, and
// each either gets it or is told the key is busy.
func TestSameKeyFromManyClientsRefundsOnce(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	sc := stripeClient(sim.APIKey(), sim.Start(t).URL)
	p := sim.Pay(stripesim.PayOpts{Amount: 5000})
	sim.DelayRefundAnswer(1, 50*time.Millisecond)

	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids = map[string]int{}
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			re, err := sc.Refunds.New(refundParams(p.ID, 250, "shared"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				var se *stripe.Error
				if !errors.As(err, &se) || se.Code != stripe.ErrorCodeIdempotencyKeyInUse {
					t.Errorf("want the refund or idempotency_key_in_use, got %v", err)
				}
				return
			}
			ids[re.ID]++
		}()
	}
	wg.Wait()
	refunds := sim.Refunds(p)
	require.Len(t, refunds, 1)
	require.NotEmpty(t, ids)
	for id := range ids {
		require.Equal(t, refunds[0].ID, id)
	}
}
