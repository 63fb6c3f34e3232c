package adyen_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

const testAPIKey = "AQE_secret_api_key_never_in_errors"

type seen struct {
	path   string
	header http.Header
	body   map[string]any
}

// fakeCheckout answers every call with status and body, and records what
// it was sent.
func fakeCheckout(t *testing.T, status int, body string) (*adyen.API, func() []seen) {
	t.Helper()
	var mu sync.Mutex
	var calls []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var b map[string]any
		_ = json.Unmarshal(raw, &b)
		mu.Lock()
		calls = append(calls, seen{path: r.URL.Path, header: r.Header.Clone(), body: b})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	api, err := adyen.NewAPI(adyen.APIConfig{APIKey: testAPIKey, MerchantAccount: "PaygateECOM",
		CheckoutURL: srv.URL + "/checkout/v71/", Timeout: time.Second})
	require.NoError(t, err)
	return api, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), calls...)
	}
}

const received = `{"merchantAccount":"PaygateECOM","paymentPspReference":"PAY0000000000001","pspReference":"RFD0000000000001","reference":"rr_1","status":"received"}`

func refundReq(value, currency string) provider.RefundRequest {
	return provider.RefundRequest{PaymentID: "PAY0000000000001", Amount: decimal.RequireFromString(value), Currency: currency,
		IdempotencyKey: "paygate-refund-rr_0123456789abcdef01234567", Reference: "rr_0123456789abcdef01234567"}
}

// TestRefundRequestShape: the endpoint, the headers and the body Adyen
// documents, the amount in Adyen's minor units of each currency.
func TestRefundRequestShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value, currency, wantCurrency string
		minor                         float64
	}{
		{"12.34", "eur", "EUR", 1234},
		{"500", "jpy", "JPY", 500},
		{"12.345", "kwd", "KWD", 12345},
		{"1500", "clp", "CLP", 150000}, // Adyen counts CLP centavos
		{"500.00", "idr", "IDR", 500},  // and no IDR cents
	} {
		api, calls := fakeCheckout(t, http.StatusCreated, received)
		r := refundReq(tc.value, tc.currency)
		r.Reason = "fraudulent"
		res, err := api.Refund(context.Background(), r)
		require.NoError(t, err)
		require.Equal(t, provider.RefundResult{ProviderRefundID: "RFD0000000000001", Status: "received"}, res)
		c := calls()
		require.Len(t, c, 1)
		require.Equal(t, "/checkout/v71/payments/PAY0000000000001/refunds", c[0].path)
		require.Equal(t, testAPIKey, c[0].header.Get("X-API-Key"))
		require.Equal(t, r.IdempotencyKey, c[0].header.Get("Idempotency-Key"))
		require.Equal(t, "application/json", c[0].header.Get("Content-Type"))
		require.Equal(t, map[string]any{
			"merchantAccount":      "PaygateECOM",
			"amount":               map[string]any{"currency": tc.wantCurrency, "value": tc.minor},
			"reference":            r.Reference,
			"merchantRefundReason": "FRAUD",
		}, c[0].body, tc.currency)
	}
}

// TestRefundIdempotencyKey: at most 64 characters, the same for the same
// request on every call, different for different requests.
func TestRefundIdempotencyKey(t *testing.T) {
	t.Parallel()
	short := "paygate-refund-rr_0123456789abcdef01234567"
	require.Equal(t, short, adyen.IdempotencyKey(short))
	long := strings.Repeat("k", 100)
	require.Len(t, adyen.IdempotencyKey(long), 64)
	require.Equal(t, adyen.IdempotencyKey(long), adyen.IdempotencyKey(long))
	require.NotEqual(t, adyen.IdempotencyKey(long), adyen.IdempotencyKey(long+"x"))

	api, calls := fakeCheckout(t, http.StatusInternalServerError, `{"status":500,"errorCode":"905","message":"Payment details are not supported","errorType":"configuration"}`)
	r := refundReq("1.00", "eur")
	r.IdempotencyKey = long
	for range 3 {
		_, err := api.Refund(context.Background(), r)
		require.Error(t, err)
	}
	c := calls()
	require.Len(t, c, 3)
	for _, call := range c {
		require.Equal(t, adyen.IdempotencyKey(long), call.header.Get("Idempotency-Key"), "the same key on every retry")
	}
}

