package stripe_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripemock"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	striperef "github.com/paygate/paygate/provider/stripe"
)

// exchange is one request as it left the client, with the answer's
// headers.
type exchange struct {
	method, path string
	header       http.Header
	form         url.Values
	answer       http.Header
	status       int
}

// recorder is an http.RoundTripper that keeps every exchange.
type recorder struct {
	mu  sync.Mutex
	got []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchange{method: req.Method, path: req.URL.Path, header: req.Header.Clone()}
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(strings.NewReader(string(body)))
		if ex.form, err = url.ParseQuery(string(body)); err != nil {
			return nil, err
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if resp != nil {
		ex.answer, ex.status = resp.Header.Clone(), resp.StatusCode
	}
	r.mu.Lock()
	r.got = append(r.got, ex)
	r.mu.Unlock()
	return resp, err
}

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.got...)
}

func usd(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// TestRefundRequestShapesAgainstStripeMock sends both kinds of refund to
// stripe-mock, which checks every request against Stripe's OpenAPI
// specification: payment_intent or charge, amount, reason and metadata are
// parameters Stripe takes, and the Idempotency-Key goes out and comes back.
func TestRefundRequestShapesAgainstStripeMock(t *testing.T) {
	t.Parallel()
	base, logs := stripemock.Start(t)

	// stripe-mock validates refunds: these are refused, so the acceptances
	// below mean something.
	for _, form := range []string{"payment_intent=pi_123&bogus=1", "payment_intent=pi_123&reason=bored", "payment_intent=pi_123&amount=ten"} {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/refunds", strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("sk_test_123", "")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, form)
	}

	rec := &recorder{}
	api, err := striperef.NewAPI(striperef.APIConfig{
		APIKey: "sk_test_123", URL: base, MaxNetworkRetries: stripe.Int64(0),
		HTTPClient: &http.Client{Transport: rec, Timeout: 30 * time.Second},
	})
	require.NoError(t, err)
	ctx := context.Background()

	res, err := api.Refund(ctx, provider.RefundRequest{
		PaymentID: "pi_123", Amount: usd("12.34"), Currency: "usd", Reason: "requested_by_customer",
		IdempotencyKey: "paygate-refund-rr_1", Reference: "rr_1",
	})
	require.NoError(t, err, stripemock.Tail(logs.String()))
	require.NotEmpty(t, res.ProviderRefundID)
	require.NotEmpty(t, res.Status)
	_, err = api.Refund(ctx, provider.RefundRequest{
		PaymentID: "ch_123", Amount: decimal.NewFromInt(1500), Currency: "jpy", Reason: "duplicate",
		IdempotencyKey: "paygate-refund-rr_2", Reference: "rr_2",
	})
	require.NoError(t, err, stripemock.Tail(logs.String()))

	got := rec.exchanges()
	require.Len(t, got, 2)
	for i, want := range []struct {
		key  string
		form url.Values
	}{
		{"paygate-refund-rr_1", url.Values{"payment_intent": {"pi_123"}, "amount": {"1234"}, "reason": {"requested_by_customer"}, "metadata[paygate_refund_request]": {"rr_1"}}},
		{"paygate-refund-rr_2", url.Values{"charge": {"ch_123"}, "amount": {"1500"}, "reason": {"duplicate"}, "metadata[paygate_refund_request]": {"rr_2"}}},
	} {
		require.Equal(t, http.MethodPost, got[i].method)
		require.Equal(t, "/v1/refunds", got[i].path)
		require.Equal(t, http.StatusOK, got[i].status)
		require.Equal(t, want.form, got[i].form, "exactly these parameters")
		require.Equal(t, []string{want.key}, got[i].header.Values("Idempotency-Key"))
		require.Equal(t, want.key, got[i].answer.Get("Idempotency-Key"), "stripe-mock, as Stripe, echoes the key it received")
	}
}

// simBundle is a simulator behind an API client, counting the requests
// that reach it.
type simBundle struct {
	sim      *stripesim.Sim
	srv      *httptest.Server
	api      *striperef.API
	requests *atomic.Int64
}

func setupSim(t *testing.T) simBundle {
	t.Helper()
	sim := stripesim.New(stripesim.Config{Seed: 7, Now: time.Date(2025, 3, 14, 9, 30, 0, 0, time.UTC)})
	var n atomic.Int64
	h := sim.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return simBundle{sim: sim, srv: srv, api: newAPI(t, sim.APIKey(), srv.URL), requests: &n}
}

func newAPI(t *testing.T, key, url string) *striperef.API {
	t.Helper()
	api, err := striperef.NewAPI(striperef.APIConfig{APIKey: key, URL: url, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	return api
}

func refundOf(p *stripesim.Payment, amount, key string) provider.RefundRequest {
	return provider.RefundRequest{
		PaymentID: p.ID, Amount: decimal.RequireFromString(amount), Currency: p.Currency,
		Reason: "requested_by_customer", IdempotencyKey: key, Reference: "rr_" + key,
	}
}

// requireRefused checks an error the provider definitely refused with:
// ErrRefundRefused and ErrAPI, Stripe's type and code, and the
// *stripe.Error behind it.
func requireRefused(t *testing.T, err error, typ stripe.ErrorType, code stripe.ErrorCode) {
	t.Helper()
	require.ErrorIs(t, err, provider.ErrRefundRefused)
	require.ErrorIs(t, err, provider.ErrAPI)
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, typ, se.Type)
	require.Equal(t, code, se.Code)
	require.Contains(t, err.Error(), string(typ))
	require.Contains(t, err.Error(), se.Msg)
}

// requireIndeterminate checks an error after which the refund may exist.
func requireIndeterminate(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, provider.ErrAPI)
	require.NotErrorIs(t, err, provider.ErrRefundRefused)
}

func TestRefundAgainstTheSimulator(t *testing.T) {
	t.Parallel()
	b := setupSim(t)
	ctx := context.Background()
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "usd"})

	res, err := b.api.Refund(ctx, refundOf(p, "12.34", "k1"))
	require.NoError(t, err)
	require.Regexp(t, `^re_`, res.ProviderRefundID)
	require.Equal(t, "succeeded", res.Status)
	refunds := b.sim.Refunds(p)
	require.Len(t, refunds, 1)
	require.Equal(t, res.ProviderRefundID, refunds[0].ID)
	require.Equal(t, int64(1234), refunds[0].Amount, "12.34 usd in cents")
	require.Equal(t, "requested_by_customer", refunds[0].Reason)
	require.Equal(t, map[string]string{provider.RefundReferenceKey: "rr_k1"}, refunds[0].Metadata)

	// The same key again is the same refund, made once.
	again, err := b.api.Refund(ctx, refundOf(p, "12.34", "k1"))
	require.NoError(t, err)
	require.Equal(t, res, again)
	require.Len(t, b.sim.Refunds(p), 1)

	// The same key for another amount can never succeed.
	_, err = b.api.Refund(ctx, refundOf(p, "12.35", "k1"))
	requireRefused(t, err, stripe.ErrorTypeIdempotency, "")
	require.Len(t, b.sim.Refunds(p), 1)

	// More than is left.
	_, err = b.api.Refund(ctx, refundOf(p, "40.00", "k2"))
	requireRefused(t, err, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooLarge)
	require.Len(t, b.sim.Refunds(p), 1)

	// By charge, the rest; then nothing is left.
	byCharge := refundOf(p, "37.66", "k3")
	byCharge.PaymentID = p.ChargeID
	byCharge.Reason = ""
	res, err = b.api.Refund(ctx, byCharge)
	require.NoError(t, err)
	refunds = b.sim.Refunds(p)
	require.Len(t, refunds, 2)
	require.Equal(t, res.ProviderRefundID, refunds[1].ID)
	require.Equal(t, int64(3766), refunds[1].Amount)
	require.Empty(t, refunds[1].Reason)
	_, err = b.api.Refund(ctx, refundOf(p, "0.01", "k4"))
	requireRefused(t, err, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeAlreadyRefunded)

	// An unknown payment.
	missing := refundOf(p, "1.00", "k5")
	missing.PaymentID = "pi_missing"
	_, err = b.api.Refund(ctx, missing)
	requireRefused(t, err, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)

	// A zero-decimal currency goes out in whole units.
	yen := b.sim.Pay(stripesim.PayOpts{Amount: 1500, Currency: "jpy"})
	_, err = b.api.Refund(ctx, refundOf(yen, "1500", "k6"))
	require.NoError(t, err)
	require.Equal(t, int64(1500), b.sim.Refunds(yen)[0].Amount)
}

