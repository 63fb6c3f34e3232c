package jobs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/reconcile"
)

// settlementBundle is Adyen's settlement batches end to end: the
// simulator's signed webhooks, read by paygate's receiver, book the
// payments; its REPORT_AVAILABLE makes the download_report worker fetch
// the batch's report from the simulator's report host with paygate's
// report client, and the reconcile worker reconcile the batch.
type settlementBundle struct {
	sim      *adyensim.Sim
	world    *worldtest.World
	receiver *adyen.Receiver
	host     string // the simulator's report host, host:port
}

// setupSettlement starts the simulator's report host and a world whose
// report client may fetch from hosts (the report host's own, named by
// address, when none is given).
func setupSettlement(t *testing.T, hosts ...string) *settlementBundle {
	t.Helper()
	sim := adyensim.New(adyensim.Config{Seed: 28, Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	srv := sim.StartReports(t)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	b := &settlementBundle{sim: sim, host: u.Host}
	if len(hosts) == 0 {
		hosts = []string{u.Host}
	}
	user, password := sim.ReportUser()
	client, err := adyen.NewReportClient(adyen.ReportClientConfig{User: user, Password: password, Hosts: hosts,
		PublicAddress: delivery.PublicAddress})
	require.NoError(t, err)

	reconciler := &jobs.ReconcileWorker{}
	b.world = worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.Email.OpsEmail = "ops@example.test"
		c.ReportDownloaders = map[string]jobs.ReportDownloader{adyen.Name: client}
		c.Register = func(w *river.Workers) []*river.PeriodicJob {
			river.AddWorker(w, reconciler)
			return nil
		}
	}})
	// The worker is registered before the pool exists; it gets its runner
	// before any job can reach it.
	reconciler.Runner = reconcile.New(reconcile.Config{Pool: b.world.Pool, Batches: adyen.Settlements{}})
	b.receiver, err = adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{sim.HMACKey()}})
	require.NoError(t, err)
	return b
}

// apply delivers items as Adyen's webhooks, through paygate's receiver,
// and waits for them to be applied.
func (b *settlementBundle) apply(t *testing.T, items ...adyensim.Item) {
	t.Helper()
	var events []provider.Event
	for _, it := range items {
		evs, err := b.receiver.Receive(http.Header{}, b.sim.Batch(false, it), b.sim.Now())
		require.NoError(t, err)
		events = append(events, evs...)
	}
	b.world.ApplyEvents(t, events...)
}

// pay authorises and captures value of currency, books both, and returns
// the payment's and the capture's pspReferences.
func (b *settlementBundle) pay(t *testing.T, value int64, currency string) (payment, capture string) {
	t.Helper()
	psp, auth := b.sim.Authorise(value, currency, "order-"+currency, true)
	capturePSP, captured := b.sim.Capture(psp, value)
	b.apply(t, auth, captured)
	return psp, capturePSP
}

// quiet waits until no download_report or reconcile job is left to work.
func (b *settlementBundle) quiet(t *testing.T) {
	t.Helper()
	waitFor(t, "report and reconcile jobs to finish", func() bool {
		return b.world.Count(t, `SELECT count(*) FROM river_job WHERE kind IN ('download_report', 'reconcile')
			AND state NOT IN ('completed', 'cancelled', 'discarded')`) == 0
	})
}

// batchRun waits for the completed run of batch and returns it with its
// items.
func (b *settlementBundle) batchRun(t *testing.T, batch int) (reconcile.Run, []reconcile.Item) {
	t.Helper()
	var id int64
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := b.world.Pool.QueryRow(context.Background(), `SELECT id FROM reconciliation_runs
			WHERE provider = 'adyen' AND batch = $1 AND status <> 'running'`, batch).Scan(&id)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		require.False(t, time.Now().After(deadline), "batch %d not reconciled after 60s", batch)
		time.Sleep(20 * time.Millisecond)
	}
	run, err := reconcile.GetRun(context.Background(), b.world.Pool, id)
	require.NoError(t, err)
	require.Equal(t, reconcile.RunCompleted, run.Status, run.Error)
	items, err := reconcile.Items(context.Background(), b.world.Pool, id)
	require.NoError(t, err)
	return run, items
}

