package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
	"github.com/paygate/paygate/webhook"
)

// progressOut receives the reconcile command's progress lines.
var progressOut io.Writer = os.Stderr

// cmdReconcile runs one day's reconciliation (Stripe's), or one Adyen
// settlement batch's from its stored report, synchronously and prints its
// summary. It exits 0 when the run completed, mismatches or not (they are
// printed), and non-zero when it could not run.
func cmdReconcile(ctx context.Context, cfg config, logger *slog.Logger, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	date := fs.String("date", "", "the UTC day to reconcile, YYYY-MM-DD")
	batchFlag := fs.String("batch", "", "the Adyen settlement batch to reconcile from its stored report")
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Sprintf("reconcile: %v", err)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("reconcile: unexpected argument %q", fs.Arg(0))}
	}
	switch {
	case *date == "" && *batchFlag == "":
		return usageError{"reconcile: --date YYYY-MM-DD is required (or --batch N for an Adyen settlement batch)"}
	case *date != "" && *batchFlag != "":
		return usageError{"reconcile: give --date or --batch, not both"}
	}
	var scope reconcile.Scope
	var provider reconcile.Provider
	if *batchFlag != "" {
		batch, err := reconcile.ParseBatch(*batchFlag)
		if err != nil {
			return usageError{fmt.Sprintf("reconcile: --batch: %v", err)}
		}
		scope = reconcile.BatchScope(adyen.Name, batch)
	} else {
		day, err := reconcile.ParseDate(*date, time.Now())
		if err != nil {
			return usageError{fmt.Sprintf("reconcile: --date: %v", err)}
		}
		p, err := stripeProvider(cfg, func(msg string) { fmt.Fprintln(progressOut, msg) })
		if err != nil {
			return fmt.Errorf("reconcile: %w (the provider's balance transactions are read with it)", err)
		}
		scope, provider = reconcile.DayScope(stripe.Name, day), p
	}

	pool, err := openMigratedPool(ctx, cfg, 10)
	if err != nil {
		return err
	}
	defer pool.Close()

	// Recovered events are committed with their jobs like webhooks; this
	// process works the events queue while it runs, so that their postings
	// count in this run even when no server is up.
	// It also enqueues the finance alert of a run that needs one, for the
	// server's email workers to send.
	inserter, err := jobs.NewClient(pool, jobs.Config{Logger: logger, ProcessMaxAttempts: cfg.ProcessMaxAttempts, InsertOnly: true,
		Email: jobs.EmailConfig{OpsEmail: cfg.OpsEmail, FinanceEmail: cfg.FinanceEmail}})
	if err != nil {
		return err
	}
	applier, err := jobs.NewEventApplier(pool, logger, jobs.NewMappers(cfg.StripeReferenceKey))
	if err != nil {
		return err
	}
	if err := applier.Start(ctx); err != nil {
		return fmt.Errorf("start event workers: %w", err)
	}
	defer stopApplier(applier, logger)

	runner := reconcile.New(reconcile.Config{
		Pool:     pool,
		Provider: provider,
		Batches:  adyen.Settlements{},
		Ingester: stripeIngester(pool, func() webhook.Enqueuer { return inserter }),
		Logger:   logger,
		Progress: func(msg string) { fmt.Fprintln(progressOut, msg) },
		Alert:    inserter.EnqueueReconciliationAlertTx,
	})
	run, runErr := runner.Run(ctx, scope, reconcile.TriggerCLI, "cli")
	if run.ID != 0 {
		if err := reconcile.WriteRunText(context.WithoutCancel(ctx), pool, stdout, run); err != nil {
			return err
		}
	}
	if runErr != nil {
		if scope.Batch != 0 {
			return fmt.Errorf("reconcile %s: %w", scope, runErr)
		}
		return fmt.Errorf("reconcile %s: %w", scope.Date.Format(reconcile.DateLayout), runErr)
	}
	return nil
}

func stopApplier(c *river.Client[pgx.Tx], logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		logger.Warn("stop event workers", "error", err.Error())
	}
}

