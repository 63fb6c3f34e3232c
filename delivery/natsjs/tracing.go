package natsjs

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// publishSpan starts the PRODUCER span of one message's publish, when
// tracing is on, and puts its traceparent in the message's headers, so
// that a consumer that traces continues the trace. NATS header names are
// case-sensitive: the W3C names are written as the specification spells
// them (traceparent, tracestate), lowercase. With tracing off it returns
// nil and touches nothing.
func (p *Publisher) publishSpan(ctx context.Context, m *nats.Msg, messageID string) trace.Span {
	if p.tracer == nil {
		return nil
	}
	ctx, span := p.tracer.Start(ctx, "publish "+m.Subject, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", m.Subject),
			attribute.String("messaging.message.id", messageID),
			attribute.String("paygate.message_id", messageID),
		))
	propagation.TraceContext{}.Inject(ctx, headerCarrier(m.Header))
	return span
}

// endPublishSpan ends a publish's span with JetStream's answer; span may
// be nil (tracing off).
func endPublishSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// headerCarrier writes W3C trace context into NATS headers as is (a
// propagation.HeaderCarrier would canonicalize the names to Traceparent).
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string { return nats.Header(h).Get(key) }

func (h headerCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