func TestRefundRefusalKnobs(t *testing.T) {
	t.Parallel()
	b := setupSim(t)
	ctx := context.Background()
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000})

	b.sim.RefuseNextRefund("card_error", "expired_card", "Your card has expired.")
	_, err := b.api.Refund(ctx, refundOf(p, "10.00", "card"))
	requireRefused(t, err, stripe.ErrorTypeCard, "expired_card")
	b.sim.RefuseNextRefund("invalid_request_error", "charge_disputed", "Charge has been charged back; cannot issue a refund.")
	_, err = b.api.Refund(ctx, refundOf(p, "10.00", "invalid"))
	requireRefused(t, err, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeDisputed)
	require.Empty(t, b.sim.Refunds(p))

	// The refusal is the key's answer for as long as the key lives.
	_, err = b.api.Refund(ctx, refundOf(p, "10.00", "card"))
	requireRefused(t, err, stripe.ErrorTypeCard, "expired_card")
	require.Empty(t, b.sim.Refunds(p))
}

func TestRefundIndeterminateFailures(t *testing.T) {
	t.Parallel()
	b := setupSim(t)
	ctx := context.Background()
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000})

	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable} {
		b.sim.FailNextRefundRequest(status)
		_, err := b.api.Refund(ctx, refundOf(p, "1.00", "fail"+http.StatusText(status)))
		requireIndeterminate(t, err)
		var se *stripe.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, stripe.ErrorTypeAPI, se.Type)
		require.Equal(t, status, se.HTTPStatusCode)
	}
	require.Empty(t, b.sim.Refunds(p))

	// A timeout after Stripe committed: indeterminate, and the retry with
	// the same key learns the refund instead of making a second.
	b.sim.DelayRefundAnswer(1, time.Hour)
	callCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := b.api.Refund(callCtx, refundOf(p, "2.00", "slow"))
	cancel()
	requireIndeterminate(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, b.sim.Refunds(p), 1, "the refund exists although the call failed")
	var res provider.RefundResult
	require.Eventually(t, func() bool {
		res, err = b.api.Refund(ctx, refundOf(p, "2.00", "slow"))
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "last error: %v", err)
	require.Equal(t, b.sim.Refunds(p)[0].ID, res.ProviderRefundID)
	require.Len(t, b.sim.Refunds(p), 1)

	// A request with the key still running: 409 idempotency_error, which
	// is no refusal, as the running one may well make the refund.
	b.sim.DelayRefundAnswer(1, 2*time.Second)
	first := make(chan error, 1)
	go func() {
		_, err := b.api.Refund(ctx, refundOf(p, "3.00", "busy"))
		first <- err
	}()
	require.Eventually(t, func() bool { return len(b.sim.Refunds(p)) == 2 }, 5*time.Second, time.Millisecond)
	_, err = b.api.Refund(ctx, refundOf(p, "3.00", "busy"))
	requireIndeterminate(t, err)
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusConflict, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeIdempotency, se.Type)
	require.Equal(t, stripe.ErrorCodeIdempotencyKeyInUse, se.Code)
	require.NoError(t, <-first)
	require.Len(t, b.sim.Refunds(p), 2)
}

