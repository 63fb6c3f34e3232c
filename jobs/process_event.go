package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/paygate/paygate/inbox"
)

// ErrPermanent marks a failure that no retry can fix (an impossible amount,
// an unknown currency, a ref conflict): the event becomes poison at once.
var ErrPermanent = errors.New("permanent failure")

// ProcessEventWorker applies one inbox event: its facts, its ledger
// transactions, the payment's state, its emails and the inbox status all
// commit in one transaction together with the job's completion, so a crash
// at any point either applied everything or nothing.
type ProcessEventWorker struct {
	river.WorkerDefaults[ProcessEventArgs]
	pool   *pgxpool.Pool
	logger *slog.Logger
}

// Work implements river.Worker.
func (w *ProcessEventWorker) Work(ctx context.Context, job *river.Job[ProcessEventArgs]) error {
	err := w.apply(ctx, job)
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
	if markErr := w.recordFailure(ctx, job.Args, status, err); markErr != nil {
		// The job retries either way; the inbox catches up on the next try.
		w.logger.ErrorContext(ctx, "record event failure", "event_id", job.Args.EventID, "error", markErr)
	}
	w.logger.WarnContext(ctx, "event not applied", "provider", job.Args.Provider, "event_id", job.Args.EventID,
		"attempt", job.Attempt, "status", status, "error", err.Error())
	if permanent {
		return river.JobCancel(err)
	}
	return err
}

func (w *ProcessEventWorker) apply(ctx context.Context, job *river.Job[ProcessEventArgs]) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		ev, err := inbox.LockTx(ctx, tx, job.Args.Provider, job.Args.EventID)
		if err != nil {
			return err
		}
		status := inbox.StatusIgnored
		if err := inbox.SetStatusTx(ctx, tx, ev.Provider, ev.EventID, status, "", true); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete job: %w", err)
		}
		return nil
	})
}

// recordFailure counts the attempt and keeps its error on the inbox row, in a
// transaction of its own since the processing one rolled back.
func (w *ProcessEventWorker) recordFailure(ctx context.Context, args ProcessEventArgs, status inbox.Status, cause error) error {
	ctx = context.WithoutCancel(ctx)
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		ev, err := inbox.LockTx(ctx, tx, args.Provider, args.EventID)
		if err != nil {
			return err
		}
		if ev.Status == inbox.StatusDiscarded {
			status = inbox.StatusDiscarded // an operator's decision stands
		}
		return inbox.SetStatusTx(ctx, tx, args.Provider, args.EventID, status, cause.Error(), true)
	})
}
