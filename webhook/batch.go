package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of BatchConfig.
const (
	DefaultBatchMaxEvents = 128
	DefaultBatchMaxWait   = 2 * time.Millisecond
	// DefaultBatchFlushers: a batch's statements take a few milliseconds
	// of the database, its commit about 20 under load, mostly waiting
	// (for the WAL flush, for a CPU); eight batches in flight instead of
	// four raised ingest by about a third in make bench.
	DefaultBatchFlushers = 8
)

// BatchConfig configures a BatchIngester.
type BatchConfig struct {
	Pool    *pgxpool.Pool
	Enqueue Enqueuer
	// MaxEvents is the most events one transaction commits; default
	// DefaultBatchMaxEvents.
	MaxEvents int
	// MaxWait is how long a batch waits for company after its first event
	// before it is committed; default DefaultBatchMaxWait. A batch that
	// fills up goes at once.
	MaxWait time.Duration
	// Flushers is how many batches may be committing at once, so that one
	// slow commit does not hold back the events behind it; default
	// DefaultBatchFlushers. While every flusher is busy the next batch keeps
	// filling, so batches grow with the load.
	Flushers int
	// Timeout bounds one batch's transaction; default 5s, the handler's own
	// bound.
	Timeout    time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are not registered
}

// BatchIngester commits concurrent events together: group commit. Events
// arriving within MaxWait of each other share one transaction (one
// multi-row inbox insert and one job insert for the new ones), so a commit's
// fsync is paid once per batch instead of once per event.
//
// Every caller is answered only after its batch committed, with its own
// result: new for the first copy of an event the inbox did not have,
// duplicate for every other. A batch that fails fails every event in it,
// after one more try of each event alone (see Ingest). It is safe for
// concurrent use; Close stops it.
type BatchIngester struct {
	config   BatchConfig
	mu       sync.RWMutex // guards closed against sends on a closed requests
	closed   bool
	requests chan *batchRequest
	batches  chan []*batchRequest
	done     sync.WaitGroup
	sizes    prometheus.Histogram
	commits  prometheus.Histogram
	waiting  atomic.Int64 // callers in IngestAll
}

var _ Ingester = (*BatchIngester)(nil)

// pressureCallers is how many callers waiting on their commits put the
// ingester under pressure: well above what a steady sender keeps in flight
// (at 1,000 events/s, about six), reached when senders queue up, as a
// provider's retries of a backlog do.
const pressureCallers = 32

// UnderPressure reports that at least pressureCallers callers are waiting
// on their commits. The appliers rest between batches while it holds
// (jobs.Config.IngestPressure).
func (b *BatchIngester) UnderPressure() bool {
	return b.waiting.Load() >= pressureCallers
}

// batchRequest is one caller's events: they commit together or not at all,
// in whatever batch they land.
type batchRequest struct {
	ctx    context.Context // the caller's: a caller that gave up is left out of a batch not yet begun
	events []Event
	result chan batchResult // buffered: a flusher never waits for a caller
}

type batchResult struct {
	duplicate []bool
	err       error
}

// NewBatchIngester starts a BatchIngester's collector and flushers.
func NewBatchIngester(config BatchConfig) *BatchIngester {
	if config.MaxEvents <= 0 {
		config.MaxEvents = DefaultBatchMaxEvents
	}
	if config.MaxWait <= 0 {
		config.MaxWait = DefaultBatchMaxWait
	}
	if config.Flushers <= 0 {
		config.Flushers = DefaultBatchFlushers
	}
	if config.Timeout <= 0 {
		config.Timeout = ingestTimeout
	}
	if config.Logger == nil {
		config.Logger = slog.New(slog.DiscardHandler)
	}
	b := &BatchIngester{
		config:   config,
		requests: make(chan *batchRequest, config.MaxEvents*config.Flushers),
		batches:  make(chan []*batchRequest),
		sizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "paygate_ingest_batch_events",
			Help:    "Events committed per ingest transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		commits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "paygate_ingest_batch_seconds",
			Help:    "Time to commit one batch of webhook events and their jobs.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	if config.Registerer != nil {
		config.Registerer.MustRegister(b.sizes, b.commits)
	}
	b.done.Add(1 + config.Flushers)
	go b.collect()
	for range config.Flushers {
		go b.flushLoop()
	}
	return b
}

