package stripesim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
)

// TestRateLimitNext: the next n requests answer Stripe's rate-limit error,
// with the Stripe-Should-Retry header asked for, and are counted per route
// like every other request.
func TestRateLimitNext(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{Seed: 9})
	p := sim.Pay(stripesim.PayOpts{Amount: 1000})
	srv := sim.Start(t)
	get := func(path, key string) (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header, body
	}

	sim.RateLimitNext(2, nil)
	for range 2 {
		status, h, body := get("/v1/balance_transactions", sim.APIKey())
		require.Equal(t, http.StatusTooManyRequests, status)
		require.Empty(t, h.Get("Stripe-Should-Retry"), "Stripe's rate limiter does not say")
		var e struct {
			Error map[string]string `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &e))
		require.Equal(t, "invalid_request_error", e.Error["type"])
		require.Equal(t, "rate_limit", e.Error["code"])
		require.Contains(t, e.Error["message"], "rate limit")
	}
	status, _, _ := get("/v1/balance_transactions", sim.APIKey())
	require.Equal(t, http.StatusOK, status, "the limit is over")

	sim.RateLimitNext(1, &stripesim.RateLimitOpts{ShouldRetry: "false"})
	status, h, _ := get("/v1/balance_transactions/"+p.BalanceTransactionID, sim.APIKey())
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "false", h.Get("Stripe-Should-Retry"))
	status, _, _ = get("/v1/balance_transactions/"+p.BalanceTransactionID, sim.APIKey())
	require.Equal(t, http.StatusOK, status)

	status, _, _ = get("/v1/events", "sk_test_wrong")
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = get("/v1/nowhere", sim.APIKey())
	require.Equal(t, http.StatusNotFound, status)

	require.Equal(t, map[string]int{
		"GET /v1/balance_transactions":      3,
		"GET /v1/balance_transactions/{id}": 2,
		"GET /v1/events":                    1,
		"/":                                 1,
	}, sim.Requests())
	require.Equal(t, 7, sim.RequestCount())
}
