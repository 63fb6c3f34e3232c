package api_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	striperef "github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

type reconBundle struct {
	world *worldtest.World
	sim   *stripesim.Sim
	echo  *echo.Echo
}

// setupReconciliation is the API on a world whose workers perform
// reconciliation runs against a simulator served over HTTP; opts change the
// workers' configuration further.
func setupReconciliation(t *testing.T, opts ...func(*jobs.Config)) *reconBundle {
	t.Helper()
	b := &reconBundle{sim: stripesim.New(stripesim.Config{Seed: 11, Now: time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)})}
	worker := &jobs.ReconcileWorker{}
	b.world = worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.Register = func(w *river.Workers) []*river.PeriodicJob {
			river.AddWorker(w, worker)
			return nil
		}
		for _, o := range opts {
			o(c)
		}
	}})
	srv := b.sim.Start(t)
	provider, err := striperef.NewAPI(striperef.APIConfig{APIKey: b.sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	worker.Runner = reconcile.New(reconcile.Config{
		Pool: b.world.Pool, Provider: provider, RecoveryWait: 10 * time.Second,
		Ingester: reconcile.IngesterFunc(func(ctx context.Context, payload []byte) (bool, error) {
			ev, err := striperef.DecodeEvent(payload)
			if err != nil {
				return false, err
			}
			return b.world.Ingester.Ingest(ctx, ev)
		}),
	})
	b.echo, _ = newAPI(t, api.Config{Pool: b.world.Pool, Jobs: b.world.Jobs,
		OpsTokens: []string{opsTok}, FinanceTokens: []string{financeTok}})
	return b
}

func (b *reconBundle) do(t *testing.T, method, path, token, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if token != "" {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+token)
	}
	if key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, key)
	}
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	return rec
}

func requireProblem(t *testing.T, rec *httptest.ResponseRecorder, status int) api.Problem {
	t.Helper()
	require.Equal(t, status, rec.Code, rec.Body.String())
	require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType))
	var p api.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Detail)
	return p
}

// waitCompleted polls the run until it is no longer running.
func (b *reconBundle) waitCompleted(t *testing.T, id int64) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec := b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d", id), financeTok, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var run map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &run))
		if run["status"] != "running" {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %d still running", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReconciliationRunThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupReconciliation(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 10000, Metadata: map[string]string{"order_id": "ord-1042"}})
	refund := b.sim.Refund(p, 2500)
	skipped := b.sim.Pay(stripesim.PayOpts{Amount: 4200, Metadata: map[string]string{"order_id": "ord-2042"}})
	radar := b.sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Amount: -75})
	other := b.sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Type: stripesim.TxnAdjustment, Amount: 300})
	for _, ev := range b.sim.EventsOf(skipped.ID) {
		b.sim.SkipEvent(ev.ID)
	}
	b.world.Apply(t, b.sim.Deliverable()...)

	rec := b.do(t, http.MethodPost, "/v1/reconciliation/runs", financeTok, "recon-1", `{"date":"2025-03-14"}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	var created map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &created))
	require.Len(t, created, 3, "exactly {id, date, status}: %s", rec.Body.String())
	require.Equal(t, "2025-03-14", created["date"])
	require.Equal(t, "running", created["status"])
	id := int64(created["id"].(float64))
	require.Equal(t, fmt.Sprintf("/v1/reconciliation/runs/%d", id), rec.Header().Get(echo.HeaderLocation))
	// The job was committed with the run.
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'reconcile' AND (args->>'run_id')::bigint = $1`, id))

	// The same key replays the answer and starts nothing.
	again := b.do(t, http.MethodPost, "/v1/reconciliation/runs", financeTok, "recon-1", `{"date":"2025-03-14"}`)
	require.Equal(t, http.StatusAccepted, again.Code)
	require.Equal(t, "true", again.Header().Get(api.HeaderIdempotentReplayed))
	require.JSONEq(t, rec.Body.String(), again.Body.String())

	run := b.waitCompleted(t, id)
	require.Equal(t, "completed", run["status"], run)
	for _, k := range []string{"id", "date", "status", "trigger", "requested_by", "started_at", "finished_at", "error",
		"counts", "summary", "currencies", "payouts", "recovered_events", "recovery", "timing_differences", "items"} {
		require.Contains(t, run, k)
	}
	require.Equal(t, map[string]any{
		"matched": 3.0, "amount_mismatch": 0.0, "currency_mismatch": 0.0,
		"missing_in_ledger": 1.0, "missing_at_provider": 0.0, "fee_posted": 3.0,
	}, run["summary"], "the skipped payment was recovered and matched; its fee, the charge's and the Radar fee were posted")
	require.Equal(t, 2.0, run["recovered_events"], "charge.succeeded and payment_intent.succeeded")
	require.Equal(t, "api", run["trigger"])

	items := run["items"].([]any)
	require.Len(t, items, 7)
	var adj map[string]any
	references := map[string]any{} // by ledger ref
	for _, raw := range items {
		it := raw.(map[string]any)
		require.Len(t, it, len(reconcile.CSVHeader), "%v", it)
		for _, k := range reconcile.CSVHeader {
			require.Contains(t, it, k)
		}
		if it["provider_txn_id"] == other.ID {
			adj = it
		}
		if ref, ok := it["ref"].(string); ok {
			references[ref] = it["reference"]
		}
	}
	require.Equal(t, "ord-1042", references[striperef.CaptureRef(p.ChargeID)], "the order of the capture's payment")
	require.Equal(t, "ord-1042", references[striperef.RefundRef(refund.ID)], "the refund's, the same payment's")
	require.Equal(t, "ord-2042", references[striperef.CaptureRef(skipped.ChargeID)], "a payment recovered by the run names its order too")
	require.Positive(t, adj["id"], "every item has its own id")
	require.Equal(t, map[string]any{"id": adj["id"], "status": "missing_in_ledger", "provider_txn_id": other.ID, "source_id": nil, "ref": nil,
		"type": "adjustment", "currency": "usd", "provider_amount": "3.00", "provider_fee": "0.00", "ledger_amount": nil,
		"presentment_currency": nil, "presentment_amount": nil, "exchange_rate": nil, "run_id": float64(id), "payment_id": nil,
		"resolution": nil, "note": nil, "resolved_by": nil, "resolved_at": nil, "adjustment_ref": nil, "reference": nil}, adj,
		"an adjustment of Stripe's own: no payment, open")

	// The CSV has the same items, in the same order, same columns.
	csvRec := b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d/items.csv", id), financeTok, "", "")
	require.Equal(t, http.StatusOK, csvRec.Code)
	require.True(t, strings.HasPrefix(csvRec.Header().Get(echo.HeaderContentType), "text/csv"), csvRec.Header().Get(echo.HeaderContentType))
	rows, err := csv.NewReader(csvRec.Body).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"status", "provider_txn_id", "source_id", "ref", "type", "currency", "provider_amount", "provider_fee", "ledger_amount",
		"presentment_currency", "presentment_amount", "exchange_rate",
		"id", "run_id", "payment_id", "resolution", "note", "resolved_by", "resolved_at", "adjustment_ref", "reference"}, rows[0])
	require.Len(t, rows, len(items)+1)
	for i, raw := range items {
		it := raw.(map[string]any)
		for j, col := range rows[0] {
			want, _ := it[col].(string)
			if n, ok := it[col].(float64); ok {
				want = strconv.FormatFloat(n, 'f', -1, 64)
			}
			require.Equal(t, want, rows[i+1][j], "row %d %s", i+1, col)
		}
	}
	var sawRadar bool
	for _, r := range rows[1:] {
		if r[1] == radar.ID {
			sawRadar = true
			require.Equal(t, []string{"fee_posted", radar.ID, "", "stripe:fee:" + radar.ID, "stripe_fee", "usd", "-0.75", "0.00", "-0.75", "", "", ""}, r[:12])
			require.Equal(t, []string{fmt.Sprint(id), "", "", "", "", "", "", ""}, r[13:], "a fee of Stripe's own: no payment, no order; not an exception")
		}
	}
	require.True(t, sawRadar)

	// A re-run is a new run; the first stays as it was.
	rec2 := b.do(t, http.MethodPost, "/v1/reconciliation/runs", financeTok, "recon-2", `{"date":"2025-03-14"}`)
	require.Equal(t, http.StatusAccepted, rec2.Code, rec2.Body.String())
	var created2 map[string]any
	require.NoError(t, json.Unmarshal(rec2.Body.Bytes(), &created2))
	id2 := int64(created2["id"].(float64))
	require.NotEqual(t, id, id2)
	run2 := b.waitCompleted(t, id2)
	require.Equal(t, 6.0, run2["summary"].(map[string]any)["matched"])
	require.Equal(t, 0.0, run2["summary"].(map[string]any)["fee_posted"])
	first := b.waitCompleted(t, id)
	require.Equal(t, run["summary"], first["summary"])
	require.Equal(t, run["items"], first["items"])
}

