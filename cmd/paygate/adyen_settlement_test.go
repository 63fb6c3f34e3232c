package main

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/reconcile"
)

func TestAdyenReportConfig(t *testing.T) {
	t.Parallel()
	for name, env := range map[string]map[string]string{
		"user without password": {"PAYGATE_ADYEN_REPORT_USER": "report@Company.Shop"},
		"password without user": {"PAYGATE_ADYEN_REPORT_PASSWORD": "sk_live_oops"},
		"a URL for a host":      {"PAYGATE_ADYEN_REPORT_HOSTS": "https://ca-live.adyen.com"},
		"a port out of range":   {"PAYGATE_ADYEN_REPORT_HOSTS": "ca-live.adyen.com:70000"},
	} {
		_, err := loadConfig(func(k string) string { return env[k] })
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), "sk_live_oops", "a misplaced secret is not echoed")
	}
	cfg, err := loadConfig(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, []string{"ca-test.adyen.com", "ca-live.adyen.com"}, cfg.AdyenReportHosts)
	cfg, err = loadConfig(func(k string) string {
		return map[string]string{"PAYGATE_ADYEN_REPORT_USER": "report@Company.Shop", "PAYGATE_ADYEN_REPORT_PASSWORD": "pw",
			"PAYGATE_ADYEN_REPORT_HOSTS": "ca-live.adyen.com, 127.0.0.1:8443"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, []string{"ca-live.adyen.com", "127.0.0.1:8443"}, cfg.AdyenReportHosts)
	require.Equal(t, "report@Company.Shop", cfg.AdyenReportUser)
}

// TestServeReconcilesAdyenBatch: the real binary, configured from the
// environment as docs/providers.md says, books an Adyen payment from its
// webhooks, downloads the settlement report REPORT_AVAILABLE announces
// from the allowed host with the report user, and lists the batch's run
// beside Stripe's.
func TestServeReconcilesAdyenBatch(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	sim := adyensim.New(adyensim.Config{Seed: 21, Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	reports := sim.StartReports(t)
	host, err := url.Parse(reports.URL)
	require.NoError(t, err)
	user, password := sim.ReportUser()
	srv := startServer(t, dbURL,
		"PAYGATE_ADYEN_HMAC_KEYS="+sim.HMACKeyHex(),
		"PAYGATE_ADYEN_REPORT_USER="+user,
		"PAYGATE_ADYEN_REPORT_PASSWORD="+password,
		"PAYGATE_ADYEN_REPORT_HOSTS=ca-live.adyen.com,"+host.Host,
	)
	webhooks := "http://" + srv.addr + "/webhooks/adyen"
	deliver := func(items ...adyensim.Item) {
		t.Helper()
		res, err := sim.Deliver(context.Background(), webhooks, "", items...)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
	}
	psp, auth := sim.Authorise(10000, "EUR", "order-1", true)
	capture, captured := sim.Capture(psp, 10000)
	deliver(auth, captured)
	srv.awaitProcessed(t, 2)

	batch := sim.NewBatch(31)
	batch.Settled(capture, adyensim.Fees{Commission: 190})
	report := batch.Close()
	deliver(sim.ReportAvailable(report.FileName))

	var page struct {
		Runs []struct {
			ID       int64          `json:"id"`
			Provider string         `json:"provider"`
			Date     *string        `json:"date"`
			Batch    *int64         `json:"batch"`
			Status   string         `json:"status"`
			Summary  map[string]int `json:"summary"`
		} `json:"runs"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		require.Equal(t, http.StatusOK, getJSON(t, "http://"+srv.addr+"/v1/reconciliation/runs?provider=adyen", testFinance, &page))
		if len(page.Runs) == 1 && page.Runs[0].Status != "running" {
			break
		}
		require.False(t, time.Now().After(deadline), "batch 31 not reconciled: %+v\n%s", page, srv.logs.String())
		time.Sleep(100 * time.Millisecond)
	}
	r := page.Runs[0]
	require.Equal(t, "completed", r.Status)
	require.Equal(t, "adyen", r.Provider)
	require.Nil(t, r.Date)
	require.Equal(t, int64(31), *r.Batch)
	require.Equal(t, 2, r.Summary["matched"], "the capture and the payout")
	require.Equal(t, 1, r.Summary["fee_posted"])
	require.Equal(t, 1, sim.ReportDownloads(report.FileName))

	// docs/finance.md's example, as written, against this server.
	script := docBlock(t, "docs/finance.md", "runs?provider=adyen")
	script = strings.ReplaceAll(script, "127.0.0.1:8080", srv.addr)
	script = strings.ReplaceAll(script, "dev-finance-token", testFinance)
	script = strings.ReplaceAll(script, "bin/paygate ", paygateBinary(t)+" ")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "docs/finance.md's example:\n%s", out)
	require.Contains(t, string(out), `"provider": "adyen"`)
	require.Contains(t, string(out), `"batch": 31`)
	require.Contains(t, string(out), `"status": "running"`, "the re-run requested")
	require.Contains(t, string(out), "of adyen settlement batch 31: completed", "the command's run")
	require.NotContains(t, srv.logs.String(), password, "the report user's password is never logged")
}

// TestReconcileCommandBatch: `paygate reconcile --batch N` reconciles an
// Adyen batch again from its stored report, and says so when none is
// stored.
func TestReconcileCommandBatch(t *testing.T) {
	pool, dbURL := testdb.NewWithURL(t)
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("PAYGATE_STRIPE_API_KEY", "")
	sim := adyensim.New(adyensim.Config{Seed: 4, Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	batch := sim.NewBatch(4)
	batch.UnknownPayment(700, "EUR", adyensim.Fees{Commission: 10})
	report := batch.Close()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := reconcile.NoteReportTx(ctx, tx, reconcile.ReportNotice{Provider: adyen.Name, FileName: report.FileName,
			URL: sim.ReportURL(report.FileName), Batch: 4, EventID: report.FileName + ":REPORT_AVAILABLE:true"}); err != nil {
			return err
		}
		_, _, err := reconcile.StoreReportTx(ctx, tx, adyen.Name, report.FileName, report.CSV)
		return err
	}))

	out, _, err := runReconcile(t, "--batch", "4")
	require.NoError(t, err, "no Stripe key is needed for a stored batch")
	for _, want := range []string{
		"Reconciliation run 1 of adyen settlement batch 4: completed",
		"report " + report.FileName,
		"missing_in_ledger  1", "fee_posted  1", "matched  1",
	} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "Recovered events", "a batch has no events to recover")

	_, _, err = runReconcile(t, "--batch", "5")
	require.ErrorIs(t, err, reconcile.ErrCannotRun)
	require.ErrorContains(t, err, "settlement report not found")
	var ue usageError
	_, _, err = runReconcile(t, "--batch", "x")
	require.ErrorAs(t, err, &ue)
	_, _, err = runReconcile(t, "--batch", "4", "--date", "2026-03-01")
	require.ErrorAs(t, err, &ue)
	require.True(t, strings.Contains(err.Error(), "not both"), err.Error())
}
