package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/tracing"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestSetupOffUnlessAnEndpoint: no endpoint, the SDK disabled, or the
// exporter none, and tracing is off: no provider for anyone to install.
func TestSetupOffUnlessAnEndpoint(t *testing.T) {
	for name, vars := range map[string]map[string]string{
		"nothing set":       {},
		"no endpoint":       {"OTEL_SERVICE_NAME": "paygate", "OTEL_TRACES_SAMPLER": "always_on"},
		"sdk disabled":      {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
		"exporter none":     {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces", "OTEL_TRACES_EXPORTER": "none"},
		"blank endpoint":    {"OTEL_EXPORTER_OTLP_ENDPOINT": "  "},
		"protocol, no host": {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
	} {
		tr, err := tracing.Setup(context.Background(), env(vars), nil)
		require.NoError(t, err, name)
		require.False(t, tr.Enabled(), name)
		require.Nil(t, tr.TracerProvider(), name)
		require.NoError(t, tr.Shutdown(context.Background()), name)
	}
}

// TestSetupRefusesWhatItCannotDo: a protocol or an exporter paygate does
// not carry is an error at start, not tracing silently off.
func TestSetupRefusesWhatItCannotDo(t *testing.T) {
	for name, vars := range map[string]map[string]string{
		"grpc":          {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		"traces json":   {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
		"zipkin":        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"},
		"zipkin, no ep": {"OTEL_TRACES_EXPORTER": "zipkin"},
	} {
		_, err := tracing.Setup(context.Background(), env(vars), nil)
		require.ErrorIs(t, err, tracing.ErrUnsupported, name)
	}
}

// TestLogHandler: a line logged inside a span carries its trace and span
// ids; one outside carries neither; the logger's own attributes stay.
func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	logger.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "inside")
	logger.InfoContext(context.Background(), "outside")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var inside, outside map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &inside))
	require.NoError(t, json.Unmarshal(lines[1], &outside))
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", inside["trace_id"])
	require.Equal(t, "00f067aa0ba902b7", inside["span_id"])
	require.Equal(t, "test", inside["component"])
	require.NotContains(t, outside, "trace_id")
	require.NotContains(t, outside, "span_id")
	require.Equal(t, "test", outside["component"])
}

// TestSetupOn: an endpoint turns tracing on, with a provider to install,
// and Shutdown stops it.
func TestSetupOn(t *testing.T) {
	tr, err := tracing.Setup(context.Background(), env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
	}), nil)
	require.NoError(t, err)
	require.True(t, tr.Enabled())
	require.NotNil(t, tr.TracerProvider())
	require.NoError(t, tr.Shutdown(context.Background()))
}
