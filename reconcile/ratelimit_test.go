package reconcile_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/reconcile"
)

// TestRateLimitedRunCompletes: Stripe's rate limiter answers the run's
// first requests 429 without saying whether to retry; the client waits
// and retries them, and the run completes as if nothing had happened.
func TestRateLimitedRunCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{retries: 2})
	b.sim.Pay(stripesim.PayOpts{Amount: 1000})
	b.deliver(t)
	b.sim.RateLimitNext(2, nil)
	run, items := b.run(t, day)
	require.Equal(t, 1, run.Report.Summary[reconcile.StatusMatched])
	require.Equal(t, 1, run.Report.Summary[reconcile.StatusFeePosted])
	require.Len(t, items, 2)
	require.Equal(t, int64(3), b.requests["/v1/events"].Load(), "two refusals, then the page")
}

// TestRateLimitThatSaysDoNotRetry: a 429 with Stripe-Should-Retry: false
// is not retried (stripe-go defers to the header): the attempt fails with
// ErrProvider after one request, and the run is left for its job's retry.
func TestRateLimitThatSaysDoNotRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{retries: 2})
	b.sim.Pay(stripesim.PayOpts{Amount: 1000})
	b.deliver(t)
	b.sim.RateLimitNext(1, &stripesim.RateLimitOpts{ShouldRetry: "false"})
	run, err := b.runner.RunDay(context.Background(), day, reconcile.TriggerCLI, "test")
	require.ErrorIs(t, err, reconcile.ErrProvider)
	require.Contains(t, run.Error, "rate limit")
	require.Equal(t, int64(1), b.requests["/v1/events"].Load(), "asked once, not retried")
	require.Zero(t, countRefs(t, b, "stripe:fee:%"))
}

// TestRateLimitThatSaysRetry: with Stripe-Should-Retry: true the 429 is
// retried like any retryable answer.
func TestRateLimitThatSaysRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{retries: 2})
	b.sim.Pay(stripesim.PayOpts{Amount: 1000})
	b.deliver(t)
	b.sim.RateLimitNext(1, &stripesim.RateLimitOpts{ShouldRetry: "true"})
	run, _ := b.run(t, day)
	require.Equal(t, 1, run.Report.Summary[reconcile.StatusMatched])
	require.Equal(t, int64(2), b.requests["/v1/events"].Load())
}