// TestRefundStripeGoRetriesReuseTheKey runs paygate's configuration, with
// stripe-go's own network retries: after a timeout they resend the same
// Idempotency-Key, so the refund is made once and reported.
func TestRefundStripeGoRetriesReuseTheKey(t *testing.T) {
	t.Parallel()
	b := setupSim(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000})
	api, err := striperef.NewAPI(striperef.APIConfig{
		APIKey: b.sim.APIKey(), URL: b.srv.URL, MaxNetworkRetries: stripe.Int64(2),
		HTTPClient: &http.Client{Timeout: 300 * time.Millisecond},
	})
	require.NoError(t, err)
	b.sim.DelayRefundAnswer(1, time.Hour)
	res, err := api.Refund(context.Background(), refundOf(p, "5.00", "retried"))
	require.NoError(t, err)
	require.Len(t, b.sim.Refunds(p), 1)
	require.Equal(t, b.sim.Refunds(p)[0].ID, res.ProviderRefundID)
	require.Equal(t, int64(2), b.requests.Load(), "the timed-out attempt and its retry")
}

func TestRefundRefusedBeforeAnyCall(t *testing.T) {
	t.Parallel()
	b := setupSim(t)
	ctx := context.Background()
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000})

	for name, c := range map[string]struct {
		edit func(*provider.RefundRequest)
		is   error
	}{
		"reason":            {edit: func(r *provider.RefundRequest) { r.Reason = "expired_uncaptured_charge" }},
		"unknown currency":  {edit: func(r *provider.RefundRequest) { r.Currency = "USD" }, is: ledger.ErrUnknownCurrency},
		"too many decimals": {edit: func(r *provider.RefundRequest) { r.Amount = usd("1.005") }, is: ledger.ErrInvalidAmount},
		"zero":              {edit: func(r *provider.RefundRequest) { r.Amount = decimal.Zero }},
		"negative":          {edit: func(r *provider.RefundRequest) { r.Amount = usd("-1") }},
		"no payment":        {edit: func(r *provider.RefundRequest) { r.PaymentID = "" }},
	} {
		r := refundOf(p, "1.00", "pre-"+name)
		c.edit(&r)
		_, err := b.api.Refund(ctx, r)
		require.ErrorIs(t, err, provider.ErrRefundRefused, name)
		require.NotErrorIs(t, err, provider.ErrAPI, "%s: the API was not called", name)
		if c.is != nil {
			require.ErrorIs(t, err, c.is, name)
		}
	}

	for _, key := range []string{"", "  "} {
		_, err := b.api.Refund(ctx, refundOf(p, "1.00", key))
		require.ErrorIs(t, err, striperef.ErrNoIdempotencyKey)
		require.NotErrorIs(t, err, provider.ErrRefundRefused, "a bug in the caller, not the provider's answer")
	}
	require.Zero(t, b.requests.Load(), "nothing was sent")
	require.Empty(t, b.sim.Refunds(p))
}

