package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/provider/stripe"
)

// TestReconciliationRunRefusedWithoutAProvider: a server that cannot
// perform runs says so at request time, records nothing, and keeps the
// Idempotency-Key free for when it can.
func TestReconciliationRunRefusedWithoutAProvider(t *testing.T) {
	t.Parallel()
	b := setupOps(t, func(c *api.Config) { c.ReconcileUnavailable = stripe.ErrNoAPIKey })
	for range 2 {
		rec := b.do(t, http.MethodPost, "/v1/reconciliation/runs", financeTok, "run-unconfigured", `{"date":"2025-03-14"}`)
		p := requireProblem(t, rec, http.StatusServiceUnavailable)
		require.Equal(t, "Reconciliation not available", p.Title)
		require.Contains(t, p.Detail, "PAYGATE_STRIPE_API_KEY", "the detail names what to configure")
		require.Empty(t, rec.Header().Get(api.HeaderIdempotentReplayed), "refused afresh, not replayed")
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM reconciliation_runs`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'reconcile'`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM idempotency_keys`), "the key is released")
	// A bad request is still a bad request.
	requireProblem(t, b.do(t, http.MethodPost, "/v1/reconciliation/runs", financeTok, "run-bad", `{"date":"x"}`), http.StatusBadRequest)
}