func TestReconciliationAPIErrors(t *testing.T) {
	t.Parallel()
	b := setupReconciliation(t)
	post := func(key, body string) *httptest.ResponseRecorder {
		return b.do(t, http.MethodPost, "/v1/reconciliation/runs", financeTok, key, body)
	}
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	for i, body := range []string{`{"date":"2025-13-01"}`, `{"date":"14/03/2025"}`, `{"date":""}`, `{}`, `{"date":"` + tomorrow + `"}`,
		`not json`, `{"date":"2025-03-14","extra":1}`, `{"date":20250314}`} {
		p := requireProblem(t, post(fmt.Sprintf("bad-%d", i), body), http.StatusBadRequest)
		require.Equal(t, "Bad request", p.Title, body)
	}
	requireProblem(t, post("", `{"date":"2025-03-14"}`), http.StatusBadRequest) // no Idempotency-Key
	requireProblem(t, b.do(t, http.MethodPost, "/v1/reconciliation/runs", opsTok, "k", `{"date":"2025-03-14"}`), http.StatusForbidden)
	requireProblem(t, b.do(t, http.MethodPost, "/v1/reconciliation/runs", "", "k", `{"date":"2025-03-14"}`), http.StatusUnauthorized)
	// Ops read runs (they see everything), but only finance starts them.
	requireProblem(t, b.do(t, http.MethodGet, "/v1/reconciliation/runs/999", opsTok, "", ""), http.StatusNotFound)
	requireProblem(t, b.do(t, http.MethodGet, "/v1/reconciliation/runs/999/items.csv", opsTok, "", ""), http.StatusNotFound)
	requireProblem(t, b.do(t, http.MethodGet, "/v1/reconciliation/runs/999", financeTok, "", ""), http.StatusNotFound)
	requireProblem(t, b.do(t, http.MethodGet, "/v1/reconciliation/runs/abc", financeTok, "", ""), http.StatusNotFound)
	requireProblem(t, b.do(t, http.MethodGet, "/v1/reconciliation/runs/999/items.csv", financeTok, "", ""), http.StatusNotFound)
	require.Zero(t, b.world.Count(t, `SELECT count(*) FROM reconciliation_runs`), "no refused request left a run")
	require.Zero(t, b.world.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'reconcile'`))
}
