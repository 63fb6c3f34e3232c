package api_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/reconcile"
)

// setupBatches is the API on a world whose reconcile worker reads Adyen's
// settlement batches, with batch 7's report stored (a payment paygate
// never heard of, a fee apart, the payout) and reconciled once.
func setupBatches(t *testing.T) (*reconBundle, reconcile.Run) {
	t.Helper()
	b := &reconBundle{}
	worker := &jobs.ReconcileWorker{}
	b.world = worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.Register = func(w *river.Workers) []*river.PeriodicJob {
			river.AddWorker(w, worker)
			return nil
		}
	}})
	runner := reconcile.New(reconcile.Config{Pool: b.world.Pool, Batches: adyen.Settlements{}})
	worker.Runner = runner
	b.echo, _ = newAPI(t, api.Config{Pool: b.world.Pool, Jobs: b.world.Jobs,
		OpsTokens: []string{opsTok}, FinanceTokens: []string{financeTok}})

	sim := adyensim.New(adyensim.Config{Seed: 7, Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	batch := sim.NewBatch(7)
	batch.UnknownPayment(2500, "EUR", adyensim.Fees{Commission: 30})
	batch.Fee("EUR", 120, "Transaction Fees February 2026")
	report := batch.Close()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.world.Pool, func(tx pgx.Tx) error {
		if _, err := reconcile.NoteReportTx(ctx, tx, reconcile.ReportNotice{Provider: adyen.Name, FileName: report.FileName,
			URL: sim.ReportURL(report.FileName), Batch: 7, EventID: report.FileName + ":REPORT_AVAILABLE:true"}); err != nil {
			return err
		}
		_, _, err := reconcile.StoreReportTx(ctx, tx, adyen.Name, report.FileName, report.CSV)
		return err
	}))
	run, err := runner.Run(ctx, reconcile.BatchScope(adyen.Name, 7), reconcile.TriggerCLI, "cli")
	require.NoError(t, err)
	return b, run
}

func decode(t *testing.T, body string) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	return v
}

// TestBatchRunsThroughTheAPI: an Adyen batch's run is listed beside
// Stripe's days with its provider and batch (no date), filtered by
// provider and batch, with the same summary, items and CSV; finance can
// run a stored batch again, and only a stored one.
func TestBatchRunsThroughTheAPI(t *testing.T) {
	t.Parallel()
	b, run := setupBatches(t)
	day, err := reconcile.CreateRunTx(context.Background(), b.world.Pool,
		reconcile.DayScope("stripe", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)), reconcile.TriggerCLI, "cli")
	require.NoError(t, err)

	list := func(query string) []any {
		t.Helper()
		rec := b.do(t, http.MethodGet, "/v1/reconciliation/runs"+query, financeTok, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return decode(t, rec.Body.String())["runs"].([]any)
	}
	all := list("")
	require.Len(t, all, 2)
	adyenRun, stripeRun := all[1].(map[string]any), all[0].(map[string]any)
	require.Equal(t, "adyen", adyenRun["provider"])
	require.Equal(t, 7.0, adyenRun["batch"])
	require.Nil(t, adyenRun["date"])
	require.Equal(t, "stripe", stripeRun["provider"])
	require.Equal(t, "2026-03-01", stripeRun["date"])
	require.Nil(t, stripeRun["batch"])
	require.Equal(t, float64(day.ID), stripeRun["id"])

	only := list("?provider=adyen")
	require.Len(t, only, 1)
	require.Equal(t, float64(run.ID), only[0].(map[string]any)["id"])
	require.Len(t, list("?provider=adyen&batch=7"), 1)
	require.Empty(t, list("?batch=8"))
	require.Len(t, list("?provider=stripe"), 1)
	requireProblem(t, b.do(t, http.MethodGet, "/v1/reconciliation/runs?batch=0", financeTok, "", ""), http.StatusBadRequest)

	rec := b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d", run.ID), financeTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	got := decode(t, rec.Body.String())
	require.Equal(t, map[string]any{"matched": 1.0, "amount_mismatch": 0.0, "currency_mismatch": 0.0,
		"missing_in_ledger": 1.0, "missing_at_provider": 0.0, "fee_posted": 2.0}, got["summary"])
	statement := got["statement"].(map[string]any)
	require.Equal(t, "settlement_detail_report_batch_7.csv", statement["file_name"])
	require.Len(t, statement["sha256"], 64)
	require.Len(t, got["items"], 4)

	csvRec := b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d/items.csv", run.ID), financeTok, "", "")
	require.Equal(t, http.StatusOK, csvRec.Code)
	require.Contains(t, csvRec.Header().Get("Content-Disposition"), fmt.Sprintf("reconciliation-adyen-batch-7-run-%d.csv", run.ID))
	rows, err := csv.NewReader(csvRec.Body).ReadAll()
	require.NoError(t, err)
	require.Equal(t, reconcile.CSVHeader, rows[0])
	require.Len(t, rows, 5)
	require.Equal(t, "missing_in_ledger", rows[1][0])
	require.Equal(t, "Settled", rows[1][4])

	// A re-run of the stored batch: finance's.
	created := b.do(t, http.MethodPost, "/v1/reconciliation/runs", financeTok, "batch-7", `{"provider":"adyen","batch":7}`)
	require.Equal(t, http.StatusAccepted, created.Code, created.Body.String())
	v := decode(t, created.Body.String())
	require.Equal(t, map[string]any{"id": v["id"], "provider": "adyen", "batch": 7.0, "status": "running"}, v)
	done := b.waitCompleted(t, int64(v["id"].(float64)))
	require.Equal(t, "completed", done["status"], done)
	require.Equal(t, "api", done["trigger"])
	require.Equal(t, 3.0, done["summary"].(map[string]any)["matched"], "the fees posted by the first run are matched")

	p := requireProblem(t, b.do(t, http.MethodPost, "/v1/reconciliation/runs", financeTok, "batch-8", `{"provider":"adyen","batch":8}`),
		http.StatusUnprocessableEntity)
	require.Equal(t, "Settlement report not stored", p.Title)
	for i, body := range []string{`{"batch":7}`, `{"provider":"stripe","batch":7}`, `{"provider":"adyen","date":"2026-03-01"}`,
		`{"provider":"adyen","batch":0}`, `{"provider":"adyen","batch":7,"date":"2026-03-01"}`, `{"provider":"adyen"}`} {
		p := requireProblem(t, b.do(t, http.MethodPost, "/v1/reconciliation/runs", financeTok, fmt.Sprintf("bad-%d", i), body),
			http.StatusBadRequest)
		require.True(t, strings.Contains(p.Detail, "batch") || strings.Contains(p.Detail, "date"), p.Detail)
	}
	require.Equal(t, 3, b.world.Count(t, `SELECT count(*) FROM reconciliation_runs`), "nothing recorded for a refused request")
}
