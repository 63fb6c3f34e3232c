package jobs

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// TestIngestSpansRoundTrip: the ingest spans kept in a job's metadata come
// back in the order of its events, an unknown one invalid; metadata with
// none (tracing off, the sweeper's jobs, otelriver's traceparent alone)
// gives none; untraced events add no metadata.
func TestIngestSpansRoundTrip(t *testing.T) {
	a := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	b := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}})
	meta := ingestMetadata([]trace.SpanContext{a, {}, b})
	require.NotNil(t, meta)
	got := ingestSpans(meta, 3)
	require.Len(t, got, 3)
	for i, want := range []trace.SpanContext{a, {}, b} {
		require.Equal(t, want.TraceID(), got[i].TraceID(), i)
		require.Equal(t, want.SpanID(), got[i].SpanID(), i)
		require.Equal(t, want.IsValid(), got[i].IsValid(), i)
	}
	require.True(t, got[0].IsRemote())
	require.Nil(t, ingestSpans(meta, 2), "a count that does not match the job's events is ignored")

	require.Nil(t, ingestMetadata(nil))
	require.Nil(t, ingestMetadata(make([]trace.SpanContext, 4)))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = ingestMetadata(nil) }))
	require.Nil(t, ingestSpans(nil, 1))
	require.Nil(t, ingestSpans([]byte(`{"traceparent":"00-0102030000000000000000000000000000-0405000000000000-01"}`), 1))
	require.Nil(t, ingestSpans([]byte(`not json`), 1))
}
