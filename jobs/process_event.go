package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
)

// recordRetryDelay is how long a job waits before trying again to record
// that its event is poison, when the database refused the first time.
const recordRetryDelay = 5 * time.Second

// ProcessEventWorker applies one inbox event: its facts, its ledger
// transactions, the payment's state, its emails and the inbox status commit
// in one transaction, so a crash at any point either applied everything or
// nothing. Concurrent jobs share that transaction (see applier): the
// worker hands its event to a queue and waits for the batch it lands in.
//
// The job itself is completed by River after Work returns, outside that
// transaction. A crash in between runs the job again, which finds its event
// processed and does nothing: the inbox status, committed with the effects,
// is what says an event was applied.
type ProcessEventWorker struct {
	river.WorkerDefaults[ProcessEventArgs]
	logger  *slog.Logger
	applier *applier
	queue   *applyQueue
}

// Defaults of the apply queue.
const (
	// defaultAppliers is how many batches are applied at once: applying is
	// database work, and two transactions keep the database busy while one
	// of them waits on its commit.
	defaultAppliers = 2
	// maxApplyBatch bounds a batch, so that one transaction stays short
	// (tens of milliseconds) and its locks are held briefly.
	maxApplyBatch = 256
)

// eventWorkers builds the two workers that apply inbox events, sharing one
// applier and one apply queue: process_event (one event) and apply_events
// (the new events of one ingest batch). pressure, when set, reports that
// webhooks are waiting on their commits in numbers; applying then rests
// between batches (see applyQueue).
func eventWorkers(pool *pgxpool.Pool, logger *slog.Logger, opsEmail string, mappers Mappers, appliers, maxAttempts int,
	pressure func() bool, reg prometheus.Registerer, tp trace.TracerProvider) (*ProcessEventWorker, *ApplyEventsWorker) {
	if appliers <= 0 {
		appliers = defaultAppliers
	}
	if maxAttempts <= 0 {
		maxAttempts = DefaultProcessMaxAttempts
	}
	a := newApplier(pool, opsEmail, mappers, reg)
	q := &applyQueue{maxAppliers: appliers, maxEvents: maxApplyBatch, apply: a.apply,
		pressure: pressure, restFactor: applyRestFactor}
	if tp != nil {
		q.tracer = tp.Tracer(tracerName)
	}
	return &ProcessEventWorker{logger: logger, applier: a, queue: q},
		&ApplyEventsWorker{logger: logger, pool: pool, queue: q, maxAttempts: maxAttempts}
}

// Work implements river.Worker.
func (w *ProcessEventWorker) Work(ctx context.Context, job *river.Job[ProcessEventArgs]) error {
	rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	key := inbox.Key{Provider: job.Args.Provider, EventID: job.Args.EventID}
	err = w.queue.submitTraced(ctx, rc, []inbox.Key{key}, jobIngestSpans(job.JobRow, 1))[0]
	if errors.Is(err, errBatchFailed) {
		err = w.applier.apply(ctx, rc, []inbox.Key{key})[0]
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, inbox.ErrNotFound) {
		// A job whose event is not in the inbox cannot come from our own
		// ingest path (they commit together); nothing to retry.
		return river.JobCancel(err)
	}
	permanent := errors.Is(err, ErrPermanent)
	exhausted := job.Attempt >= job.MaxAttempts
	status := inbox.StatusReceived
	if permanent || exhausted {
		status = inbox.StatusPoison
	}
	if markErr := w.recordFailure(ctx, job, status, err); markErr != nil {
		w.logger.ErrorContext(ctx, "record event failure", "event_id", job.Args.EventID, "error", markErr)
		if status == inbox.StatusPoison {
			// Ending the job now (cancelled, or discarded when out of
			// attempts) would leave the event "received" with no job
			// left to work it: lost to ops. Come back once the database
			// answers again; a snooze spends no attempt.
			return river.JobSnooze(recordRetryDelay)
		}
		// A transient failure retries anyway; the inbox catches up then.
	}
	w.logger.WarnContext(ctx, "event not applied", "provider", job.Args.Provider, "event_id", job.Args.EventID,
		"attempt", job.Attempt, "status", status, "error", err.Error())
	if permanent {
		return river.JobCancel(err)
	}
	return err
}

// isPermanentLedgerError reports a transaction the ledger can never accept:
// retrying cannot change the outcome.
func isPermanentLedgerError(err error) bool {
	for _, target := range []error{
		ledger.ErrRefConflict, ledger.ErrUnbalanced, ledger.ErrUnknownCurrency, ledger.ErrNegativeAmount,
		ledger.ErrInvalidAmount, ledger.ErrInvalidTransaction, ledger.ErrInvalidKind,
		ledger.ErrInvalidAccount, ledger.ErrInvalidEntries,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// recordFailure counts the attempt and keeps its error on the inbox row and
// in the event's attempt history (which outlives River's job row), in a
// transaction of its own since the processing one rolled back.
func (w *ProcessEventWorker) recordFailure(ctx context.Context, job *river.Job[ProcessEventArgs], status inbox.Status, cause error) error {
	ctx = context.WithoutCancel(ctx)
	args := job.Args
	return pgx.BeginFunc(ctx, w.applier.pool, func(tx pgx.Tx) error {
		ev, err := inbox.LockTx(ctx, tx, args.Provider, args.EventID)
		if err != nil {
			return err
		}
		if ev.Status == inbox.StatusDiscarded {
			status = inbox.StatusDiscarded // an operator's decision stands
		}
		if err := inbox.SetStatusTx(ctx, tx, args.Provider, args.EventID, status, cause.Error(), true); err != nil {
			return err
		}
		if err := inbox.RecordAttemptTx(ctx, tx, inbox.Attempt{
			Key:   inbox.Key{Provider: args.Provider, EventID: args.EventID},
			JobID: job.ID, Attempt: job.Attempt, Error: cause.Error(),
		}); err != nil {
			return err
		}
		if status != inbox.StatusPoison {
			return nil
		}
		_, err = EnqueuePoisonAlertTx(ctx, tx, nil, w.applier.opsEmail, PoisonAlert{
			Provider: ev.Provider, EventID: ev.EventID, EventType: ev.Type, Error: cause.Error(),
		})
		return err
	})
}