func itemByRef(t *testing.T, items []reconcile.Item, ref string) reconcile.Item {
	t.Helper()
	var found []reconcile.Item
	for _, it := range items {
		if it.Ref == ref {
			found = append(found, it)
		}
	}
	require.Len(t, found, 1, "one item %s in %v", ref, items)
	return found[0]
}

// TestAdyenSettlementBatchReconciled: a batch with a matched capture and
// refund, a capture Adyen reports for more than it moved, a payment paygate
// never heard of, a chargeback, a fee apart, and a payout per currency, one
// of which is not the sum of its batch. Its REPORT_AVAILABLE downloads the
// report once (after a failed attempt, retried), keeps it with its
// SHA-256, and reconciles the batch: every item status, the fees and the
// payouts posted once.
func TestAdyenSettlementBatchReconciled(t *testing.T) {
	t.Parallel()
	b := setupSettlement(t)
	sim := b.sim
	matchedPayment, matchedCapture := b.pay(t, 10000, "EUR")
	_, misstatedCapture := b.pay(t, 5000, "EUR")
	refundPSP, refunded := sim.Refund(matchedPayment, 2500, true)
	disputed, _ := b.pay(t, 7000, "EUR")
	disputePSP, chargeback := sim.Chargeback(disputed, 7000, "Lost")
	b.apply(t, refunded, chargeback)
	_, usdCapture := b.pay(t, 3000, "USD")

	sim.Advance(48 * time.Hour)
	batch := sim.NewBatch(12)
	batch.Settled(matchedCapture, adyensim.Fees{Markup: 30, SchemeFees: 10, Interchange: 120})
	batch.Settled(misstatedCapture, adyensim.Fees{Commission: 100})
	batch.Refunded(refundPSP, adyensim.Fees{})
	batch.Chargeback(disputePSP, adyensim.Fees{Commission: 750})
	unknown := batch.UnknownPayment(900, "EUR", adyensim.Fees{Commission: 20})
	batch.Fee("EUR", 199, "Transaction Fees February 2026")
	batch.Settled(usdCapture, adyensim.Fees{Commission: 60})
	batch.Misstate(misstatedCapture, 100)
	batch.MisstatePayout("USD", -5)
	report := batch.Close()

	sim.FailNextReportDownloads(1, http.StatusServiceUnavailable)
	b.apply(t, sim.ReportAvailable(report.FileName))
	run, items := b.batchRun(t, 12)

	require.Equal(t, "adyen", run.Provider)
	require.Equal(t, int64(12), run.Batch)
	require.True(t, run.Date.IsZero())
	require.Equal(t, reconcile.TriggerScheduled, run.Trigger)
	require.Equal(t, 1, sim.ReportDownloads(report.FileName), "downloaded once, after the failed attempt")
	require.Equal(t, 2, sim.ReportRequests())

	require.Equal(t, reconcile.StatusMatched, itemByRef(t, items, adyen.CaptureRef(matchedCapture)).Status)
	require.Equal(t, reconcile.StatusFeePosted, itemByRef(t, items, adyen.FeeRef(matchedCapture, "Settled")).Status)
	misstated := itemByRef(t, items, adyen.CaptureRef(misstatedCapture))
	require.Equal(t, reconcile.StatusAmountMismatch, misstated.Status)
	require.Equal(t, "51.00", misstated.ProviderAmount.StringFixed(2))
	require.Equal(t, "50.00", misstated.LedgerAmount.StringFixed(2))
	require.Equal(t, reconcile.StatusMatched, itemByRef(t, items, adyen.RefundRef(refundPSP)).Status)
	cb := itemByRef(t, items, adyen.ChargebackRef(disputePSP))
	require.Equal(t, reconcile.StatusMatched, cb.Status)
	require.Equal(t, "-70.00", cb.ProviderAmount.StringFixed(2))
	require.Equal(t, "7.50", cb.ProviderFee.StringFixed(2))
	require.Equal(t, reconcile.StatusFeePosted, itemByRef(t, items, adyen.FeeRef(disputePSP, "Chargeback")).Status)
	missing := itemByRef(t, items, adyen.CaptureRef(unknown.ModificationReference))
	require.Equal(t, reconcile.StatusMissingInLedger, missing.Status)
	require.Equal(t, unknown.PspReference, missing.ProviderTxnID)
	require.Equal(t, reconcile.StatusFeePosted, itemByRef(t, items, adyen.FeeRef(unknown.ModificationReference, "Settled")).Status)
	var feeRow reconcile.Item
	for _, it := range items {
		if it.Type == "Fee" {
			feeRow = it
		}
	}
	require.Equal(t, reconcile.StatusFeePosted, feeRow.Status, "a Fee row is posted as a fee")
	require.Equal(t, "-1.99", feeRow.ProviderAmount.StringFixed(2))

	eurPayout := itemByRef(t, items, adyen.PayoutRef(12, "eur"))
	require.Equal(t, reconcile.StatusMatched, eurPayout.Status, "the EUR payout is the sum of the EUR nets")
	usdPayout := itemByRef(t, items, adyen.PayoutRef(12, "usd"))
	require.Equal(t, reconcile.StatusAmountMismatch, usdPayout.Status, "the USD payout is 0.05 short of its nets")
	require.Equal(t, usdPayout.ProviderAmount.String(), usdPayout.LedgerAmount.String(), "posted as Adyen paid it")
	require.Len(t, run.Report.Payouts, 2)
	for _, p := range run.Report.Payouts {
		switch p.Currency {
		case "eur":
			require.Equal(t, "0.00", p.Difference)
			require.Equal(t, 6, p.SettledCount)
		case "usd":
			require.Equal(t, "29.40", p.SettledNet)
			require.Equal(t, "29.35", p.Amount)
			require.Equal(t, "0.05", p.Difference)
		}
	}
	require.Equal(t, map[reconcile.Status]int{
		reconcile.StatusMatched: 5, reconcile.StatusAmountMismatch: 2, reconcile.StatusCurrencyMismatch: 0,
		reconcile.StatusMissingInLedger: 1, reconcile.StatusMissingAtProvider: 0, reconcile.StatusFeePosted: 6,
	}, run.Report.Summary)

	sum := sha256.Sum256(report.CSV)
	stored, err := reconcile.GetReport(context.Background(), b.world.Pool, adyen.Name, report.FileName)
	require.NoError(t, err)
	require.Equal(t, reconcile.ReportStored, stored.Status)
	require.Equal(t, report.CSV, stored.Body, "the file is kept as downloaded")
	require.Equal(t, hex.EncodeToString(sum[:]), stored.SHA256)
	require.Equal(t, int64(len(report.CSV)), stored.Size)
	require.Equal(t, report.FileName, run.Report.Statement.FileName)
	require.Equal(t, stored.SHA256, run.Report.Statement.SHA256)

	ctx := context.Background()
	payout, err := ledger.TransactionByRef(ctx, b.world.Pool, adyen.PayoutRef(12, "eur"))
	require.NoError(t, err)
	require.Equal(t, ledger.KindPayout, payout.Kind)
	require.Equal(t, reconcile.PostedBy(run.ID), payout.EventID, "the ledger says which run booked it")
	fee, err := ledger.TransactionByRef(ctx, b.world.Pool, adyen.FeeRef(matchedCapture, "Settled"))
	require.NoError(t, err)
	require.Equal(t, "1.60", ledger.Format(fee.Amount(), "eur"))
	require.Equal(t, matchedPayment, fee.PaymentID, "the fee is the payment's")
	tb, err := ledger.TrialBalance(ctx, b.world.Pool)
	require.NoError(t, err)
	for _, c := range tb.Currencies {
		require.True(t, c.Balanced, "%s balances", c.Currency)
	}

	// A re-run of the batch (finance's, from the stored report) posts
	// nothing new and finds the fees and the payouts booked.
	rerun, err := reconciler(b).Run(ctx, reconcile.BatchScope(adyen.Name, 12), reconcile.TriggerCLI, "test")
	require.NoError(t, err)
	require.Equal(t, 0, rerun.Report.Summary[reconcile.StatusFeePosted])
	require.Equal(t, 11, rerun.Report.Summary[reconcile.StatusMatched])
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE ref = $1`, adyen.PayoutRef(12, "eur")))
}

func reconciler(b *settlementBundle) *reconcile.Runner {
	return reconcile.New(reconcile.Config{Pool: b.world.Pool, Batches: adyen.Settlements{}})
}

// TestAdyenReportNotifiedTwice: Adyen announces a report again (a
// redelivery, and an operator's replay of the event): the report is
// downloaded once and its batch reconciled once.
func TestAdyenReportNotifiedTwice(t *testing.T) {
	t.Parallel()
	b := setupSettlement(t)
	_, capture := b.pay(t, 4200, "EUR")
	batch := b.sim.NewBatch(3)
	batch.Settled(capture, adyensim.Fees{Commission: 42})
	report := batch.Close()

	announce := b.sim.ReportAvailable(report.FileName)
	b.apply(t, announce)
	b.batchRun(t, 3)
	b.apply(t, b.sim.Redeliver(announce))
	b.quiet(t)

	// The event replayed by ops: applied again, it announces nothing new.
	ctx := context.Background()
	eventID := adyen.EventID(adyen.Item{PspReference: announce.PspReference, EventCode: announce.EventCode, Success: announce.Success})
	require.NoError(t, pgx.BeginFunc(ctx, b.world.Pool, func(tx pgx.Tx) error {
		if _, err := inbox.ReplayTx(ctx, tx, adyen.Name, eventID); err != nil {
			return err
		}
		return b.world.Jobs.InsertProcessEventTx(ctx, tx, adyen.Name, eventID)
	}))
	b.world.Settle(t)
	b.quiet(t)

	require.Equal(t, 1, b.sim.ReportDownloads(report.FileName))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM reconciliation_runs WHERE provider = 'adyen' AND batch = 3`))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'download_report'`))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM settlement_reports`))
	ev, err := inbox.Get(ctx, b.world.Pool, adyen.Name, eventID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusProcessed, ev.Status)
}

