package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/inbox"
)

// onIngestLockTimeout is the longest applying in an ingest transaction
// waits for a lock (a payment another batch is applying, a reference's
// double-charge lock, the feed's sequencer). Past it the events go to
// their apply_events job instead: a webhook's answer never waits long on
// applying.
const onIngestLockTimeout = 50 * time.Millisecond

// Outcomes of applying on ingest (paygate_apply_on_ingest_total).
const (
	onIngestApplied   = "applied"    // committed with the events
	onIngestPressure  = "pressure"   // not tried: ingest was under pressure
	onIngestHandedOff = "handed_off" // tried, rolled back, left to a job
)

// applyOnIngest applies the new events of an ingest transaction in that
// transaction, when ingest is not under pressure: the events commit
// processed, with every effect, and need no job. That saves what applying
// them later costs: the apply_events job's insert, fetch and completion,
// the events' second read and a second commit.
//
// It applies them exactly as a batch of the apply queue would (the same
// applyTx, the same claims, all or nothing), under a savepoint. When
// anything would keep one of them from being applied there (an event the
// batch would leave out or fail, a payment another batch of this process
// holds, a lock not had within onIngestLockTimeout), everything it did is
// rolled back to the savepoint and the events get their apply_events job,
// as they would without it: from there on, retries, attempts and poison
// are the job's.
type applyOnIngest struct {
	applier  *applier
	pressure func() bool // nil: never under pressure
	tracer   trace.Tracer
	outcomes *prometheus.CounterVec
}

func newApplyOnIngest(a *applier, pressure func() bool, tp trace.TracerProvider, reg prometheus.Registerer) *applyOnIngest {
	o := &applyOnIngest{
		applier:  a,
		pressure: pressure,
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paygate_apply_on_ingest_total",
			Help: "Ingest transactions by what became of applying their new events in them: applied, " +
				"pressure (not tried) or handed_off (left to an apply_events job).",
		}, []string{"outcome"}),
	}
	if tp != nil {
		o.tracer = tp.Tracer(tracerName)
	}
	if reg != nil {
		reg.MustRegister(o.outcomes)
	}
	return o
}

// applyTx applies keys in tx under a savepoint and reports whether it did.
// When it did not, tx is as it was before the call. It fails only when tx
// itself failed (the savepoint could not be set or rolled back): the
// ingest transaction cannot commit.
func (o *applyOnIngest) applyTx(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], keys []inbox.Key, ingest []trace.SpanContext) (bool, error) {
	if len(keys) == 0 || len(keys) > maxApplyBatch {
		return false, nil
	}
	if o.pressure != nil && o.pressure() {
		o.outcomes.WithLabelValues(onIngestPressure).Inc()
		return false, nil
	}
	var span trace.Span
	if o.tracer != nil && ingest != nil {
		ctx, span = o.tracer.Start(ctx, "apply events", trace.WithLinks(onIngestLinks(keys, ingest)...),
			trace.WithAttributes(attribute.Int("paygate.events", len(keys)), attribute.String("paygate.provider", keys[0].Provider),
				attribute.Bool("paygate.on_ingest", true)))
		defer span.End()
	}
	a := o.applier
	start := time.Now()
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, err
	}
	claims := a.claims.begin()
	// Released before the ingest commit: a batch that then takes one of
	// these payments waits in the database for that commit, milliseconds.
	defer claims.release()
	outcomes, err := o.applySavepoint(ctx, sp, rc, keys, claims)
	if err == nil {
		err = errors.Join(outcomes...)
	}
	if err == nil {
		err = sp.Commit(ctx) // releases the savepoint
	}
	if err == nil {
		a.sizes.Observe(float64(len(keys)))
		a.seconds.Observe(time.Since(start).Seconds())
		o.outcomes.WithLabelValues(onIngestApplied).Inc()
		return true, nil
	}
	o.outcomes.WithLabelValues(onIngestHandedOff).Inc()
	if span != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	if rbErr := sp.Rollback(ctx); rbErr != nil {
		return false, fmt.Errorf("roll back applying on ingest (%w): %w", err, rbErr)
	}
	return false, nil
}

// applySavepoint is applyTx's work under its savepoint, with its waits for
// locks bounded (SET LOCAL ends with the savepoint when it is rolled back,
// and with the ingest transaction otherwise: only the commit follows).
func (o *applyOnIngest) applySavepoint(ctx context.Context, sp pgx.Tx, rc *river.Client[pgx.Tx], keys []inbox.Key, claims *claimSet) ([]error, error) {
	if _, err := sp.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", onIngestLockTimeout.Milliseconds())); err != nil {
		return nil, err
	}
	return o.applier.applyTx(ctx, sp, rc, keys, claims)
}

// onIngestLinks are the links of an apply span on ingest: one per event
// received in a traced request.
func onIngestLinks(keys []inbox.Key, ingest []trace.SpanContext) []trace.Link {
	var links []trace.Link
	for i, sc := range ingest {
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc,
				Attributes: []attribute.KeyValue{attribute.String("paygate.event_id", keys[i].EventID)}})
		}
	}
	return links
}
