package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/reconcile"
)

// TestBatchRunsInBrowser: an Adyen settlement batch's run is listed beside
// Stripe's days with its provider and batch, filtered by provider, shown
// with the report it read, and run again from its form.
func TestBatchRunsInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bg := context.Background()
	sim := adyensim.New(adyensim.Config{Seed: 12, Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	batch := sim.NewBatch(12)
	batch.UnknownPayment(2500, "EUR", adyensim.Fees{Commission: 30})
	report := batch.Close()
	require.NoError(t, pgx.BeginFunc(bg, b.pool, func(tx pgx.Tx) error {
		if _, err := reconcile.NoteReportTx(bg, tx, reconcile.ReportNotice{Provider: adyen.Name, FileName: report.FileName,
			URL: sim.ReportURL(report.FileName), Batch: 12, EventID: report.FileName + ":REPORT_AVAILABLE:true"}); err != nil {
			return err
		}
		_, _, err := reconcile.StoreReportTx(bg, tx, adyen.Name, report.FileName, report.CSV)
		return err
	}))
	batchRun, err := reconcile.New(reconcile.Config{Pool: b.pool, Batches: adyen.Settlements{}}).
		Run(bg, reconcile.BatchScope(adyen.Name, 12), reconcile.TriggerScheduled, "scheduler")
	require.NoError(t, err)
	dayRun, err := reconcile.CreateRunTx(bg, b.pool, reconcile.DayScope("stripe", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)),
		reconcile.TriggerAPI, "finance")
	require.NoError(t, err)

	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, financeTok)
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/reconciliation"), chromedp.WaitVisible(chromedp.CSS("#runs")))
	require.Equal(t, []string{"stripe", "adyen"},
		eval[[]string](t, ctx, `[...document.querySelectorAll('#runs tr.run-row')].map(r => r.dataset.provider)`), "newest first")
	require.Equal(t, "batch 12", textOf(t, ctx, fmt.Sprintf(`#runs tr.run-row[data-run="%d"] td.run-scope`, batchRun.ID)))
	require.Equal(t, "2026-03-01", textOf(t, ctx, fmt.Sprintf(`#runs tr.run-row[data-run="%d"] td.run-scope`, dayRun.ID)))
	require.Contains(t, textOf(t, ctx, fmt.Sprintf(`#runs tr.run-row[data-run="%d"] td.counts`, batchRun.ID)), "missing_in_ledger 1")

	run(t, ctx,
		chromedp.SetValue(chromedp.CSS("#runs-provider"), "adyen"),
		chromedp.Click(chromedp.CSS("#run-filters button")),
		chromedp.WaitVisible(chromedp.CSS(`#run-filters a[href="/console/reconciliation"]`)),
	)
	require.Equal(t, []string{"adyen"},
		eval[[]string](t, ctx, `[...document.querySelectorAll('#runs tr.run-row')].map(r => r.dataset.provider)`))

	run(t, ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#runs tr.run-row[data-run="%d"] a.id`, batchRun.ID))))
	require.Equal(t, "completed", textOf(t, ctx, "#run-status"))
	require.Contains(t, words(textOf(t, ctx, "h1")), "adyen batch 12")
	require.Contains(t, textOf(t, ctx, "#run-statement"), report.FileName)
	require.Contains(t, textOf(t, ctx, "#run-statement"), batchRun.Report.Statement.SHA256)

	// Finance runs the stored batch again.
	run(t, ctx,
		chromedp.Navigate(b.srv.URL+"/console/reconciliation"),
		chromedp.SetValue(chromedp.CSS("#run-batch"), "12"),
		chromedp.Click(chromedp.CSS("#start-batch-run button")),
	)
	require.Equal(t, "running", textOf(t, ctx, "#run-status"), "no worker runs in this test: the run waits")
	require.Contains(t, textOf(t, ctx, ".flash"), "for adyen batch 12 started")
	require.Contains(t, words(textOf(t, ctx, "h1")), "adyen batch 12")

	// A batch without a stored report is refused, with the API's reason.
	run(t, ctx,
		chromedp.Navigate(b.srv.URL+"/console/reconciliation"),
		chromedp.SetValue(chromedp.CSS("#run-batch"), "13"),
		chromedp.Click(chromedp.CSS("#start-batch-run button")),
		chromedp.WaitVisible(chromedp.CSS(".flash.error")),
	)
	require.Contains(t, textOf(t, ctx, ".flash.error"), "settlement report")
}

// words is text with its runs of white space (the layout's line breaks
// between elements) as single spaces.
func words(text string) string { return strings.Join(strings.Fields(text), " ") }