// Ingest implements Ingester: it queues e for the next batch and waits for
// that batch's commit.
//
// It fails with an error wrapping ErrUnavailable when the batch could not
// commit or the ingester is closed; nothing is then acknowledged. When ctx
// ends while the batch is committing, Ingest returns at once with ctx's
// error but the batch may still commit the event: that loses nothing and
// doubles nothing, since the caller got no 2xx and the provider's retry
// finds the event stored and is answered duplicate:true. A caller that gave
// up before its batch began is left out of it.
func (b *BatchIngester) Ingest(ctx context.Context, e Event) (duplicate bool, err error) {
	dup, err := b.IngestAll(ctx, []Event{e})
	if err != nil {
		return false, err
	}
	return dup[0], nil
}

// IngestAll implements Ingester: events share a batch, always the same
// one, and commit together or not at all, like Ingest's one event.
func (b *BatchIngester) IngestAll(ctx context.Context, events []Event) (duplicate []bool, err error) {
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	r := &batchRequest{ctx: ctx, events: events, result: make(chan batchResult, 1)}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return nil, fmt.Errorf("%w: ingester closed", ErrUnavailable)
	}
	select {
	case b.requests <- r:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		return nil, unavailable(ctx.Err())
	}
	select {
	case res := <-r.result:
		return res.duplicate, res.err
	case <-ctx.Done():
		return nil, unavailable(ctx.Err())
	}
}

// Close stops taking events, commits those already queued and returns when
// every batch has finished. Call it after the HTTP server stopped; later
// Ingest calls fail with ErrUnavailable.
func (b *BatchIngester) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.requests)
	}
	b.mu.Unlock()
	b.done.Wait()
	return nil
}

// collect forms batches: it starts one with the first waiting event, fills
// it until it is full or MaxWait has passed, then hands it to a free
// flusher, filling it further while none is free.
func (b *BatchIngester) collect() {
	defer b.done.Done()
	defer close(b.batches)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		first, ok := <-b.requests
		if !ok {
			return
		}
		batch := make([]*batchRequest, 1, b.config.MaxEvents)
		batch[0] = first
		events := len(first.events)
		open := true
		timer.Reset(b.config.MaxWait)
	fill:
		for events < b.config.MaxEvents {
			select {
			case r, ok := <-b.requests:
				if !ok {
					open = false
					break fill
				}
				batch, events = append(batch, r), events+len(r.events)
			case <-timer.C:
				break fill
			}
		}
		timer.Stop()
	handoff:
		for {
			if !open || events >= b.config.MaxEvents {
				b.batches <- batch
				break
			}
			select {
			case b.batches <- batch:
				break handoff
			case r, ok := <-b.requests:
				if !ok {
					open = false
					continue
				}
				batch, events = append(batch, r), events+len(r.events)
			}
		}
		if !open { // closed and drained: a closed channel yields what it holds first
			return
		}
	}
}

func (b *BatchIngester) flushLoop() {
	defer b.done.Done()
	for batch := range b.batches {
		b.flush(batch)
	}
}

