package webhook

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestCommitSpanUntracedCostsNothing: with tracing off no request carries
// a span, and a batch's commit gets no span and allocates nothing for it.
func TestCommitSpanUntracedCostsNothing(t *testing.T) {
	ctx := context.Background()
	reqs := []*batchRequest{{ctx: ctx, events: make([]Event, 3)}, {ctx: ctx, events: make([]Event, 1)}}
	allocs := testing.AllocsPerRun(100, func() {
		c, span := commitSpan(ctx, reqs)
		span.End()
		_ = c
	})
	require.Zero(t, allocs)
	_, span := commitSpan(ctx, reqs)
	require.False(t, span.SpanContext().IsValid())
}

// TestCommitSpanTraced: one traced request's commit is a child of its
// span, in its trace; several requests' commit is a trace of its own
// linking to each.
func TestCommitSpanTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tracer := tp.Tracer("test")
	ctxA, a := tracer.Start(context.Background(), "POST /webhooks/stripe")
	ctxB, b := tracer.Start(context.Background(), "POST /webhooks/stripe")
	// The package's tracer is the global provider's, as package tracing
	// sets it when tracing is on.
	otel.SetTracerProvider(tp)

	_, one := commitSpan(context.Background(), []*batchRequest{{ctx: ctxA, events: make([]Event, 1)}})
	one.End()
	_, many := commitSpan(context.Background(), []*batchRequest{{ctx: ctxA, events: make([]Event, 1)}, {ctx: ctxB, events: make([]Event, 2)}})
	many.End()
	a.End()
	b.End()

	ended := rec.Ended()
	require.Len(t, ended, 4)
	require.Equal(t, a.SpanContext().TraceID(), ended[0].SpanContext().TraceID())
	require.Equal(t, a.SpanContext().SpanID(), ended[0].Parent().SpanID())
	require.False(t, ended[1].Parent().IsValid(), "a batch of several is a root")
	require.Len(t, ended[1].Links(), 2)
	require.Equal(t, a.SpanContext().SpanID(), ended[1].Links()[0].SpanContext.SpanID())
	require.Equal(t, b.SpanContext().SpanID(), ended[1].Links()[1].SpanContext.SpanID())
}
