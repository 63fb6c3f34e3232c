package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/inbox"
)

// IdempotencyKeyRetention is how long an Idempotency-Key is remembered: a
// retry within it replays the first answer, a reuse after it is a new
// request.
const IdempotencyKeyRetention = 24 * time.Hour

// IdempotencyPurgeArgs asks for expired Idempotency-Key records to be
// deleted. The table belongs to the api package's middleware; the purge is
// here because jobs cannot import api.
type IdempotencyPurgeArgs struct{}

// Kind is stored in the database: never change it.
func (IdempotencyPurgeArgs) Kind() string { return "idempotency_purge" }

// InsertOpts runs the purge on the maintenance queue, at most once per hour
// however many leaders come and go.
func (IdempotencyPurgeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, UniqueOpts: river.UniqueOpts{ByPeriod: time.Hour}}
}

// IdempotencyPurgeWorker deletes Idempotency-Key records older than
// IdempotencyKeyRetention.
type IdempotencyPurgeWorker struct {
	river.WorkerDefaults[IdempotencyPurgeArgs]
	Pool *pgxpool.Pool
	Now  func() time.Time // for tests; default time.Now
}

// Work implements river.Worker.
func (w *IdempotencyPurgeWorker) Work(ctx context.Context, job *river.Job[IdempotencyPurgeArgs]) error {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	_, err := PurgeIdempotencyKeys(ctx, w.Pool, now().Add(-IdempotencyKeyRetention))
	return err
}

// PurgeIdempotencyKeys deletes the Idempotency-Key records first claimed
// before cutoff and returns how many it deleted.
func PurgeIdempotencyKeys(ctx context.Context, q inbox.Querier, cutoff time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}

// idempotencyPurgePeriodic runs the purge every hour, and once when a new
// leader starts its scheduler.
func idempotencyPurgePeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return IdempotencyPurgeArgs{}, nil },
		&river.PeriodicJobOpts{ID: "idempotency_purge", RunOnStart: true})
}
