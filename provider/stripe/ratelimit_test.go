package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/provider"
	striperef "github.com/paygate/paygate/provider/stripe"
)

// TestRateLimitedReads: a read answered 429 is retried with stripe-go's
// backoff up to MaxNetworkRetries, unless Stripe says
// Stripe-Should-Retry: false; a rate-limited refund is left to the saga.
func TestRateLimitedReads(t *testing.T) {
	t.Parallel()
	day := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name        string
		limited     int
		shouldRetry string
		ok          bool
		requests    int
	}{
		{"retried until it passes", 2, "", true, 3},
		{"retried when Stripe says so", 1, "true", true, 2},
		{"not retried when Stripe says not to", 1, "false", false, 1},
		{"retries run out", 3, "", false, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sim := stripesim.New(stripesim.Config{Seed: 5, Now: day.Add(time.Hour)})
			p := sim.Pay(stripesim.PayOpts{Amount: 1000})
			srv := sim.Start(t)
			api, err := striperef.NewAPI(striperef.APIConfig{APIKey: sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripe.Int64(2)})
			require.NoError(t, err)
			sim.RateLimitNext(c.limited, &stripesim.RateLimitOpts{ShouldRetry: c.shouldRetry})
			bt, found, err := api.BalanceTransaction(context.Background(), p.BalanceTransactionID)
			require.Equal(t, c.requests, sim.Requests()["GET /v1/balance_transactions/{id}"])
			if !c.ok {
				require.ErrorIs(t, err, provider.ErrAPI)
				require.False(t, errors.Is(err, provider.ErrAPIRefused), "a rate limit is not a refusal: %v", err)
				var se *stripe.Error
				require.ErrorAs(t, err, &se)
				require.Equal(t, http.StatusTooManyRequests, se.HTTPStatusCode)
				require.Equal(t, stripe.ErrorCodeRateLimit, se.Code)
				return
			}
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, p.BalanceTransactionID, bt.ID)
		})
	}

	t.Run("a refund is not retried here", func(t *testing.T) {
		t.Parallel()
		sim := stripesim.New(stripesim.Config{Seed: 6, Now: day.Add(time.Hour)})
		p := sim.Pay(stripesim.PayOpts{Amount: 1000})
		srv := sim.Start(t)
		api, err := striperef.NewAPI(striperef.APIConfig{APIKey: sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripe.Int64(2)})
		require.NoError(t, err)
		sim.RateLimitNext(1, nil)
		_, err = api.Refund(context.Background(), refundOf(p, "1.00", "rl"))
		require.ErrorIs(t, err, provider.ErrAPI)
		require.Equal(t, 1, sim.Requests()["POST /v1/refunds"])
		require.Empty(t, sim.Refunds(p))
	})
}
