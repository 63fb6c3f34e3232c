package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/inbox"
)

// ApplyEventsWorker applies the events of one ingest batch through the
// apply queue, as process_event jobs apply theirs. Every event the batch
// did not apply (its batch failed, it failed, the job gave up waiting) is
// handed to a process_event job of its own, in one transaction, and that
// job takes it from there: retries with backoff, attempts, poison. The
// hand-off is unique by the event among jobs in every state River keeps,
// so a run of this job that is worked again (a crash before River
// completed it) neither doubles the jobs nor the effects: what it applied
// before is found processed, and an event it handed off before stays with
// that job, poison or not.
type ApplyEventsWorker struct {
	river.WorkerDefaults[ApplyEventsArgs]
	logger      *slog.Logger
	pool        *pgxpool.Pool
	queue       *applyQueue
	maxAttempts int
}

// handOffUnique makes a hand-off job unique by its event among the jobs in
// every state River keeps.
var handOffUnique = river.UniqueOpts{ByState: rivertype.JobStates()}

// Work implements river.Worker.
func (w *ApplyEventsWorker) Work(ctx context.Context, job *river.Job[ApplyEventsArgs]) error {
	rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	keys := make([]inbox.Key, len(job.Args.EventIDs))
	for i, id := range job.Args.EventIDs {
		keys[i] = inbox.Key{Provider: job.Args.Provider, EventID: id}
	}
	ingest := jobIngestSpans(job.JobRow, len(keys))
	outcomes := w.queue.submitTraced(ctx, rc, keys, ingest)

	var handOff []inbox.Key
	var handOffSpans []trace.SpanContext
	var first error
	for i, err := range outcomes {
		if err == nil || errors.Is(err, inbox.ErrNotFound) {
			// Not found cannot come from the ingest path (the events and
			// this job commit together); there is nothing to apply.
			continue
		}
		if first == nil {
			first = err
		}
		handOff = append(handOff, keys[i])
		if ingest != nil {
			handOffSpans = append(handOffSpans, ingest[i])
		}
	}
	if len(handOff) == 0 {
		return nil
	}
	// The job's own deadline may be what ended the wait: the hand-off
	// must still commit, or the events would wait for the sweeper.
	ctx = context.WithoutCancel(ctx)
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		params := uniqueProcessEvents(handOff, w.maxAttempts, handOffUnique)
		for i := range params {
			if handOffSpans != nil {
				// The event's own job keeps its ingest span, so the
				// batch that applies it at last still links to it.
				params[i].InsertOpts.Metadata = ingestMetadata(handOffSpans[i : i+1])
			}
		}
		_, err := rc.InsertManyTx(ctx, tx, params)
		return err
	})
	if err != nil {
		return fmt.Errorf("hand %d events to jobs of their own: %w", len(handOff), err)
	}
	w.logger.InfoContext(ctx, "events of an ingest batch handed to jobs of their own", "provider", job.Args.Provider,
		"count", len(handOff), "first_event_id", handOff[0].EventID, "first_error", first.Error())
	return nil
}