// TestAdyenReportHostNotAllowed: a report announced on a host the
// configuration does not allow is never fetched nor retried: the report is
// refused with the reason, and the event that announced it is poison with
// the same reason for ops, who alone can replay it once the host is
// configured.
func TestAdyenReportHostNotAllowed(t *testing.T) {
	t.Parallel()
	b := setupSettlement(t, adyen.DefaultReportHosts...)
	_, capture := b.pay(t, 1000, "EUR")
	batch := b.sim.NewBatch(5)
	batch.Settled(capture, adyensim.Fees{})
	report := batch.Close()

	announce := b.sim.ReportAvailable(report.FileName)
	b.apply(t, announce)
	b.quiet(t)

	require.Zero(t, b.sim.ReportRequests(), "nothing fetched")
	ctx := context.Background()
	stored, err := reconcile.GetReport(ctx, b.world.Pool, adyen.Name, report.FileName)
	require.NoError(t, err)
	require.Equal(t, reconcile.ReportRefused, stored.Status)
	require.Nil(t, stored.Body)
	require.Contains(t, stored.Error, "host "+b.host+" is not in PAYGATE_ADYEN_REPORT_HOSTS")
	eventID := adyen.EventID(adyen.Item{PspReference: announce.PspReference, EventCode: announce.EventCode, Success: announce.Success})
	ev, err := inbox.Get(ctx, b.world.Pool, adyen.Name, eventID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusPoison, ev.Status)
	require.Equal(t, stored.Error, ev.LastError)
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM email_outbox WHERE kind = 'poison_alert'`))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'download_report' AND state = 'cancelled'`),
		"one attempt, no retry")
	require.Zero(t, b.world.Count(t, `SELECT count(*) FROM reconciliation_runs`))
}

// TestAdyenReportWithoutReportUser: a server without Adyen's report user
// refuses an announced report with that reason, and fetches nothing.
func TestAdyenReportWithoutReportUser(t *testing.T) {
	t.Parallel()
	sim := adyensim.New(adyensim.Config{Seed: 29})
	sim.StartReports(t)
	world := worldtest.New(t, nil)
	receiver, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{sim.HMACKey()}})
	require.NoError(t, err)
	announce := sim.ReportAvailable(adyensim.ReportFileName(8))
	events, err := receiver.Receive(http.Header{}, sim.Batch(false, announce), sim.Now())
	require.NoError(t, err)
	world.ApplyEvents(t, events...)
	waitFor(t, "the download to be refused", func() bool {
		return world.Count(t, `SELECT count(*) FROM settlement_reports WHERE status = 'refused'`) == 1
	})
	stored, err := reconcile.GetReport(context.Background(), world.Pool, adyen.Name, adyensim.ReportFileName(8))
	require.NoError(t, err)
	require.Contains(t, stored.Error, "no report download is configured for adyen")
	require.Zero(t, sim.ReportRequests())
}
