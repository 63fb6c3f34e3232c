package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paygate/paygate/inbox"
)

// HealthCollector reports, at scrape time, whether the database answers
// and how long the oldest acknowledged event has waited to be applied:
// the two numbers an on-call engineer is paged on when ingest is fine but
// nothing moves. Every other collector leaves its series out when the
// database does not answer, so "the database is down" needs a series of
// its own that says 0.
type HealthCollector struct {
	pool   *pgxpool.Pool
	up     *prometheus.Desc
	oldest *prometheus.Desc
}

// NewHealthCollector returns a collector over pool.
func NewHealthCollector(pool *pgxpool.Pool) *HealthCollector {
	return &HealthCollector{
		pool: pool,
		up: prometheus.NewDesc("paygate_database_up",
			"1 when PostgreSQL answered a query within 2 s at this scrape, else 0.", nil, nil),
		oldest: prometheus.NewDesc("paygate_inbox_oldest_received_seconds",
			"Age of the oldest inbox event acknowledged and not yet applied (status received); 0 when none.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *HealthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *HealthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	age, err := inbox.OldestReceived(ctx, c.pool)
	up := 0.0
	if err == nil {
		up = 1
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age.Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}