// flush commits one batch and answers each of its callers.
func (b *BatchIngester) flush(batch []*batchRequest) {
	live := batch[:0]
	for _, r := range batch {
		if r.ctx.Err() == nil {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.config.Timeout)
	defer cancel()
	ctx, span := commitSpan(ctx, live)
	defer span.End()
	start := time.Now()
	duplicates, err := b.commit(ctx, live)
	b.commits.Observe(time.Since(start).Seconds())
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	if err == nil {
		b.sizes.Observe(float64(countEvents(live)))
		for i, r := range live {
			r.result <- batchResult{duplicate: duplicates[i]}
		}
		return
	}
	if len(live) == 1 || ctx.Err() != nil {
		b.fail(live, err)
		return
	}
	// The database refused the batch as a whole. One event it can never
	// store (a NUL in an id, say) would otherwise fail every neighbour on
	// each of the provider's retries: try each request alone (its events
	// still together), in arrival order, so copies of one event still get
	// one new and the rest duplicate.
	b.config.Logger.Warn("ingest batch failed; committing its requests one by one",
		"requests", len(live), "events", countEvents(live), "error", err.Error())
	for _, r := range live {
		duplicates, err := b.commit(ctx, []*batchRequest{r})
		if err != nil {
			b.fail([]*batchRequest{r}, err)
			continue
		}
		b.sizes.Observe(float64(len(r.events)))
		r.result <- batchResult{duplicate: duplicates[0]}
	}
}

// fail answers every request of a batch that did not commit. The batch's
// context is its own, never a caller's, so even a cancellation is the
// database not answering in time: ErrUnavailable.
func (b *BatchIngester) fail(reqs []*batchRequest, err error) {
	err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	for _, r := range reqs {
		r.result <- batchResult{err: err}
	}
}

// tracer is the batches' tracer: the global provider's, set by package
// tracing when tracing is on. Batches are traced only when their requests
// are (a request's context carries a span), so with tracing off a batch
// costs nothing more.
var tracer = otel.Tracer("github.com/paygate/paygate/webhook")

// commitSpan starts the span of a batch's commit when its requests were
// traced. The batch's statements are its children. A batch of one request
// is part of that request's trace; a batch of several is a trace of its
// own linking to each request's (one trace per request, not one giant
// trace of every request that shared a commit).
func commitSpan(ctx context.Context, reqs []*batchRequest) (context.Context, trace.Span) {
	var links []trace.Link
	for _, r := range reqs {
		if sc := trace.SpanContextFromContext(r.ctx); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if links == nil {
		return ctx, trace.SpanFromContext(ctx) // a no-op span: ctx has none
	}
	attrs := trace.WithAttributes(attribute.Int("paygate.requests", len(reqs)), attribute.Int("paygate.events", countEvents(reqs)))
	if len(reqs) == 1 {
		return tracer.Start(trace.ContextWithSpanContext(ctx, links[0].SpanContext), "ingest commit", attrs)
	}
	return tracer.Start(ctx, "ingest commit", trace.WithNewRoot(), trace.WithLinks(links...), attrs)
}

// commit stores every request's events, and the jobs of the new ones, in
// one transaction. duplicates[i][j] reports whether reqs[i].events[j] is not
// the first copy of an event the inbox did not have.
func (b *BatchIngester) commit(ctx context.Context, reqs []*batchRequest) (duplicates [][]bool, err error) {
	events := make([]Event, 0, countEvents(reqs))
	var spans []trace.SpanContext // each event's request's span, when traced
	for _, r := range reqs {
		events = append(events, r.events...)
		if sc := trace.SpanContextFromContext(r.ctx); sc.IsValid() || spans != nil {
			if spans == nil {
				spans = make([]trace.SpanContext, len(events)-len(r.events), cap(events))
			}
			for range r.events {
				spans = append(spans, sc)
			}
		}
	}
	var flat []bool
	err = pgx.BeginFunc(ctx, b.config.Pool, func(tx pgx.Tx) error {
		flat, err = insertTx(ctx, tx, b.config.Enqueue, events, spans)
		return err
	})
	if err != nil {
		return nil, err
	}
	duplicates = make([][]bool, len(reqs))
	for i, r := range reqs {
		duplicates[i], flat = flat[:len(r.events):len(r.events)], flat[len(r.events):]
	}
	return duplicates, nil
}

func countEvents(reqs []*batchRequest) int {
	n := 0
	for _, r := range reqs {
		n += len(r.events)
	}
	return n
}
