package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/sweep"
	"github.com/paygate/paygate/webhook"
)

// loadSweep reads PAYGATE_STRIPE_SWEEP_EVERY and PAYGATE_STRIPE_SWEEP_RATE.
func (c *config) loadSweep(getenv func(string) string) error {
	c.StripeSweepEvery = sweep.DefaultEvery
	if v := getenv("PAYGATE_STRIPE_SWEEP_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if v == "0" {
			d, err = 0, nil
		}
		if err != nil || (d != 0 && (d < time.Second || d > 24*time.Hour)) {
			return fmt.Errorf("PAYGATE_STRIPE_SWEEP_EVERY must be 0 (off) or a duration from 1s to 24h, such as 10m, got %q", v)
		}
		c.StripeSweepEvery = d
	}
	c.StripeSweepRate = sweep.DefaultRate
	if v := getenv("PAYGATE_STRIPE_SWEEP_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r > 0 && r <= 100) {
			return fmt.Errorf("PAYGATE_STRIPE_SWEEP_RATE must be a number of requests a second above 0, at most 100 (Stripe's live limit), such as 10, got %q", v)
		}
		c.StripeSweepRate = r
	}
	return nil
}

// stripeSweeper is the sweeper of Stripe's events list with
// PAYGATE_STRIPE_API_KEY, committing what it finds through the webhook's
// ingest path, whose River client enqueue gives at ingest time (the server
// builds it after the worker that needs this sweeper). It fails with
// stripe.ErrNoAPIKey.
func stripeSweeper(cfg config, pool *pgxpool.Pool, enqueue func() webhook.Enqueuer, logger *slog.Logger,
	metrics *sweep.Metrics, progress func(string)) (*sweep.Sweeper, error) {
	api, err := stripeProvider(cfg, nil)
	if err != nil {
		return nil, err
	}
	return sweep.New(sweep.Config{
		Pool:   pool,
		Lister: api,
		Ingester: sweepIngester(func(ctx context.Context, events []provider.Event) ([]bool, error) {
			return (&webhook.TxIngester{Pool: pool, Enqueue: enqueue()}).IngestAll(ctx, events)
		}),
		Rate:     cfg.StripeSweepRate,
		OpsEmail: cfg.OpsEmail,
		Logger:   logger,
		Metrics:  metrics,
		Progress: progress,
	}), nil
}

type sweepIngester func(ctx context.Context, events []provider.Event) ([]bool, error)

func (f sweepIngester) IngestAll(ctx context.Context, events []provider.Event) ([]bool, error) {
	return f(ctx, events)
}

// sweepWorkers builds the serve command's periodic sweep of Stripe's
// events list, as a jobs.Config.Register hook and the queue it runs on:
// nil for both when PAYGATE_STRIPE_SWEEP_EVERY is 0 or there is no
// PAYGATE_STRIPE_API_KEY (said in the log).
func sweepWorkers(cfg config, pool *pgxpool.Pool, logger *slog.Logger, reg prometheus.Registerer,
	jobClient func() *jobs.Client) (func(*river.Workers) []*river.PeriodicJob, map[string]river.QueueConfig) {
	if cfg.StripeSweepEvery == 0 {
		logger.Warn("PAYGATE_STRIPE_SWEEP_EVERY is 0: Stripe events whose webhooks never arrive wait for the daily reconciliation")
		return nil, nil
	}
	s, err := stripeSweeper(cfg, pool, func() webhook.Enqueuer { return jobClient() }, logger, sweep.NewMetrics(reg), nil)
	if err != nil {
		logger.Warn("PAYGATE_STRIPE_API_KEY is empty: no missed-event sweep; Stripe events whose webhooks never arrive are not recovered")
		return nil, nil
	}
	return sweep.Register(s, cfg.StripeSweepEvery), map[string]river.QueueConfig{sweep.Queue: sweep.QueueConfig()}
}

