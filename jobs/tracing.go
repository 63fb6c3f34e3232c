package jobs

import (
	"context"
	"encoding/json"

	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Traces of the jobs. River's own middleware (otelriver) gives every
// job's work a span, linked to the span that inserted the job through the
// job's metadata (traceparent). Events are not applied one job at a time
// but in batches gathered from many jobs (applyQueue), so each job that
// applies events also keeps, in its metadata, the span each of its events
// was received in (ingestSpansKey, in the order of its events), and the
// span of the batch that applies them links to every one: from an event's
// webhook a trace backend finds the batch that applied it, and back.

// ingestSpansKey is the metadata key of a job's events' ingest spans, W3C
// traceparent strings, one per event in the order of the job's args (an
// empty string for an event that had none).
const ingestSpansKey = "paygate_ingest_spans"

// tracerName names paygate's own spans of applying.
const tracerName = "github.com/paygate/paygate/jobs"

// riverMiddleware is River's OpenTelemetry middleware for the client, or
// nil when tracing is off: then nothing is installed, and a job costs what
// it did.
func riverMiddleware(tp trace.TracerProvider) []rivertype.Middleware {
	if tp == nil {
		return nil
	}
	return []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		TracerProvider:              tp,
		EnableTracePropagation:      true,
		EnableWorkSpanJobKindSuffix: true,
	})}
}

// ingestMetadata is the metadata of a job whose events were received in
// spans (spans[i] for its i-th event); nil when none was traced.
func ingestMetadata(spans []trace.SpanContext) []byte {
	var parents []string
	for i, sc := range spans {
		if !sc.IsValid() {
			continue
		}
		if parents == nil {
			parents = make([]string, len(spans))
		}
		parents[i] = traceparent(sc)
	}
	if parents == nil {
		return nil
	}
	meta, err := json.Marshal(map[string][]string{ingestSpansKey: parents})
	if err != nil {
		return nil
	}
	return meta
}

// ingestSpans reads the ingest spans of a job's n events from its
// metadata: nil when it has none (tracing was off when it was inserted, or
// the sweeper or an operator inserted it), else one per event, invalid
// where unknown.
func ingestSpans(metadata []byte, n int) []trace.SpanContext {
	if len(metadata) == 0 {
		return nil
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(metadata, &meta) != nil || meta[ingestSpansKey] == nil {
		return nil
	}
	var parents []string
	if json.Unmarshal(meta[ingestSpansKey], &parents) != nil || len(parents) != n {
		return nil
	}
	spans := make([]trace.SpanContext, n)
	for i, p := range parents {
		if p != "" {
			spans[i] = trace.SpanContextFromContext(propagation.TraceContext{}.Extract(
				context.Background(), propagation.MapCarrier{"traceparent": p}))
		}
	}
	return spans
}

func traceparent(sc trace.SpanContext) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier["traceparent"]
}

// applyLinks are the links of an apply batch's span: one per event with
// its ingest span, named by the event.
func applyLinks(batch []*applyRequest) []trace.Link {
	var links []trace.Link
	for _, r := range batch {
		if r.ingest.IsValid() {
			links = append(links, trace.Link{SpanContext: r.ingest,
				Attributes: []attribute.KeyValue{attribute.String("paygate.event_id", r.key.EventID)}})
		}
	}
	return links
}

// jobIngestSpans is ingestSpans for a job worked by River.
func jobIngestSpans(job *rivertype.JobRow, n int) []trace.SpanContext {
	if job == nil {
		return nil
	}
	return ingestSpans(job.Metadata, n)
}
