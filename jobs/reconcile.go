package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

// ReconcileArgs asks for one reconciliation run. An on-demand run (the
// API) carries the id of the run row inserted with the job; a scheduled
// run carries only what it reconciles and creates its run, once: the daily
// job its date (a day of the runner's day provider), a settlement batch's
// stored report its provider and batch.
type ReconcileArgs struct {
	Date      string `json:"date"`
	RunID     int64  `json:"run_id,omitempty"`
	Scheduled bool   `json:"scheduled,omitempty"`
	Provider  string `json:"provider,omitempty"`
	Batch     int64  `json:"batch,omitempty"`
}

// Kind is stored in the database: never change it.
func (ReconcileArgs) Kind() string { return "reconcile" }

// ReconcileMaxAttempts is how often a run is tried before it is failed;
// provider outages are the usual cause, so retries are spread by River's
// backoff.
const ReconcileMaxAttempts = 5

// InsertOpts puts runs on the maintenance queue, away from the events.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: ReconcileMaxAttempts}
}

// ScheduledReconcile is the job the daily schedule inserts for day: unique
// by its arguments (the date) for as long as River keeps the job, and the
// worker creates the day's scheduled run under a unique key of its own, so a
// leader change or a restart never runs a day twice.
func ScheduledReconcile(day time.Time) (ReconcileArgs, *river.InsertOpts) {
	return ReconcileArgs{Date: day.UTC().Format(reconcile.DateLayout), Scheduled: true},
		&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// ScheduledDay is the day a schedule's tick at or before now reconciles:
// the UTC day before the latest firing time. At a tick that is yesterday; a
// scheduler started later (RunOnStart) gets the same day, already run and so
// skipped, or the day whose tick it missed while no process was up. A minute
// of slack covers a scheduler that wakes a moment early.
func ScheduledDay(schedule *CronSchedule, now time.Time) time.Time {
	tick := schedule.Prev(now.Add(time.Minute))
	if tick.IsZero() {
		tick = now.UTC()
	}
	return time.Date(tick.Year(), tick.Month(), tick.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, -1)
}

// ReconcilePeriodicJob is the daily reconciliation at schedule (UTC).
func ReconcilePeriodicJob(schedule *CronSchedule) *river.PeriodicJob {
	return river.NewPeriodicJob(schedule, func() (river.JobArgs, *river.InsertOpts) {
		return ScheduledReconcile(ScheduledDay(schedule, time.Now()))
	}, &river.PeriodicJobOpts{ID: "reconcile_daily", RunOnStart: true})
}

// ScheduledBatchReconcile is the job that reconciles a provider's
// settlement batch once its report is stored: unique by its arguments, and
// the worker creates the batch's scheduled run under a unique key of its
// own, so the same report never makes two runs.
func ScheduledBatchReconcile(provider string, batch int64) (ReconcileArgs, *river.InsertOpts) {
	return ReconcileArgs{Provider: provider, Batch: batch, Scheduled: true},
		&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// InsertReconcileTx enqueues an on-demand run in tx, the transaction that
// inserted the run row.
func (c *Client) InsertReconcileTx(ctx context.Context, tx pgx.Tx, run reconcile.Run) error {
	args := ReconcileArgs{RunID: run.ID, Provider: run.Provider, Batch: run.Batch}
	if run.Batch == 0 {
		args.Date = run.Date.Format(reconcile.DateLayout)
	}
	_, err := c.River.InsertTx(ctx, tx, args, nil)
	if err != nil {
		return fmt.Errorf("enqueue reconcile run %d: %w", run.ID, err)
	}
	return nil
}

// EnqueueReconciliationAlertTx records and enqueues, in tx (the one that
// finishes the run: reconcile.Config.Alert), finance's alert about a run
// that failed or completed with exceptions. It goes to FinanceEmail, else
// OpsEmail (neither: recorded as skipped); one per run ever, keyed by the
// run's id.
//
// It fails with ErrInvalidEmail.
func (c *Client) EnqueueReconciliationAlertTx(ctx context.Context, tx pgx.Tx, a reconcile.Alert) error {
	reason := a.Error
	date, batch := a.Date.Format(reconcile.DateLayout), ""
	if a.Scope.Batch != 0 {
		date, batch = "", strconv.FormatInt(a.Scope.Batch, 10)
	}
	if a.Status != reconcile.RunFailed {
		var parts []string
		for _, st := range reconcile.Statuses {
			if n := a.Exceptions[st]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s: %d", st, n))
			}
		}
		reason = strings.Join(parts, ", ")
	}
	_, err := EnqueueEmailTx(ctx, tx, c.River, Email{
		Kind:      EmailReconciliationAlert,
		ObjectID:  strconv.FormatInt(a.RunID, 10),
		Recipient: cmp.Or(c.config.Email.FinanceEmail, c.config.Email.OpsEmail),
		Reason:    reason,
		Provider:  a.Scope.Provider,
		Date:      date,
		Batch:     batch,
		RunStatus: string(a.Status),
	})
	if err != nil {
		return fmt.Errorf("reconciliation alert for run %d: %w", a.RunID, err)
	}
	return nil
}

// ReconcileWorker performs reconciliation runs.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	Runner *reconcile.Runner
	Logger *slog.Logger
}