func TestRefundErrorsNeverCarryTheAPIKey(t *testing.T) {
	t.Parallel()
	b := setupSim(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000})
	const key = "sk_test_wrong_but_secret_0123456789"

	_, err := newAPI(t, key, b.srv.URL).Refund(context.Background(), refundOf(p, "1.00", "auth"))
	requireIndeterminate(t, err) // the key is wrong, not the refund: fixed, the refund proceeds
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusUnauthorized, se.HTTPStatusCode)
	require.NotContains(t, err.Error(), key)
	require.NotContains(t, err.Error(), "0123456789")

	// Nor does a network error.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	_, err = newAPI(t, key, dead.URL).Refund(context.Background(), refundOf(p, "1.00", "down"))
	requireIndeterminate(t, err)
	require.NotContains(t, err.Error(), key)
	require.Empty(t, b.sim.Refunds(p))
}

// TestRefundErrorClassification covers the answers the simulator does not
// give: what decides is the status as much as the type, since a 429 (rate
// limit, lock timeout) and a 409 (the key in use) come with the types of
// definite refusals.
func TestRefundErrorClassification(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status  int
		body    string
		refused bool
	}{
		{http.StatusBadRequest, `{"error":{"type":"invalid_request_error","code":"amount_too_large","message":"too large"}}`, true},
		{http.StatusPaymentRequired, `{"error":{"type":"card_error","code":"expired_card","message":"expired"}}`, true},
		{http.StatusNotFound, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such charge"}}`, true},
		{http.StatusBadRequest, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests…"}}`, true},
		{http.StatusTooManyRequests, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`, false},
		{http.StatusTooManyRequests, `{"error":{"type":"invalid_request_error","code":"lock_timeout","message":"locked"}}`, false},
		{http.StatusConflict, `{"error":{"type":"idempotency_error","code":"idempotency_key_in_use","message":"in progress"}}`, false},
		{http.StatusUnauthorized, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: sk_test_****"}}`, false},
		{http.StatusForbidden, `{"error":{"type":"invalid_request_error","message":"The provided key does not have access"}}`, false},
		{http.StatusInternalServerError, `{"error":{"type":"api_error","message":"Sorry"}}`, false},
		{http.StatusBadGateway, `<html>bad gateway</html>`, false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Stripe-Should-Retry", "false")
			w.WriteHeader(c.status)
			_, _ = io.WriteString(w, c.body)
		}))
		_, err := newAPI(t, "sk_test_123", srv.URL).Refund(context.Background(), provider.RefundRequest{
			PaymentID: "pi_1", Amount: usd("1.00"), Currency: "usd", IdempotencyKey: "k", Reference: "rr",
		})
		srv.Close()
		require.ErrorIs(t, err, provider.ErrAPI, "%d %s", c.status, c.body)
		require.Equal(t, c.refused, errors.Is(err, provider.ErrRefundRefused), "%d %s: %v", c.status, c.body, err)
	}
}