// TestRefundOutcomes: a definite refusal is ErrRefundRefused with Adyen's
// message; everything that leaves the refund in doubt is not; no error
// carries the API key.
func TestRefundOutcomes(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status  int
		body    string
		refused bool
		message string
	}{
		"422 validation":          {422, `{"status":422,"errorCode":"137","message":"Invalid amount specified","errorType":"validation","pspReference":"X1"}`, true, "Invalid amount specified"},
		"400 validation":          {400, `{"status":400,"errorCode":"702","message":"Unable to parse","errorType":"validation"}`, true, "Unable to parse"},
		"404 with Adyen's body":   {404, `{"status":404,"errorCode":"000","message":"Not found","errorType":"validation"}`, true, "Not found"},
		"404 from something else": {404, `<html>not found</html>`, false, "404"},
		"422 key in progress":     {422, `{"status":422,"errorCode":"704","message":"request already processed or in progress","errorType":"validation"}`, false, "704"},
		"500":                     {500, `{"status":500,"errorCode":"000","message":"internal error","errorType":"internal"}`, false, "internal error"},
		"503 without a body":      {503, ``, false, "503"},
		"429":                     {429, `{"status":429,"errorCode":"000","message":"too many requests","errorType":"validation"}`, false, "too many"},
		"401 wrong key":           {401, `{"status":401,"errorCode":"000","message":"HTTP Status Response - Unauthorized","errorType":"security"}`, false, "Unauthorized"},
		"201 without a reference": {201, `{"status":"received"}`, false, "without a pspReference"},
	} {
		api, _ := fakeCheckout(t, tc.status, tc.body)
		_, err := api.Refund(context.Background(), refundReq("1.00", "eur"))
		require.Error(t, err, name)
		require.Equal(t, tc.refused, errors.Is(err, provider.ErrRefundRefused), "%s: %v", name, err)
		require.ErrorIs(t, err, provider.ErrAPI, name)
		require.Contains(t, err.Error(), tc.message, name)
		require.NotContains(t, err.Error(), testAPIKey, name)
	}
}

// TestRefundInvalidRequestsAreRefusedBeforeAnyCall: nothing is sent for an
// amount Adyen cannot take, an unknown reason or no key.
func TestRefundInvalidRequestsAreRefusedBeforeAnyCall(t *testing.T) {
	t.Parallel()
	api, calls := fakeCheckout(t, http.StatusCreated, received)
	for name, r := range map[string]provider.RefundRequest{
		"IDR cents":        refundReq("500.50", "idr"),
		"zero":             refundReq("0", "eur"),
		"unknown reason":   func() provider.RefundRequest { r := refundReq("1", "eur"); r.Reason = "changed_mind"; return r }(),
		"unknown currency": refundReq("1", "xxx"),
	} {
		_, err := api.Refund(context.Background(), r)
		require.ErrorIs(t, err, provider.ErrRefundRefused, name)
	}
	noKey := refundReq("1", "eur")
	noKey.IdempotencyKey = ""
	_, err := api.Refund(context.Background(), noKey)
	require.ErrorIs(t, err, adyen.ErrNoIdempotencyKey)
	require.NotErrorIs(t, err, provider.ErrRefundRefused)
	require.Empty(t, calls())
}

