package api_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/jobs"
)

func TestRiverUIIsBehindTheOpsToken(t *testing.T) {
	t.Parallel()
	// Dozens of wrong credentials from one address follow: the limit on
	// failed authentications (TestFailedAuthenticationsAreLimited) would
	// refuse most of them.
	b := setupOps(t, func(c *api.Config) { c.RiverUI = true; c.AuthFailureLimit = 1000 })
	require.NoError(t, b.server.Start(t.Context()))
	b.seed(t, "evt_ui", seedOpts{})

	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	call := func(method, path, authorization string, headers ...string) *httptest.ResponseRecorder {
		t.Helper()
		var body *strings.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"ids":["999999"]}`) // no job: the request reaches River UI
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

// TestRiverUIKeepsProcessingReadOnly: River UI may not retry, cancel or
// delete process_event jobs (replay and discard are the audited way);
// jobs of other kinds it changes as before.
func TestRiverUIKeepsProcessingReadOnly(t *testing.T) {
	t.Parallel()
	b := setupOps(t, func(c *api.Config) { c.RiverUI = true })
	require.NoError(t, b.server.Start(t.Context()))
	ctx := t.Context()
	b.seed(t, "evt_ro", seedOpts{})
	var eventJob int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = 'process_event' AND args->>'event_id' = 'evt_ro'`).Scan(&eventJob))
	// A job of another kind, as River would store it; the insert-only
	// client here refuses kinds it has no worker for.
	var otherID int64
	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO river_job (kind, args, queue, state, max_attempts, priority, scheduled_at)
		VALUES ($1, '{"date":"2025-03-14"}', $2, 'available', 5, 1, now()) RETURNING id`,
		jobs.ReconcileArgs{}.Kind(), jobs.QueueMaintenance).Scan(&otherID))

	post := func(action, body string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/riverui/api/jobs/"+action, strings.NewReader(body))
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+opsTok)
		req.Header.Set(echo.HeaderContentType, "application/json")
		rec := httptest.NewRecorder()
		b.echo.ServeHTTP(rec, req)
		return rec
	}
	jobState := func(id int64) string {
		var state string
		err := b.pool.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return "deleted"
		}
		require.NoError(t, err)
		return state
	}

	for _, action := range []string{"retry", "cancel", "delete"} {
		for _, body := range []string{
			fmt.Sprintf(`{"ids":["%d"]}`, eventJob),
			fmt.Sprintf(`{"ids":[%d]}`, eventJob),
			fmt.Sprintf(`{"ids":["%d","%d"]}`, otherID, eventJob),
		} {
			rec := post(action, body)
			require.Equal(t, http.StatusForbidden, rec.Code, "%s %s: %s", action, body, rec.Body.String())
			require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType))
			var p api.Problem
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			require.Contains(t, p.Detail, "/v1/ops/events/{provider}/{event_id}/replay")
			require.Contains(t, p.Detail, "/discard")
		}
		rec := post(action+"/", fmt.Sprintf(`{"ids":["%d"]}`, eventJob))
		require.NotEqual(t, http.StatusOK, rec.Code, "a trailing slash is the same action")
		require.Equal(t, http.StatusBadRequest, post(action, `{"ids":"all"}`).Code, "an unreadable body is not passed on")
	}
	require.Equal(t, "available", jobState(eventJob), "the event's job is untouched")
	require.Equal(t, "available", jobState(otherID), "a refused batch changes nothing")

	rec := post("cancel", fmt.Sprintf(`{"ids":["%d"]}`, otherID))
	require.Equal(t, http.StatusOK, rec.Code, "other kinds are unaffected: %s", rec.Body.String())
	require.Equal(t, "cancelled", jobState(otherID))
	rec = post("delete", fmt.Sprintf(`{"ids":["%d"]}`, otherID))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "deleted", jobState(otherID))
}
