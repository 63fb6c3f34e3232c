// Package tracing turns OpenTelemetry tracing on from the standard OTEL_*
// variables, and carries a span's ids into the log lines written inside
// it.
//
// Tracing is off unless an OTLP endpoint is configured
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT): then
// nothing is set up at all, no exporter, no goroutine, and the packages
// that trace (webhook, jobs, delivery, natsjs) are given a nil
// TracerProvider and install none of their instrumentation, so the hot
// path pays nothing. Everything else (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and its argument,
// OTEL_EXPORTER_OTLP_HEADERS, timeouts, compression, OTEL_BSP_*) is read
// by the SDK itself, as its specification says.
//
// It must never log or export a payload, a header or a secret: spans carry
// ids (event, message, endpoint), never bodies.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME (or
// service.name in OTEL_RESOURCE_ATTRIBUTES) does not say otherwise.
const DefaultServiceName = "paygate"

// ErrUnsupported is Setup's error for a setting it cannot honour (a
// protocol or an exporter paygate does not carry): tracing that was asked
// for and silently not done would be worse than a refusal at start.
var ErrUnsupported = errors.New("unsupported tracing setting")

// Tracing is the process's tracing: on, with an SDK TracerProvider that
// exports over OTLP/HTTP, or off.
type Tracing struct {
	provider *sdktrace.TracerProvider // nil: off
}

// Setup reads the OTEL_* variables through getenv and, when an OTLP
// endpoint is set and the SDK is not disabled (OTEL_SDK_DISABLED,
// OTEL_TRACES_EXPORTER=none), builds the TracerProvider, makes it and the
// W3C propagators (traceparent, baggage) the global ones, and sends the
// SDK's own errors (an unreachable collector) to logger. Otherwise it
// returns a Tracing that is off and sets nothing.
//
// It fails with ErrUnsupported for an OTLP protocol other than
// http/protobuf or an exporter other than otlp, or with the SDK's error
// for a malformed setting.
func Setup(ctx context.Context, getenv func(string) string, logger *slog.Logger) (*Tracing, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return &Tracing{}, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return &Tracing{}, nil
	default:
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q (paygate exports otlp, or none)", ErrUnsupported, exp)
	}
	if firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return &Tracing{}, nil
	}
	if p := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/protobuf" {
		return nil, fmt.Errorf("%w: OTLP protocol %q (paygate sends http/protobuf)", ErrUnsupported, p)
	}
	// The exporter reads the endpoint, headers, timeout, compression and
	// certificates from the environment itself.
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: after, so they win
	)
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (default
	// parentbased_always_on), the batching from OTEL_BSP_*.
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if logger != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			logger.Warn("tracing", "error", err.Error())
		}))
	}
	return &Tracing{provider: provider}, nil
}

func firstSet(getenv func(string) string, keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return ""
}

// Enabled reports whether spans are recorded and exported.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// TracerProvider is the provider the instrumented packages take: nil when
// tracing is off, which they read as "install nothing".
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if !t.Enabled() {
		return nil
	}
	return t.provider
}

// Shutdown exports the spans still queued, within ctx, and stops the
// exporter. It does nothing when tracing is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return t.provider.Shutdown(ctx)
}