// TestRefundIndeterminateNetwork: a timeout and a connection dropped after
// Adyen committed are indeterminate; the retry with the same key gets the
// first answer, and Adyen holds one refund.
func TestRefundIndeterminateNetwork(t *testing.T) {
	t.Parallel()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	api, err := adyen.NewAPI(adyen.APIConfig{APIKey: testAPIKey, MerchantAccount: "PaygateECOM", CheckoutURL: slow.URL, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	_, err = api.Refund(context.Background(), refundReq("1.00", "eur"))
	require.ErrorIs(t, err, provider.ErrAPI)
	require.NotErrorIs(t, err, provider.ErrRefundRefused)
	require.NotContains(t, err.Error(), testAPIKey)

	sim := adyensim.New(adyensim.Config{})
	srv := sim.StartCheckout(t)
	psp, _ := sim.Authorise(5000, "EUR", "order-1", true)
	sim.Capture(psp, 5000)
	api, err = adyen.NewAPI(adyen.APIConfig{APIKey: sim.APIKey(), MerchantAccount: sim.MerchantAccount(), CheckoutURL: srv.URL + adyensim.CheckoutPath})
	require.NoError(t, err)
	r := refundReq("20.00", "eur")
	r.PaymentID = psp
	sim.DropNextRefundAnswers(1)
	_, err = api.Refund(context.Background(), r)
	require.ErrorIs(t, err, provider.ErrAPI)
	require.NotErrorIs(t, err, provider.ErrRefundRefused)
	res, err := api.Refund(context.Background(), r)
	require.NoError(t, err)
	made := sim.CheckoutRefunds()
	require.Len(t, made, 1, "one refund for one key")
	require.Equal(t, made[0].PspReference, res.ProviderRefundID)
	require.Equal(t, int64(2000), made[0].Value)

	// Over what is left (50.00 − 20.00): Adyen's refusal, in its shape.
	over := refundReq("30.01", "eur")
	over.PaymentID, over.IdempotencyKey = psp, "another-request"
	_, err = api.Refund(context.Background(), over)
	require.ErrorIs(t, err, provider.ErrRefundRefused)
	var se *adyen.ServiceError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "137", se.ErrorCode)

	// A wrong API key: indeterminate (configuration, not the refund), and
	// the key is in no error.
	bad, err := adyen.NewAPI(adyen.APIConfig{APIKey: testAPIKey, MerchantAccount: sim.MerchantAccount(), CheckoutURL: srv.URL + adyensim.CheckoutPath})
	require.NoError(t, err)
	_, err = bad.Refund(context.Background(), over)
	require.ErrorIs(t, err, provider.ErrAPI)
	require.NotErrorIs(t, err, provider.ErrRefundRefused)
	require.NotContains(t, err.Error(), testAPIKey)
}

// TestRefundWebhooksReportRefunds: REFUND reports the refund's outcome to
// the request named by merchantReference (the reference paygate sent) or
// by the refund's pspReference; REFUND_FAILED and REFUNDED_REVERSED
// report it failed.
func TestRefundWebhooksReportRefunds(t *testing.T) {
	t.Parallel()
	withRef := func(raw []byte, ref, reason string) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		m["merchantReference"], m["reason"] = ref, reason
		out, err := json.Marshal(m)
		require.NoError(t, err)
		return out
	}
	for name, tc := range map[string]struct {
		payload []byte
		want    provider.RefundReport
	}{
		"succeeded": {withRef(item("REFUND", refundPSP, payPSP, 6000, "EUR", true, nil), "rr_1", ""),
			provider.RefundReport{Reference: "rr_1", ProviderRefundID: refundPSP, Succeeded: true}},
		"refused": {withRef(item("REFUND", refundPSP, payPSP, 6000, "EUR", false, nil), "rr_1", "Insufficient balance on payment"),
			provider.RefundReport{Reference: "rr_1", ProviderRefundID: refundPSP, FailureReason: "Adyen refused the refund: Insufficient balance on payment"}},
		"failed later": {withRef(item("REFUND_FAILED", refundPSP, payPSP, 6000, "EUR", true, nil), "rr_1", "Refund Failed"),
			provider.RefundReport{Reference: "rr_1", ProviderRefundID: refundPSP, FailureReason: "Adyen reported REFUND_FAILED: Refund Failed"}},
		"reversed": {withRef(item("REFUNDED_REVERSED", refundPSP, payPSP, 6000, "EUR", true, nil), "rr_1", ""),
			provider.RefundReport{Reference: "rr_1", ProviderRefundID: refundPSP, FailureReason: "Adyen reported REFUNDED_REVERSED"}},
	} {
		fx, err := adyen.Effects(tc.payload)
		require.NoError(t, err, name)
		require.Equal(t, []provider.RefundReport{tc.want}, fx.Refunds, name)
	}
	fx, err := adyen.Effects(item("CAPTURE", capturePSP, payPSP, 6000, "EUR", true, nil))
	require.NoError(t, err)
	require.Empty(t, fx.Refunds, "a capture reports no refund")
}
