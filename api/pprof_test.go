package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
)

// TestPprofIsForOpsOnly: the profiler answers ops tokens, refuses finance
// tokens and anonymous callers.
func TestPprofIsForOpsOnly(t *testing.T) {
	t.Parallel()
	e, _ := newAPI(t, api.Config{OpsTokens: []string{"ops-token"}, FinanceTokens: []string{"fin-token"}})
	get := func(path, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
		require.Equal(t, http.StatusUnauthorized, get(path, "").Code, path)
		require.Equal(t, http.StatusForbidden, get(path, "fin-token").Code, path)
		rec := get(path, "ops-token")
		require.Equal(t, http.StatusOK, rec.Code, path)
		require.NotEmpty(t, rec.Body.String(), path)
	}
	require.True(t, strings.Contains(get("/debug/pprof/heap?debug=1", "ops-token").Body.String(), "heap profile"))
}
