package natsjs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/paygate/paygate/delivery"
)

// PublishArgs asks for the messages not yet published to be published.
// One such job is queued or running at a time (unique), across instances:
// it publishes until caught up or its budget is spent.
type PublishArgs struct{}

// Kind is stored in the database: never change it.
func (PublishArgs) Kind() string { return "publish_nats" }

// InsertOpts puts the publisher on the delivery queue, beside the
// endpoints' dispatchers and apart from applying events.
func (PublishArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: delivery.QueueDelivery, MaxAttempts: 100, UniqueOpts: river.UniqueOpts{
		ByArgs: true,
		ByState: []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending,
			rivertype.JobStateRunning, rivertype.JobStateRetryable, rivertype.JobStateScheduled},
	}}
}

// Worker runs a Publisher's Publish.
type Worker struct {
	river.WorkerDefaults[PublishArgs]
	Publisher *Publisher
}

// Timeout lets a job publish for its budget, plus a batch's wait for its
// acknowledgements and its commit. A crashed job is rescued after it: the
// stream's duplicate window (DefaultDuplicates) outlasts it.
func (w *Worker) Timeout(*river.Job[PublishArgs]) time.Duration {
	return w.Publisher.config.Budget + 2*w.Publisher.config.AckTimeout + 10*time.Second
}

// NextRetry retries a failed job soon (2 s, 4 s, … up to 30 s): publishing
// resumes within half a minute of NATS coming back, whatever the length of
// the outage.
func (w *Worker) NextRetry(job *river.Job[PublishArgs]) time.Time {
	return time.Now().Add(min(time.Duration(job.Attempt)*2*time.Second, 30*time.Second))
}

// Work implements river.Worker. Its error (NATS down, a batch not
// acknowledged) is retried.
func (w *Worker) Work(ctx context.Context, job *river.Job[PublishArgs]) error {
	rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	_, err = w.Publisher.Publish(ctx, rc)
	return err
}

// Kick queues the publisher's job when it is behind the feed and none is
// queued or running; the relay calls it at each step. A nil Publisher
// (publishing off) does nothing.
func (p *Publisher) Kick(ctx context.Context, rc *river.Client[pgx.Tx]) error {
	if p == nil {
		return nil
	}
	var behind bool
	if err := p.config.Pool.QueryRow(ctx, `
		SELECT coalesce((SELECT position FROM message_relays WHERE name = $1), 0) < (SELECT last_position FROM message_sequencer)`,
		RelayName).Scan(&behind); err != nil {
		return fmt.Errorf("nats publisher's place: %w", err)
	}
	if !behind {
		return nil
	}
	if _, err := rc.Insert(ctx, PublishArgs{}, nil); err != nil {
		return fmt.Errorf("queue the nats publisher: %w", err)
	}
	return nil
}
