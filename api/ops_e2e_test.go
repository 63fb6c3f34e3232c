package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
)

// TestPoisonReplayAndDiscardWithRealWorkers runs the whole loop with River
// working the jobs: an outage makes a payment's event poison, ops see it
// with River's error, fix the outage and replay it, and it is applied; an
// impossible event is replayed (and fails again, each attempt's error kept)
// and finally discarded with a reason.
func TestPoisonReplayAndDiscardWithRealWorkers(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.ProcessMaxAttempts = 1 }})
	e, _ := newAPI(t, api.Config{Pool: w.Pool, Jobs: w.Jobs, OpsTokens: []string{opsTok}})
	call := func(method, path, key, body string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+opsTok)
		if body != "" {
			req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		}
		if key != "" {
			req.Header.Set(api.HeaderIdempotencyKey, key)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}
	ctx := context.Background()

	_, err := w.Pool.Exec(ctx, `
		CREATE FUNCTION fail_facts() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'simulated outage'; END $$;
		CREATE TRIGGER fail_facts BEFORE INSERT ON payment_facts FOR EACH ROW EXECUTE FUNCTION fail_facts();`)
	require.NoError(t, err)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd"})
	paid := sim.Events()
	impossible := sim.Emit("charge.succeeded", map[string]any{
		"id": "ch_unknown_cur", "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "zzz",
	})
	w.Apply(t, append(paid, impossible)...)
	for _, ev := range paid {
		require.Equal(t, "poison", w.Status(t, ev.ID), "one attempt allowed, and it met the outage")
	}

	rec := call(http.MethodGet, "/v1/ops/poison?limit=100", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	page := decodeJSON[poisonPage](t, rec)
	require.Len(t, page.Events, len(paid)+1)
	for _, pe := range page.Events {
		require.NotEmpty(t, pe.Errors, pe.EventID)
		if pe.EventID != impossible.ID {
			require.Contains(t, pe.Errors[0].Error, "simulated outage", "River's own record of the attempt")
		}
	}

	// The outage is over: replay everything it poisoned, by filter.
	_, err = w.Pool.Exec(ctx, `DROP TRIGGER fail_facts ON payment_facts`)
	require.NoError(t, err)
	rec = call(http.MethodPost, "/v1/ops/replay", "after-outage", `{"error":"simulated outage","reason":"database back"}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"matched":`+strconv.Itoa(len(paid))+`,"replayed":`+strconv.Itoa(len(paid))+`,"dry_run":false}`, rec.Body.String())
	w.Settle(t)
	for _, ev := range paid {
		require.Equal(t, "processed", w.Status(t, ev.ID), ev.ID)
	}
	got, err := ledger.GetPayment(ctx, w.Pool, p.ID)
	require.NoError(t, err)
	require.Equal(t, "360.00", ledger.Format(got.AmountCaptured, "usd"), "the replayed events are applied")

	// The impossible event fails again on replay; each job's error is kept.
	rec = call(http.MethodPost, "/v1/ops/events/stripe/"+impossible.ID+"/replay", "retry-impossible", "")
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	deadline := time.Now().Add(30 * time.Second)
	for w.Status(t, impossible.ID) != "poison" || w.Count(t, `SELECT count(*) FROM river_job
		WHERE args->>'event_id' = $1 AND finalized_at IS NULL`, impossible.ID) > 0 {
		// The inbox turns poison inside Work; River records the attempt's
		// error just after.
		require.False(t, time.Now().After(deadline), "replayed event never settled")
		time.Sleep(10 * time.Millisecond)
	}
	rec = call(http.MethodGet, "/v1/ops/poison", "", "")
	page = decodeJSON[poisonPage](t, rec)
	require.Len(t, page.Events, 1)
	require.Equal(t, impossible.ID, page.Events[0].EventID)
	require.Equal(t, 2, page.Events[0].Attempts, "attempts keep counting across replays")
	require.Len(t, page.Events[0].Errors, 2, "one error per job")
	require.NotEqual(t, page.Events[0].Errors[0].JobID, page.Events[0].Errors[1].JobID)

	rec = call(http.MethodPost, "/v1/ops/events/stripe/"+impossible.ID+"/discard", "discard-impossible",
		`{"reason":"currency zzz is a sandbox artefact"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "discarded", w.Status(t, impossible.ID))
	rec = call(http.MethodGet, "/v1/ops/poison", "", "")
	require.Empty(t, decodeJSON[poisonPage](t, rec).Events)

	rec = call(http.MethodGet, "/v1/ops/audit?limit=100", "", "")
	audit := decodeJSON[auditPage](t, rec)
	var actions []string
	for _, a := range audit.Entries {
		actions = append(actions, a.Action)
	}
	want := []string{"discard", "replay"}
	for range paid {
		want = append(want, "bulk_replay")
	}
	require.Equal(t, want, actions)
	require.Equal(t, "currency zzz is a sandbox artefact", *audit.Entries[0].Reason)
}
