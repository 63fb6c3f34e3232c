package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"go.opentelemetry.io/otel/attribute"

	"github.com/paygate/paygate/tracing"
)

// startTracing turns tracing on when the OTEL_* variables ask for it
// (package tracing), and then returns logger with its lines inside a span
// carrying the span's ids. Off, it returns logger as it is.
func startTracing(ctx context.Context, logger *slog.Logger) (*tracing.Tracing, *slog.Logger, error) {
	tr, err := tracing.Setup(ctx, getenv, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	if !tr.Enabled() {
		return tr, logger, nil
	}
	logger = slog.New(tracing.LogHandler(logger.Handler()))
	logger.Info("tracing on: spans are exported over OTLP/HTTP")
	return tr, logger, nil
}

// poolTracer is the pool's tracer: the statement counter, and with
// tracing on, a span per statement (otelpgx), whose db.system is
// postgresql as the older semantic conventions that most backends still
// index name it (otelpgx writes the newer db.system.name too). Statements'
// parameters are never recorded: they hold payment data.
func poolTracer(tr *tracing.Tracing, statements *statementCounter) pgx.QueryTracer {
	if !tr.Enabled() {
		return statements
	}
	return multitracer.New(statements, otelpgx.NewTracer(
		otelpgx.WithTracerProvider(tr.TracerProvider()),
		otelpgx.WithTracerAttributes(attribute.String("db.system", "postgresql")),
		otelpgx.WithDisableConnectionDetailsInAttributes(),
	))
}
