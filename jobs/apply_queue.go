package jobs

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/inbox"
)

// errBatchFailed is a request's answer when the transaction of the batch it
// was part of failed: nothing of the batch was applied, and the request's
// worker tries its event again alone, so that one event's failure is never
// counted against its neighbours.
var errBatchFailed = errors.New("the batch this event was applied with failed")

// applyQueue gathers the events that concurrent process_event jobs ask to
// apply, and applies them together: one transaction, and a fixed number of
// statements, for a whole batch. There is no timer: a batch is whatever
// waited while the previous ones were being applied, so under light load an
// event is applied alone and at once, and under heavy load batches grow
// until applying keeps up.
type applyQueue struct {
	maxAppliers int // batches applied at once
	maxEvents   int // events per batch
	apply       func(ctx context.Context, rc *river.Client[pgx.Tx], keys []inbox.Key) []error

	mu       sync.Mutex
	pending  []*applyRequest
	appliers int
}

type applyRequest struct {
	ctx    context.Context // the job's: a job that gave up is left out of batches not yet begun
	rc     *river.Client[pgx.Tx]
	key    inbox.Key
	result chan error // buffered: an applier never waits for a worker
}

// submit queues key and waits for the outcome of the batch it is applied
// in. Once its batch has begun, submit waits for it even if ctx ends: the
// worker must know whether its event was applied before it records
// anything about it.
func (q *applyQueue) submit(ctx context.Context, rc *river.Client[pgx.Tx], key inbox.Key) error {
	r := &applyRequest{ctx: ctx, rc: rc, key: key, result: make(chan error, 1)}
	q.mu.Lock()
	q.pending = append(q.pending, r)
	if q.appliers < q.maxAppliers {
		q.appliers++
		go q.drain()
	}
	q.mu.Unlock()
	return <-r.result
}

// drain applies batches until nothing is waiting.
func (q *applyQueue) drain() {
	for {
		q.mu.Lock()
		n := min(len(q.pending), q.maxEvents)
		if n == 0 {
			q.appliers--
			q.mu.Unlock()
			return
		}
		batch := q.pending[:n:n]
		q.pending = q.pending[n:]
		q.mu.Unlock()

		live := batch[:0:0]
		for _, r := range batch {
			if err := r.ctx.Err(); err != nil {
				r.result <- err
				continue
			}
			live = append(live, r)
		}
		if len(live) == 0 {
			continue
		}
		keys := make([]inbox.Key, len(live))
		for i, r := range live {
			keys[i] = r.key
		}
		outcomes := q.apply(context.WithoutCancel(live[0].ctx), live[0].rc, keys)
		for i, r := range live {
			r.result <- outcomes[i]
		}
	}
}
