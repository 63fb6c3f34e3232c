package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
)

// TestRequestsAreBoundedInTime: a /v1 request whose work cannot finish (its
// table locked by someone else) is answered 503 when its RequestTimeout
// runs out, instead of holding its handler for as long as the lock is held.
func TestRequestsAreBoundedInTime(t *testing.T) {
	t.Parallel()
	b := setupOps(t, func(c *api.Config) { c.RequestTimeout = 300 * time.Millisecond })
	b.seed(t, "evt_slow", seedOpts{})
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE inbox_events IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	release := time.AfterFunc(10*time.Second, func() { _ = tx.Rollback(ctx) })
	defer func() {
		release.Stop()
		_ = tx.Rollback(ctx)
	}()

	start := time.Now()
	rec := b.do(t, http.MethodGet, "/v1/events/stripe/evt_slow", opsTok, "", "")
	took := time.Since(start)
	require.Less(t, took, 5*time.Second, "the request is cut at its timeout, not when the lock goes")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.NotEmpty(t, rec.Header().Get("Retry-After"))
	var p api.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, "Request timed out", p.Title)
}