// NewReconcileWorker returns the worker.
func NewReconcileWorker(runner *reconcile.Runner, logger *slog.Logger) *ReconcileWorker {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &ReconcileWorker{Runner: runner, Logger: logger}
}

// Timeout lets a run list a busy day and wait for recovered events; River's
// rescuer honours it, so a long run is not taken for a crashed one.
func (w *ReconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration { return 30 * time.Minute }

func (w *ReconcileWorker) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger
}

// Work implements river.Worker.
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	runID := job.Args.RunID
	if job.Args.Scheduled {
		scope := reconcile.BatchScope(job.Args.Provider, job.Args.Batch)
		if job.Args.Batch == 0 {
			day, err := time.Parse(reconcile.DateLayout, job.Args.Date)
			if err != nil {
				return river.JobCancel(fmt.Errorf("scheduled reconcile: bad date %q", job.Args.Date))
			}
			scope = reconcile.DayScope(cmp.Or(job.Args.Provider, w.Runner.DayProvider()), day)
		}
		if scope.Provider == "" {
			return river.JobCancel(fmt.Errorf("scheduled reconcile of %s: %w: no provider reads its statements here", job.Args.Date, reconcile.ErrCannotRun))
		}
		run, created, err := reconcile.ScheduledRun(ctx, w.Runner.Pool(), scope)
		if err != nil {
			return err
		}
		if !created && run.Status != reconcile.RunRunning {
			w.logger().InfoContext(ctx, "scheduled reconciliation already ran", "scope", scope.String(), "run_id", run.ID)
			return nil
		}
		runID = run.ID
	}
	_, err := w.Runner.Perform(ctx, runID)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, reconcile.ErrRunFinished):
		return nil // an earlier attempt finished it
	case errors.Is(err, reconcile.ErrRunNotFound):
		return river.JobCancel(err)
	}
	ctx = context.WithoutCancel(ctx)
	if errors.Is(err, stripe.ErrNoAPIKey) || errors.Is(err, reconcile.ErrCannotRun) {
		// No retry can help until the server is configured.
		if ferr := w.Runner.Fail(ctx, runID, err); ferr != nil {
			w.logger().ErrorContext(ctx, "mark reconciliation failed", "run_id", runID, "error", ferr.Error())
		}
		return river.JobCancel(err)
	}
	if job.Attempt >= job.MaxAttempts {
		if ferr := w.Runner.Fail(ctx, runID, err); ferr != nil {
			w.logger().ErrorContext(ctx, "mark reconciliation failed", "run_id", runID, "error", ferr.Error())
		}
	} else if nerr := w.Runner.NoteError(ctx, runID, err); nerr != nil {
		w.logger().ErrorContext(ctx, "note reconciliation error", "run_id", runID, "error", nerr.Error())
	}
	w.logger().WarnContext(ctx, "reconciliation attempt failed", "run_id", runID, "attempt", job.Attempt, "error", err.Error())
	return err
}

// RegisterReconcile returns a Config.Register hook that adds the reconcile
// worker and, when schedule is not nil, the daily periodic job.
func RegisterReconcile(runner *reconcile.Runner, schedule *CronSchedule, logger *slog.Logger) func(*river.Workers) []*river.PeriodicJob {
	return func(w *river.Workers) []*river.PeriodicJob {
		river.AddWorker(w, NewReconcileWorker(runner, logger))
		if schedule == nil {
			return nil
		}
		return []*river.PeriodicJob{ReconcilePeriodicJob(schedule)}
	}
}

// NewEventApplier builds a River client that works only the events queue
// and never leads the cluster, for a process that must apply the events it
// ingests (paygate reconcile run from the command line) without taking on
// the server's other work. Jobs that processing inserts for other queues
// (emails) are left for the server; maintenance (retries, rescue) stays
// with the server's leader.
//
// mappers map the events (NewMappers; nil: the defaults).
func NewEventApplier(pool *pgxpool.Pool, logger *slog.Logger, mappers Mappers) (*river.Client[pgx.Tx], error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	workers := river.NewWorkers()
	processEvent, applyEvents := eventWorkers(pool, logger, "", mappers, 0, 0, nil, nil, nil)
	river.AddWorker(workers, processEvent)
	river.AddWorker(workers, applyEvents)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:                 logger,
		Workers:                workers,
		Queues:                 map[string]river.QueueConfig{QueueEvents: {MaxWorkers: 10}},
		LeaderElectionDisabled: true,
		FetchOnlyKnownKinds:    true,
		SkipUnknownJobCheck:    true,
		JobTimeout:             30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("river client for events: %w", err)
	}
	return client, nil
}
