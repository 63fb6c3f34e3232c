package api_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
)

func TestRiverUIIsBehindTheOpsToken(t *testing.T) {
	t.Parallel()
	b := setupOps(t, func(c *api.Config) { c.RiverUI = true })
	require.NoError(t, b.server.Start(t.Context()))
	b.seed(t, "evt_ui", seedOpts{})

	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	call := func(method, path, authorization string, headers ...string) *httptest.ResponseRecorder {
		t.Helper()
		var body *strings.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"ids":["1"]}`)
		} else {
			body = strings.NewReader("")
		}
		req := httptest.NewRequest(method, path, body)
		if authorization != "" {
			req.Header.Set(echo.HeaderAuthorization, authorization)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		rec := httptest.NewRecorder()
		b.echo.ServeHTTP(rec, req)
		return rec
	}

	for _, path := range []string{"/riverui", "/riverui/", "/riverui/jobs", "/riverui/api/jobs?state=available", "/riverui/api/features"} {
		for name, tc := range map[string]struct {
			auth   string
			status int
		}{
			"no credentials":         {"", http.StatusUnauthorized},
			"wrong bearer":           {"Bearer not-a-token", http.StatusUnauthorized},
			"wrong basic password":   {basic("ops", "not-a-token"), http.StatusUnauthorized},
			"token as basic user":    {basic(opsTok, ""), http.StatusUnauthorized},
			"malformed basic":        {"Basic !!!", http.StatusUnauthorized},
			"finance bearer":         {"Bearer " + financeTok, http.StatusForbidden},
			"finance basic password": {basic("x", financeTok), http.StatusForbidden},
		} {
			rec := call(http.MethodGet, path, tc.auth)
			require.Equal(t, tc.status, rec.Code, "%s %s: %s", name, path, rec.Body.String())
			if tc.status == http.StatusUnauthorized {
				require.Contains(t, rec.Header().Get(echo.HeaderWWWAuthenticate), "Basic", "a browser shows its login prompt")
			}
			require.NotContains(t, rec.Body.String(), "evt_ui", "%s %s leaks nothing", name, path)
		}
	}

	rec := call(http.MethodGet, "/riverui/", "Bearer "+opsTok)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "<html")
	rec = call(http.MethodGet, "/riverui/jobs", basic("alice", opsTok))
	require.Equal(t, http.StatusOK, rec.Code, "basic auth with the token as password: %s", rec.Body.String())

	rec = call(http.MethodGet, "/riverui/api/jobs?state=available&limit=10", basic("alice", opsTok))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "process_event", "the ops token sees the jobs")

	rec = call(http.MethodGet, "/riverui/api/features", "Bearer "+opsTok)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var features struct {
		HideArgs bool `json:"job_list_hide_args_by_default"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &features))
	require.True(t, features.HideArgs, "job arguments are hidden by default")

	// State changes from another site are refused even with credentials a
	// browser would attach on its own.
	rec = call(http.MethodPost, "/riverui/api/jobs/cancel", basic("alice", opsTok), "Origin", "https://evil.example", echo.HeaderContentType, "application/json")
	require.Equal(t, http.StatusForbidden, rec.Code)
	rec = call(http.MethodPost, "/riverui/api/jobs/cancel", basic("alice", opsTok), "Sec-Fetch-Site", "cross-site", echo.HeaderContentType, "application/json")
	require.Equal(t, http.StatusForbidden, rec.Code)
	rec = call(http.MethodPost, "/riverui/api/jobs/cancel", "", echo.HeaderContentType, "application/json")
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	rec = call(http.MethodPost, "/riverui/api/jobs/cancel", "Bearer "+opsTok, "Origin", "http://example.com", echo.HeaderContentType, "application/json")
	require.NotEqual(t, http.StatusUnauthorized, rec.Code)
	require.NotEqual(t, http.StatusForbidden, rec.Code, "same origin: %s", rec.Body.String())
}
