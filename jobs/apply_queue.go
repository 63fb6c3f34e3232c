package jobs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/inbox"
)

// errBatchFailed is a request's answer when the transaction of the batch it
// was part of failed: nothing of the batch was applied, and the event is
// tried again alone (by its process_event job, or by the process_event job
// an apply_events job hands it to), so that one event's failure is never
// counted against its neighbours.
var errBatchFailed = errors.New("the batch this event was applied with failed")

// applyRestFactor is how long an applier rests after a batch while ingest
// is under pressure, in multiples of the time the batch took: applying
// then gets at least a sixth of its time. Two vCPUs carry the webhook path,
// applying and PostgreSQL; when senders queue up, acknowledging them comes
// first (a provider that waits too long retries, and sends more), and the
// events wait as received, committed, until the pressure is off. Measured
// with make bench in docs/performance.md ("Acknowledging first").
const applyRestFactor = 5

// applyQueue gathers the events that concurrent jobs (process_event,
// apply_events) ask to apply, and applies them together: one transaction,
// and a fixed number of statements, for a whole batch. There is no timer: a
// batch is whatever waited while the previous ones were being applied, so
// under light load an event is applied alone and at once, and under heavy
// load batches grow until applying keeps up.
//
// While pressure reports true, an applier rests after each batch for
// restFactor times as long as the batch took, then goes on: applying slows
// down for ingest but never stops, and under light load (short batches) the
// rests are short too.
type applyQueue struct {
	maxAppliers int // batches applied at once
	maxEvents   int // events per batch
	apply       func(ctx context.Context, rc *river.Client[pgx.Tx], keys []inbox.Key) []error
	pressure    func() bool // nil: never
	restFactor  int
	sleep       func(time.Duration) // time.Sleep; tests replace it
	// tracer, when tracing is on, gives each batch a span of its own,
	// linked to each event's ingest span; nil: batches are not traced.
	tracer trace.Tracer

	mu       sync.Mutex
	pending  []*applyRequest
	appliers int
}

type applyRequest struct {
	ctx    context.Context // the job's: a job that gave up is left out of batches not yet begun
	rc     *river.Client[pgx.Tx]
	key    inbox.Key
	ingest trace.SpanContext // the span the event was received in; zero: unknown
	result chan error        // buffered: an applier never waits for a worker
}

// submit queues key and waits for the outcome of the batch it is applied
// in. Once its batch has begun, submit waits for it even if ctx ends: the
// worker must know whether its event was applied before it records
// anything about it.
func (q *applyQueue) submit(ctx context.Context, rc *river.Client[pgx.Tx], key inbox.Key) error {
	return q.submitAll(ctx, rc, []inbox.Key{key})[0]
}

// submitAll queues keys, in their order, and waits for every outcome, as
// submit does for one.
func (q *applyQueue) submitAll(ctx context.Context, rc *river.Client[pgx.Tx], keys []inbox.Key) []error {
	return q.submitTraced(ctx, rc, keys, nil)
}

// submitTraced is submitAll for events whose ingest spans are known:
// ingest[i] is keys[i]'s (nil: none is).
func (q *applyQueue) submitTraced(ctx context.Context, rc *river.Client[pgx.Tx], keys []inbox.Key, ingest []trace.SpanContext) []error {
	reqs := make([]*applyRequest, len(keys))
	q.mu.Lock()
	for i, key := range keys {
		reqs[i] = &applyRequest{ctx: ctx, rc: rc, key: key, result: make(chan error, 1)}
		if ingest != nil {
			reqs[i].ingest = ingest[i]
		}
		q.pending = append(q.pending, reqs[i])
	}
	for n := len(q.pending); q.appliers < q.maxAppliers && n > 0; n -= q.maxEvents {
		q.appliers++
		go q.drain()
	}
	q.mu.Unlock()
	outcomes := make([]error, len(keys))
	for i, r := range reqs {
		outcomes[i] = <-r.result
	}
	return outcomes
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
		start := time.Now()
		ctx := context.WithoutCancel(live[0].ctx)
		var span trace.Span
		if q.tracer != nil {
			ctx, span = q.batchSpan(ctx, live)
		}
		outcomes := q.apply(ctx, live[0].rc, keys)
		if span != nil {
			endBatchSpan(span, outcomes)
		}
		for i, r := range live {
			r.result <- outcomes[i]
		}
		if q.pressure != nil && q.pressure() {
			q.rest(time.Duration(q.restFactor) * time.Since(start))
		}
	}
}

// batchSpan starts the span of one batch: a trace of its own (a batch
// gathers the events of many jobs, received in many requests), linked to
// each event's ingest span. Its statements are its children.
func (q *applyQueue) batchSpan(ctx context.Context, batch []*applyRequest) (context.Context, trace.Span) {
	return q.tracer.Start(ctx, "apply events", trace.WithNewRoot(), trace.WithLinks(applyLinks(batch)...),
		trace.WithAttributes(attribute.Int("paygate.events", len(batch)), attribute.String("paygate.provider", batch[0].key.Provider)))
}

// endBatchSpan records how many of the batch's events failed (each is
// retried alone) and ends the span.
func endBatchSpan(span trace.Span, outcomes []error) {
	failed := 0
	var first error
	for _, err := range outcomes {
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	span.SetAttributes(attribute.Int("paygate.events_failed", failed))
	if first != nil {
		span.SetStatus(codes.Error, first.Error())
	}
	span.End()
}

func (q *applyQueue) rest(d time.Duration) {
	if q.sleep != nil {
		q.sleep(d)
		return
	}
	time.Sleep(d)
}