// stripeProvider is the Stripe provider from PAYGATE_STRIPE_API_KEY and
// PAYGATE_STRIPE_API_URL. It fails with stripe.ErrNoAPIKey.
func stripeProvider(cfg config, progress func(string)) (*stripe.API, error) {
	return stripe.NewAPI(stripe.APIConfig{APIKey: cfg.StripeAPIKey, URL: cfg.StripeAPIURL, Progress: progress})
}

// stripeIngester feeds recovered events through the webhook's ingest path:
// the same decoding (stripe.DecodeListedEvent: read from the API, they are
// stored with source api, as the sweep's are), and the inbox insert with
// its apply_events job in one transaction. enqueue is called at ingest
// time, so that the server can build its River client after the worker
// that needs this ingester.
func stripeIngester(pool *pgxpool.Pool, enqueue func() webhook.Enqueuer) reconcile.Ingester {
	return reconcile.IngesterFunc(func(ctx context.Context, payload []byte) (bool, error) {
		ev, err := stripe.DecodeListedEvent(payload)
		if err != nil {
			return false, err
		}
		in := &webhook.TxIngester{Pool: pool, Enqueue: enqueue()}
		return in.Ingest(ctx, ev)
	})
}

// reconcileWorkers builds the serve command's reconcile worker and, from
// PAYGATE_RECONCILE_AT, its daily periodic job, as a jobs.Config.Register
// hook; its runner reads Stripe's days and Adyen's settlement batches.
// Without PAYGATE_STRIPE_API_KEY the server still starts: the daily job is
// left out and requested runs of days fail with the reason.
func reconcileWorkers(cfg config, pool *pgxpool.Pool, logger *slog.Logger, jobClient func() *jobs.Client) (func(*river.Workers) []*river.PeriodicJob, error) {
	schedule, err := jobs.ParseCron(cfg.ReconcileAt)
	if err != nil {
		return nil, fmt.Errorf("PAYGATE_RECONCILE_AT: %w", err)
	}
	var provider reconcile.Provider
	if p, err := stripeProvider(cfg, nil); err != nil {
		logger.Warn("PAYGATE_STRIPE_API_KEY is empty: no daily reconciliation, and requested runs fail")
		provider, schedule = reconcile.Unavailable(stripe.Name, err), nil
	} else {
		provider = p
	}
	runner := reconcile.New(reconcile.Config{
		Pool:     pool,
		Provider: provider,
		Batches:  adyen.Settlements{},
		Ingester: stripeIngester(pool, func() webhook.Enqueuer { return jobClient() }),
		Logger:   logger,
		Alert: func(ctx context.Context, tx pgx.Tx, a reconcile.Alert) error {
			return jobClient().EnqueueReconciliationAlertTx(ctx, tx, a)
		},
	})
	return jobs.RegisterReconcile(runner, schedule, logger), nil
}

// reportDownloaders are the serve command's report clients: Adyen's, with
// PAYGATE_ADYEN_REPORT_USER and its password, fetching only from
// PAYGATE_ADYEN_REPORT_HOSTS and public addresses (delivery's rule) unless
// a host is listed by its address. Without the user, reports Adyen
// announces are refused, with the reason.
func reportDownloaders(cfg config, logger *slog.Logger) (map[string]jobs.ReportDownloader, error) {
	out := map[string]jobs.ReportDownloader{}
	if cfg.AdyenReportUser == "" {
		if len(cfg.AdyenHMACKeys) > 0 {
			logger.Warn("PAYGATE_ADYEN_REPORT_USER is empty: Adyen's settlement reports are refused when announced, and its batches are not reconciled")
		}
		return out, nil
	}
	c, err := adyen.NewReportClient(adyen.ReportClientConfig{User: cfg.AdyenReportUser, Password: cfg.AdyenReportPassword,
		Hosts: cfg.AdyenReportHosts, PublicAddress: delivery.PublicAddress})
	if err != nil {
		return nil, fmt.Errorf("PAYGATE_ADYEN_REPORT_HOSTS: %w", err)
	}
	out[adyen.Name] = c
	return out, nil
}

// reconcileUnavailable is why this server cannot perform reconciliation
// runs (no PAYGATE_STRIPE_API_KEY), nil when it can: the API refuses run
// requests with it rather than accept runs that can only fail.
func reconcileUnavailable(cfg config) error {
	_, err := stripeProvider(cfg, nil)
	return err
}
