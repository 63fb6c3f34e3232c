package natsjs_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/delivery/natsjs"
)

// TestPublishCarriesTraceparent: with tracing on, each message's publish is
// a PRODUCER span and the message carries its traceparent, under the W3C
// name as the specification spells it; with tracing off, no header is
// added.
func TestPublishCarriesTraceparent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	p := b.publisher(t, func(c *natsjs.Config) { c.TracerProvider = tp })
	msgs := interleaved(t, "pi_traced", 2, 2)
	b.write(t, msgs...)
	b.sequence(t)
	_, err := p.Publish(t.Context(), b.river)
	require.NoError(t, err)

	got := stored(t, b.nats.url(), natsjs.DefaultStream)
	require.Len(t, got, len(msgs))
	ended := map[string]bool{} // span id → ended as a PRODUCER span
	for _, s := range spans.Ended() {
		if s.SpanKind() == trace.SpanKindProducer {
			ended[s.SpanContext().SpanID().String()] = true
		}
	}
	for _, m := range got {
		tp := m.Header.Get("traceparent")
		require.Len(t, tp, 55, "message %s: traceparent %q", m.Header.Get(jetstream.MsgIDHeader), tp)
		require.True(t, ended[tp[36:52]], "its publish span %s was recorded and ended", tp[36:52])
	}
	require.Len(t, ended, len(msgs))
}

// TestPublishUntracedAddsNothing: with tracing off the messages carry
// only their id.
func TestPublishUntracedAddsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.publisher(t)
	msgs := interleaved(t, "pi_untraced", 1, 2)
	b.write(t, msgs...)
	b.sequence(t)
	_, err := p.Publish(t.Context(), b.river)
	require.NoError(t, err)
	for _, m := range stored(t, b.nats.url(), natsjs.DefaultStream) {
		require.Empty(t, m.Header.Get("traceparent"))
		require.Empty(t, m.Header.Get("Traceparent"))
	}
}