// cmdSweep sweeps Stripe's events created in [--since, --until) (until
// now by default) once, printing its progress and what it found: the
// events paygate lacked are ingested through the inbox, for the server's
// workers to apply, and ops get one missed_events email.
func cmdSweep(ctx context.Context, cfg config, logger *slog.Logger, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sinceFlag := fs.String("since", "", "the start of the window, RFC 3339 (2025-03-14T00:00:00Z), within the last 30 days")
	untilFlag := fs.String("until", "", "the end of the window, RFC 3339; now when not given")
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Sprintf("sweep: %v", err)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("sweep: unexpected argument %q", fs.Arg(0))}
	}
	if *sinceFlag == "" {
		return usageError{"sweep: --since is required (RFC 3339, such as 2025-03-14T00:00:00Z)"}
	}
	now := time.Now()
	since, err := time.Parse(time.RFC3339, *sinceFlag)
	if err != nil {
		return usageError{fmt.Sprintf("sweep: --since %q is not an RFC 3339 time such as 2025-03-14T00:00:00Z", *sinceFlag)}
	}
	until := now
	if *untilFlag != "" {
		if until, err = time.Parse(time.RFC3339, *untilFlag); err != nil {
			return usageError{fmt.Sprintf("sweep: --until %q is not an RFC 3339 time such as 2025-03-14T00:00:00Z", *untilFlag)}
		}
	}
	if _, err := stripeProvider(cfg, nil); err != nil {
		return fmt.Errorf("sweep: %w (Stripe's events are listed with it)", err)
	}
	pool, err := openMigratedPool(ctx, cfg, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	inserter, err := jobs.NewClient(pool, jobs.Config{Logger: logger, ProcessMaxAttempts: cfg.ProcessMaxAttempts, InsertOnly: true,
		Email: jobs.EmailConfig{OpsEmail: cfg.OpsEmail}})
	if err != nil {
		return err
	}
	progress := func(msg string) { fmt.Fprintln(progressOut, msg) }
	s, err := stripeSweeper(cfg, pool, func() webhook.Enqueuer { return inserter }, logger, nil, progress)
	if err != nil {
		return err
	}
	w := sweep.Window{From: since.UTC(), To: until.UTC()}
	if err := s.CheckWindow(w, now); err != nil {
		return usageError{fmt.Sprintf("sweep: %v", err)}
	}
	progress(fmt.Sprintf("listing %s's events created %s to %s", s.Provider(), w.From.Format(time.RFC3339), w.To.Format(time.RFC3339)))
	res, err := s.SweepWindow(ctx, w, inserter.River)
	writeSweep(stdout, s.Provider(), res)
	if err != nil {
		if errors.Is(err, sweep.ErrWindow) {
			return usageError{fmt.Sprintf("sweep: %v", err)}
		}
		return fmt.Errorf("sweep: %w", err)
	}
	return nil
}

// writeSweep prints what a sweep found.
func writeSweep(w io.Writer, provider string, res sweep.Result) {
	fmt.Fprintf(w, "Swept %s's events created %s to %s: %d listed, %d new, %d already in paygate",
		provider, res.From.Format(time.RFC3339), res.To.Format(time.RFC3339), res.Listed, res.New, res.Known)
	if res.Unreadable > 0 {
		fmt.Fprintf(w, ", %d not events paygate can store (logged)", res.Unreadable)
	}
	fmt.Fprintf(w, " (%d list requests).\n", res.Requests)
	if res.New == 0 {
		fmt.Fprintln(w, "Nothing was missed.")
		return
	}
	fmt.Fprintf(w, "First new: %s %s, created %s\n", res.First.ID, res.First.Type, res.First.Created.Format(time.RFC3339))
	fmt.Fprintf(w, "Last new:  %s %s, created %s\n", res.Last.ID, res.Last.Type, res.Last.Created.Format(time.RFC3339))
	fmt.Fprintf(w, "They are in the inbox, applied by the server's workers; GET /v1/events?provider=%s lists them with \"source\": \"api\".\n", provider)
	fmt.Fprintln(w, "Their webhooks never came: check the endpoint's status and failed deliveries in Stripe's Dashboard (Developers > Webhooks) and PAYGATE_STRIPE_WEBHOOK_SECRETS.")
}

// withQueues is queues with more's added.
func withQueues(queues, more map[string]river.QueueConfig) map[string]river.QueueConfig {
	for name, q := range more {
		queues[name] = q
	}
	return queues
}
