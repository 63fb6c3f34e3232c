package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
)

const (
	opsToken     = "ops-token-for-tests"
	financeToken = "finance-token-for-tests"
)

func newEcho(t *testing.T, w *worldtest.World) *echo.Echo {
	t.Helper()
	e, _ := newAPI(t, api.Config{Pool: w.Pool, Jobs: w.Jobs, OpsTokens: []string{opsToken}, FinanceTokens: []string{financeToken}})
	return e
}

func get(t *testing.T, e *echo.Echo, path, token string, v any) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if v != nil && rec.Code == http.StatusOK {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), v), rec.Body.String())
	}
	return rec
}

func TestPaymentLedgerAndTrialBalanceRoutes(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	e := newEcho(t, w)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd"})
	// The payment, then its refund: applied together, concurrent workers
	// may fold them in one batch, whose history is one change of state.
	w.Apply(t, sim.Events()...)
	paid := len(sim.Events())
	r := sim.Refund(p, 36000)
	w.Apply(t, sim.Events()[paid:]...)

	var payment map[string]any
	rec := get(t, e, "/v1/payments/"+p.ID, financeToken, &payment)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, p.ID, payment["id"])
	require.Equal(t, "stripe", payment["provider"])
	require.Equal(t, "refunded", payment["status"])
	require.Equal(t, "usd", payment["currency"])
	require.Equal(t, "360.00", payment["amount"])
	require.Equal(t, "360.00", payment["amount_captured"])
	require.Equal(t, "360.00", payment["amount_refunded"])
	require.Equal(t, "0.00", payment["amount_disputed"])
	history := payment["history"].([]any)
	require.GreaterOrEqual(t, len(history), 2)
	first := history[0].(map[string]any)
	require.Nil(t, first["from"])
	require.Contains(t, first, "event_id")
	require.Contains(t, first, "at")
	last := history[len(history)-1].(map[string]any)
	require.Equal(t, "refunded", last["to"])
	emails := payment["emails"].([]any)
	require.Len(t, emails, 2, "a receipt and a refund confirmation")
	for _, e := range emails {
		require.Equal(t, "skipped", e.(map[string]any)["status"], "no SMTP server is configured here")
	}

	var books struct {
		Transactions []struct {
			Ref        string `json:"ref"`
			Kind       string `json:"kind"`
			Currency   string `json:"currency"`
			OccurredAt string `json:"occurred_at"`
			Entries    []struct {
				Account string `json:"account"`
				Debit   string `json:"debit"`
				Credit  string `json:"credit"`
			} `json:"entries"`
		} `json:"transactions"`
	}
	rec = get(t, e, "/v1/payments/"+p.ID+"/ledger", opsToken, &books)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Len(t, books.Transactions, 2)
	refs := map[string]string{}
	for _, tx := range books.Transactions {
		refs[tx.Kind] = tx.Ref
		require.Equal(t, "usd", tx.Currency)
		require.NotEmpty(t, tx.OccurredAt)
		require.Len(t, tx.Entries, 2)
		for _, en := range tx.Entries {
			require.True(t, (en.Debit == "0") != (en.Credit == "0"), "one side is \"0\": %+v", en)
		}
	}
	require.Equal(t, "stripe:charge:"+p.ChargeID+":capture", refs["capture"])
	require.Equal(t, "stripe:refund:"+r.ID, refs["refund"])

	var tb struct {
		Currencies []map[string]any `json:"currencies"`
		Accounts   []map[string]any `json:"accounts"`
	}
	rec = get(t, e, "/v1/ledger/trial-balance", financeToken, &tb)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, []map[string]any{{"currency": "usd", "debits": "720.00", "credits": "720.00", "balanced": true}}, tb.Currencies)
	balances := map[string]string{}
	for _, a := range tb.Accounts {
		balances[a["account"].(string)] = a["balance"].(string)
	}
	require.Equal(t, "0.00", balances["provider_balance"])
	require.Equal(t, "-360.00", balances["sales"])
	require.Equal(t, "360.00", balances["refunds"])

	var ev map[string]any
	rec = get(t, e, "/v1/events/stripe/"+sim.Events()[0].ID, financeToken, &ev)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "processed", ev["status"])
	require.NotContains(t, ev, "payload", "finance does not get payloads")
	for _, k := range []string{"provider", "event_id", "type", "status", "attempts", "last_error", "received_at", "processed_at"} {
		require.Contains(t, ev, k)
	}

	var stats struct {
		Events map[string]int `json:"events"`
	}
	rec = get(t, e, "/v1/ops/stats", opsToken, &stats)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, len(sim.Events()), stats.Events["processed"])
	for _, k := range []string{"received", "processed", "ignored", "poison", "discarded"} {
		require.Contains(t, stats.Events, k)
	}
}

func TestReadRoutesAuthAndNotFound(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	e := newEcho(t, w)
	for _, path := range []string{"/v1/payments/pi_missing", "/v1/payments/pi_missing/ledger", "/v1/events/stripe/evt_missing"} {
		require.Equal(t, http.StatusUnauthorized, get(t, e, path, "", nil).Code, path)
		require.Equal(t, http.StatusUnauthorized, get(t, e, path, "wrong-token", nil).Code, path)
		rec := get(t, e, path, financeToken, nil)
		require.Equal(t, http.StatusNotFound, rec.Code, path)
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	}
	require.Equal(t, http.StatusForbidden, get(t, e, "/v1/ops/stats", financeToken, nil).Code)
	require.Equal(t, http.StatusOK, get(t, e, "/v1/ledger/trial-balance", opsToken, nil).Code)
	require.Equal(t, http.StatusOK, get(t, e, "/healthz", "", nil).Code)
	require.Equal(t, http.StatusOK, get(t, e, "/readyz", "", nil).Code)
	rec := get(t, e, "/metrics", "", nil)
	require.Equal(t, http.StatusOK, rec.Code)
}

// TestCustomerEmailsMaskedForFinance: ops see where a payment's emails
// went; finance see the address masked.
func TestCustomerEmailsMaskedForFinance(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	e := newEcho(t, w)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "usd", Email: "buyer@example.com"})
	w.Apply(t, sim.Events()...)
	for token, want := range map[string]string{opsToken: "buyer@example.com", financeToken: "b•••@example.com"} {
		var payment struct {
			Emails []struct {
				Recipient string `json:"recipient"`
			} `json:"emails"`
		}
		rec := get(t, e, "/v1/payments/"+p.ID, token, &payment)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Len(t, payment.Emails, 1)
		require.Equal(t, want, payment.Emails[0].Recipient)
		if token == financeToken {
			require.NotContains(t, rec.Body.String(), "buyer@")
		}
	}
}
