package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
)

// unusedRefunder stands for a configured refund client in tests whose job
// client only inserts: the submit_refund worker, which would call it, does
// not run there.
type unusedRefunder struct{ t *testing.T }

func (u unusedRefunder) Refund(context.Context, provider.RefundRequest) (provider.RefundResult, error) {
	u.t.Error("no refund may be submitted from an insert-only client")
	return provider.RefundResult{}, provider.ErrAPI
}

func setupRefunds(t *testing.T, refunders bool) *opsBundle {
	t.Helper()
	pool := testdb.New(t)
	cfg := jobs.Config{InsertOnly: true}
	if refunders {
		cfg.Refunders = map[string]provider.Refunder{"stripe": unusedRefunder{t}}
	}
	jc, err := jobs.NewClient(pool, cfg)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	e, s := newAPI(t, api.Config{Pool: pool, Jobs: jc, OpsTokens: []string{opsTok, otherOpsTok},
		FinanceTokens: []string{financeTok}, Registry: reg})
	b := &opsBundle{pool: pool, jobs: jc, echo: e, server: s, registry: reg}
	for _, p := range []struct{ id, provider, currency, captured, refunded string }{
		{"pi_rf", "stripe", "usd", "100.00", "10.00"},
		{"pi_race", "stripe", "usd", "100.00", "0"},
		{"8816000000000001", "adyen", "eur", "50.00", "0"},
	} {
		_, err := pool.Exec(context.Background(), `
			INSERT INTO payments (id, provider, status, currency, amount, amount_captured, amount_refunded)
			VALUES ($1, $2, 'succeeded', $3, $4, $4, $5)`, p.id, p.provider, p.currency, p.captured, p.refunded)
		require.NoError(t, err)
	}
	return b
}

func TestRefundRequestAPI(t *testing.T) {
	t.Parallel()
	b := setupRefunds(t, true)

	rec := b.do(t, http.MethodPost, "/v1/payments/pi_rf/refunds", opsTok, "rf-1",
		`{"amount":"25.50","reason":"requested_by_customer","note":"parcel lost"}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	var r api.RefundRequestView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
	require.Equal(t, "25.50", r.Amount)
	require.Equal(t, "usd", r.Currency)
	require.Equal(t, "requested", string(r.State))
	require.Equal(t, "requested_by_customer", *r.Reason)
	require.Nil(t, r.ProviderRefundID)
	require.NotEmpty(t, r.Actor)
	require.Equal(t, "/v1/refund-requests/"+r.ID, rec.Header().Get("Location"))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'submit_refund' AND args->>'request_id' = $1`, r.ID),
		"the request and its job commit together")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM ops_audit_log WHERE action = 'refund_request' AND event_id = $1 AND idempotency_key = 'rf-1'`, r.ID))

	// The same key again: the stored answer, nothing new.
	again := b.do(t, http.MethodPost, "/v1/payments/pi_rf/refunds", opsTok, "rf-1",
		`{"amount":"25.50","reason":"requested_by_customer","note":"parcel lost"}`)
	require.Equal(t, http.StatusAccepted, again.Code)
	require.Equal(t, "true", again.Header().Get(api.HeaderIdempotentReplayed))
	require.JSONEq(t, rec.Body.String(), again.Body.String())

	for _, tok := range []string{opsTok, financeTok} {
		got := b.do(t, http.MethodGet, "/v1/refund-requests/"+r.ID, tok, "", "")
		require.Equal(t, http.StatusOK, got.Code, got.Body.String())
		list := b.do(t, http.MethodGet, "/v1/payments/pi_rf/refund-requests", tok, "", "")
		require.Equal(t, http.StatusOK, list.Code, list.Body.String())
		require.Contains(t, list.Body.String(), r.ID)
	}

	for name, tc := range map[string]struct {
		path, token, key, body string
		status                 int
		problem                string
	}{
		"over the refundable amount": {"/v1/payments/pi_rf/refunds", opsTok, "rf-2", `{"amount":"64.51"}`, 422, "#refund-exceeds-refundable"},
		"an unknown payment":         {"/v1/payments/pi_none/refunds", opsTok, "rf-3", `{}`, 404, "#refunds"},
		"another provider":           {"/v1/payments/8816000000000001/refunds", opsTok, "rf-4", `{}`, 422, "#refunds"},
		"an unknown reason":          {"/v1/payments/pi_rf/refunds", opsTok, "rf-5", `{"reason":"changed_mind"}`, 400, "#refunds"},
		"an amount in exponent form": {"/v1/payments/pi_rf/refunds", opsTok, "rf-6", `{"amount":"1e1"}`, 400, "#refunds"},
		"an amount as a number":      {"/v1/payments/pi_rf/refunds", opsTok, "rf-7", `{"amount":10}`, 400, ""},
		"an unknown field":           {"/v1/payments/pi_rf/refunds", opsTok, "rf-8", `{"amount":"1.00","currency":"usd"}`, 400, ""},
		"finance may not refund":     {"/v1/payments/pi_rf/refunds", financeTok, "rf-9", `{}`, 403, ""},
		"no key":                     {"/v1/payments/pi_rf/refunds", opsTok, "", `{}`, 400, "#idempotency"},
		"an unknown request":         {"/v1/refund-requests/rr_000000000000000000000000", opsTok, "", "", 404, "#refunds"},
	} {
		method := http.MethodPost
		if tc.body == "" {
			method = http.MethodGet
		}
		rec := b.do(t, method, tc.path, tc.token, tc.key, tc.body)
		require.Equal(t, tc.status, rec.Code, "%s: %s", name, rec.Body.String())
		require.Contains(t, rec.Body.String(), tc.problem, name)
	}
	// 100 captured − 10 refunded − 25.50 requested = 64.50: exactly that
	// is accepted.
	rec = b.do(t, http.MethodPost, "/v1/payments/pi_rf/refunds", opsTok, "rf-10", `{"amount":"64.50"}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM refund_requests`))
}

// TestRefundRequestsWithoutARefundClientAreRefused: a server that cannot
// submit refunds (no PAYGATE_STRIPE_API_KEY) refuses them at once, and
// records nothing.
func TestRefundRequestsWithoutARefundClientAreRefused(t *testing.T) {
	t.Parallel()
	b := setupRefunds(t, false)
	rec := b.do(t, http.MethodPost, "/v1/payments/pi_rf/refunds", opsTok, "rf-nokey", `{}`)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "PAYGATE_STRIPE_API_KEY")
	require.Zero(t, b.count(t, `SELECT count(*) FROM refund_requests`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job`))
}

