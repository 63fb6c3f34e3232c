package main

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// statementCounter counts what paygate asks of PostgreSQL: statements
// (BEGIN and COMMIT included, as pgbench counts them) and round trips (a
// batch is one), for the per-event budget make bench reports
// (docs/performance.md). PostgreSQL's own view, pg_stat_statements, needs a
// preloaded library the server may not have; this costs two atomic adds.
type statementCounter struct {
	statements, roundTrips atomic.Uint64
}

var (
	_ pgx.QueryTracer      = (*statementCounter)(nil)
	_ pgx.BatchTracer      = (*statementCounter)(nil)
	_ prometheus.Collector = (*statementCounter)(nil)
)

var (
	statementsDesc = prometheus.NewDesc("paygate_db_statements_total",
		"Statements sent to PostgreSQL, BEGIN and COMMIT included.", nil, nil)
	roundTripsDesc = prometheus.NewDesc("paygate_db_round_trips_total",
		"Round trips to PostgreSQL: a statement, or a batch of them.", nil, nil)
)

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	c.roundTrips.Add(1)
	return ctx
}

func (*statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.roundTrips.Add(1)
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}

func (*statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Describe implements prometheus.Collector.
func (c *statementCounter) Describe(ch chan<- *prometheus.Desc) {
	ch <- statementsDesc
	ch <- roundTripsDesc
}

// Collect implements prometheus.Collector.
func (c *statementCounter) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(statementsDesc, prometheus.CounterValue, float64(c.statements.Load()))
	ch <- prometheus.MustNewConstMetric(roundTripsDesc, prometheus.CounterValue, float64(c.roundTrips.Load()))
}
