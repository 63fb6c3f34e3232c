package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/outbox"
)

// InboxPartitionsArgs asks for the inbox's monthly partitions to be kept
// ready ahead and, under a payload retention, for the partitions past it
// to be dropped.
type InboxPartitionsArgs struct{}

// Kind is stored in the database: never change it.
func (InboxPartitionsArgs) Kind() string { return "inbox_partitions" }

// InsertOpts runs the upkeep on the maintenance queue, at most once per
// hour however many leaders come and go.
func (InboxPartitionsArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, UniqueOpts: river.UniqueOpts{ByPeriod: time.Hour}}
}

// InboxPartitionsWorker creates the coming months' partitions of
// inbox_events and drops those past the payload retention.
type InboxPartitionsWorker struct {
	river.WorkerDefaults[InboxPartitionsArgs]
	Pool *pgxpool.Pool
	// Retention is how long payloads are kept (PAYGATE_PAYLOAD_RETENTION);
	// zero keeps them forever. A partition is dropped once its last day is
	// older than this.
	Retention time.Duration
	// MessageRetention is how long outbox messages are kept
	// (PAYGATE_MESSAGE_RETENTION); zero: outbox.DefaultRetention.
	MessageRetention time.Duration
	Logger           *slog.Logger
	Now              func() time.Time // for tests; default time.Now
}

// Work implements river.Worker. A partition kept for its unresolved events
// is logged, not failed: retrying would not resolve them, ops do.
func (w *InboxPartitionsWorker) Work(ctx context.Context, job *river.Job[InboxPartitionsArgs]) error {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	logger := w.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	created, err := inbox.EnsurePartitions(ctx, w.Pool, now())
	for _, name := range created {
		logger.Info("created inbox partition", "partition", name)
	}
	if err != nil {
		return err
	}
	if err := w.messages(ctx, logger, now()); err != nil {
		return err
	}
	if w.Retention <= 0 {
		return nil
	}
	expired, err := inbox.DropExpired(ctx, w.Pool, now().Add(-w.Retention))
	for _, e := range expired {
		if e.Open > 0 {
			logger.Warn("inbox partition past the payload retention kept: it holds received or poison events; replay or discard them",
				"partition", e.Name, "open_events", e.Open)
			continue
		}
		logger.Info("dropped inbox partition past the payload retention", "partition", e.Name, "events", e.Dropped)
	}
	if err != nil && !errors.Is(err, inbox.ErrPartitionOpen) {
		return fmt.Errorf("payload retention: %w", err)
	}
	return nil
}

// inboxPartitionsPeriodic runs the upkeep daily, and once when a new
// leader starts its scheduler, so that a fresh install or a long outage is
// caught up at the next start.
func inboxPartitionsPeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(24*time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return InboxPartitionsArgs{}, nil },
		&river.PeriodicJobOpts{ID: "inbox_partitions", RunOnStart: true})
}

// messages keeps the outbox's partitions: the coming months made, those
// past the message retention dropped unless a delivery of theirs is
// pending (logged: an endpoint failing or disabled holds them).
func (w *InboxPartitionsWorker) messages(ctx context.Context, logger *slog.Logger, now time.Time) error {
	created, err := outbox.EnsurePartitions(ctx, w.Pool, now)
	for _, name := range created {
		logger.Info("created message partition", "partition", name)
	}
	if err != nil {
		return err
	}
	retention := w.MessageRetention
	if retention <= 0 {
		retention = outbox.DefaultRetention
	}
	dropped, err := outbox.DropExpired(ctx, w.Pool, now.Add(-retention))
	for _, d := range dropped {
		if d.Pending > 0 {
			logger.Warn("message partition past the retention kept: deliveries of its messages are pending",
				"partition", d.Partition, "pending_deliveries", d.Pending)
			continue
		}
		logger.Info("dropped message partition past the retention", "partition", d.Partition, "messages", d.Messages)
	}
	if err != nil {
		return fmt.Errorf("message retention: %w", err)
	}
	return nil
}