// TestConcurrentRefundRequests: twenty requests with distinct keys for
// amounts summing to twice the refundable amount: those accepted sum to at
// most it, decided by the database; twenty with one key: one request, the
// others replays or 409s.
func TestConcurrentRefundRequests(t *testing.T) {
	t.Parallel()
	b := setupRefunds(t, true)
	run := func(key func(i int) string, amount string) []int {
		codes := make([]int, 20)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				codes[i] = b.do(t, http.MethodPost, "/v1/payments/pi_race/refunds", opsTok, key(i),
					fmt.Sprintf(`{"amount":%q}`, amount)).Code
			}()
		}
		close(start)
		wg.Wait()
		return codes
	}

	codes := run(func(i int) string { return fmt.Sprintf("race-%d", i) }, "10.00") // 200.00 asked of 100.00
	accepted := 0
	for _, c := range codes {
		require.Contains(t, []int{http.StatusAccepted, http.StatusUnprocessableEntity}, c)
		if c == http.StatusAccepted {
			accepted++
		}
	}
	var sum decimal.Decimal
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(amount), 0) FROM refund_requests WHERE payment_id = 'pi_race'`).Scan(&sum))
	require.Equal(t, 10, accepted, "codes %v", codes)
	require.Equal(t, "100.00", sum.StringFixed(2))

	b2 := setupRefunds(t, true)
	b = b2
	codes = run(func(int) string { return "one-key" }, "10.00")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM refund_requests`), "one request for one key: %v", codes)
	for _, c := range codes {
		require.Contains(t, []int{http.StatusAccepted, http.StatusConflict}, c)
	}
}

// TestRefundAnswersMatchTheDocument: what the refund routes answer fits
// the schemas api/openapi.json gives them.
func TestRefundAnswersMatchTheDocument(t *testing.T) {
	t.Parallel()
	b := setupRefunds(t, true)
	var whole map[string]any
	require.NoError(t, json.Unmarshal(api.OpenAPI, &whole))
	sc := schemaChecker{t: t, whole: whole}
	created := b.do(t, http.MethodPost, "/v1/payments/pi_rf/refunds", opsTok, "doc-rf", `{"amount":"1.00"}`)
	require.Equal(t, http.StatusAccepted, created.Code, created.Body.String())
	var r api.RefundRequestView
	require.NoError(t, json.Unmarshal(created.Body.Bytes(), &r))
	for _, c := range []struct {
		method, docPath string
		rec             *httptest.ResponseRecorder
		status          int
	}{
		{http.MethodPost, "/v1/payments/{payment_id}/refunds", created, 202},
		{http.MethodPost, "/v1/payments/{payment_id}/refunds", b.do(t, http.MethodPost, "/v1/payments/pi_rf/refunds", opsTok, "doc-rf-big", `{"amount":"1000.00"}`), 422},
		{http.MethodGet, "/v1/refund-requests/{id}", b.do(t, http.MethodGet, "/v1/refund-requests/"+r.ID, financeTok, "", ""), 200},
		{http.MethodGet, "/v1/payments/{payment_id}/refund-requests", b.do(t, http.MethodGet, "/v1/payments/pi_rf/refund-requests", opsTok, "", ""), 200},
		{http.MethodGet, "/v1/refund-requests/{id}", b.do(t, http.MethodGet, "/v1/refund-requests/rr_none", opsTok, "", ""), 404},
	} {
		where := fmt.Sprintf("%s %s → %d", c.method, c.docPath, c.status)
		require.Equal(t, c.status, c.rec.Code, "%s: %s", where, c.rec.Body.String())
		op := whole["paths"].(map[string]any)[c.docPath].(map[string]any)[strings.ToLower(c.method)].(map[string]any)
		resp, ok := op["responses"].(map[string]any)[fmt.Sprint(c.status)].(map[string]any)
		require.True(t, ok, "%s: status documented", where)
		resp = sc.resolve(resp)
		ct := strings.Split(c.rec.Header().Get("Content-Type"), ";")[0]
		media, ok := resp["content"].(map[string]any)[ct].(map[string]any)
		require.True(t, ok, "%s: content type %s documented", where, ct)
		var v any
		require.NoError(t, json.Unmarshal(c.rec.Body.Bytes(), &v))
		sc.check(where, media["schema"].(map[string]any), v)
	}
}
