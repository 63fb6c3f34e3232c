package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/reconcile"
)

func noteAndStore(t *testing.T, q interface {
	Begin(context.Context) (pgx.Tx, error)
}, fileName string, batch int64, body []byte) reconcile.SettlementReport {
	t.Helper()
	ctx := context.Background()
	tx, err := q.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // after the commit
	noted, err := reconcile.NoteReportTx(ctx, tx, reconcile.ReportNotice{Provider: adyen.Name, FileName: fileName,
		URL: "https://ca-test.adyen.com/reports/download/MerchantAccount/M/" + fileName, Batch: batch, EventID: fileName + ":REPORT_AVAILABLE:true"})
	require.NoError(t, err)
	require.True(t, noted)
	r, stored, err := reconcile.StoreReportTx(ctx, tx, adyen.Name, fileName, body)
	require.NoError(t, err)
	require.True(t, stored)
	require.NoError(t, tx.Commit(ctx))
	return r
}

// TestScheduledRunIsOncePerBatch: a provider's batch has one scheduled run
// whoever asks and however often, apart from days and other batches.
func TestScheduledRunIsOncePerBatch(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	first, created, err := reconcile.ScheduledRun(ctx, pool, reconcile.BatchScope(adyen.Name, 12))
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, int64(12), first.Batch)
	require.True(t, first.Date.IsZero())
	again, created, err := reconcile.ScheduledRun(ctx, pool, reconcile.BatchScope(adyen.Name, 12))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)
	_, created, err = reconcile.ScheduledRun(ctx, pool, reconcile.BatchScope(adyen.Name, 13))
	require.NoError(t, err)
	require.True(t, created, "another batch")
	_, created, err = reconcile.ScheduledRun(ctx, pool, reconcile.BatchScope("other", 12))
	require.NoError(t, err)
	require.True(t, created, "another provider's batch 12")
	_, created, err = reconcile.ScheduledRun(ctx, pool, reconcile.DayScope("stripe", time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)))
	require.NoError(t, err)
	require.True(t, created, "a day is not a batch")
	_, err = reconcile.CreateRunTx(ctx, pool, reconcile.BatchScope(adyen.Name, 12), reconcile.TriggerAPI, "finance")
	require.NoError(t, err, "on-demand runs of a batch may repeat")

	_, err = pool.Exec(ctx, `INSERT INTO reconciliation_runs (provider, date, batch, trigger) VALUES ('adyen', '2026-03-02', 4, 'api')`)
	require.Error(t, err, "a run is of a day or of a batch, not both")
	_, err = pool.Exec(ctx, `UPDATE reconciliation_runs SET batch = 14 WHERE id = $1`, first.ID)
	require.Error(t, err, "what a run reconciles never changes")
}

// TestBatchRunReadsItsStoredReport: a batch's run reads the report kept
// for it; without one, or with a file that cannot be read, the run cannot
// be performed (no retry helps) and says why.
func TestBatchRunReadsItsStoredReport(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	runner := reconcile.New(reconcile.Config{Pool: pool, Batches: adyen.Settlements{}})

	run, err := runner.Run(ctx, reconcile.BatchScope(adyen.Name, 2), reconcile.TriggerCLI, "cli")
	require.ErrorIs(t, err, reconcile.ErrCannotRun)
	require.ErrorIs(t, err, reconcile.ErrReportNotFound)
	require.Equal(t, reconcile.RunFailed, run.Status)

	noteAndStore(t, pool, "settlement_detail_report_batch_3.csv", 3, []byte("Company Account,Type\nC,Settled\n"))
	run, err = runner.Run(ctx, reconcile.BatchScope(adyen.Name, 3), reconcile.TriggerCLI, "cli")
	require.ErrorIs(t, err, reconcile.ErrCannotRun)
	require.ErrorIs(t, err, adyen.ErrInvalidReport)
	require.Contains(t, run.Error, `settlement_detail_report_batch_3.csv: invalid settlement report: the header has no "Psp Reference" column`)

	_, err = reconcile.New(reconcile.Config{Pool: pool}).Run(ctx, reconcile.BatchScope(adyen.Name, 3), reconcile.TriggerCLI, "cli")
	require.ErrorIs(t, err, reconcile.ErrCannotRun, "a server that reads no batches")

	sim := adyensim.New(adyensim.Config{Seed: 9, Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	b := sim.NewBatch(4)
	b.UnknownPayment(1000, "EUR", adyensim.Fees{})
	rep := b.Close()
	kept := noteAndStore(t, pool, rep.FileName, 4, rep.CSV)
	run, err = runner.Run(ctx, reconcile.BatchScope(adyen.Name, 4), reconcile.TriggerCLI, "cli")
	require.NoError(t, err)
	require.Equal(t, &reconcile.StatementFile{FileName: rep.FileName, SHA256: kept.SHA256, Size: int64(len(rep.CSV)),
		DownloadedAt: kept.DownloadedAt.UTC()}, run.Report.Statement)
	require.Equal(t, 1, run.Report.Summary[reconcile.StatusMissingInLedger])
	require.Equal(t, 1, run.Report.Summary[reconcile.StatusMatched], "the payout, booked by the run")

	// Downstream is told which provider's batch finished, not a day.
	msgs, err := outbox.OfAggregate(ctx, pool, outbox.AggregateReconciliationRun, fmt.Sprint(run.ID))
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	var body struct {
		Data struct {
			Run map[string]any `json:"run"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(msgs[0].Body, &body))
	require.Equal(t, "adyen", body.Data.Run["provider"])
	require.Equal(t, 4.0, body.Data.Run["batch"])
	require.NotContains(t, body.Data.Run, "date")
	require.Equal(t, "completed", body.Data.Run["status"])
}

// TestStoredReportNeverChanges: a report is kept once per file name, as
// first downloaded; the database refuses to change or delete it.
func TestStoredReportNeverChanges(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	first := noteAndStore(t, pool, "settlement_detail_report_batch_6.csv", 6, []byte("first"))

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		noted, err := reconcile.NoteReportTx(ctx, tx, reconcile.ReportNotice{Provider: adyen.Name,
			FileName: "settlement_detail_report_batch_6.csv", URL: "https://ca-live.adyen.com/elsewhere", Batch: 6, EventID: "again"})
		require.NoError(t, err)
		require.False(t, noted, "a stored report is not downloaded again")
		r, stored, err := reconcile.StoreReportTx(ctx, tx, adyen.Name, "settlement_detail_report_batch_6.csv", []byte("second"))
		require.NoError(t, err)
		require.False(t, stored)
		require.Equal(t, []byte("first"), r.Body)
		return nil
	}))
	got, err := reconcile.GetReport(ctx, pool, adyen.Name, "settlement_detail_report_batch_6.csv")
	require.NoError(t, err)
	require.Equal(t, first.SHA256, got.SHA256)
	require.Equal(t, first.URL, got.URL)
	require.Equal(t, "a7937b64b8caa58f03721bb6bacf5c78cb235febe0e70b1b84cd99541461a08e", got.SHA256, "sha256 of \"first\"")

	_, err = pool.Exec(ctx, `UPDATE settlement_reports SET body = 'x' WHERE batch = 6`)
	require.ErrorContains(t, err, "its file never changes")
	_, err = pool.Exec(ctx, `DELETE FROM settlement_reports`)
	require.ErrorContains(t, err, "settlement reports are kept")
}
