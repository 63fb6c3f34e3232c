package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paygate/paygate/inbox"
)

// QueueCollector reports River's queue depth and the inbox's events by
// status at scrape time, so the numbers are read, never kept in memory.
type QueueCollector struct {
	pool  *pgxpool.Pool
	jobs  *prometheus.Desc
	inbox *prometheus.Desc
}

// NewQueueCollector returns a collector over pool.
func NewQueueCollector(pool *pgxpool.Pool) *QueueCollector {
	return &QueueCollector{
		pool: pool,
		jobs: prometheus.NewDesc("paygate_river_jobs", "River jobs not yet finished, by queue and state.",
			[]string{"queue", "state"}, nil),
		inbox: prometheus.NewDesc("paygate_inbox_events", "Inbox events by status (poison: waiting for ops).",
			[]string{"status"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.inbox
}

// Collect implements prometheus.Collector.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, `
		SELECT queue, state::text, count(*) FROM river_job
		WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending')
		GROUP BY queue, state`)
	if err == nil {
		for rows.Next() {
			var queue, state string
			var n int64
			if rows.Scan(&queue, &state, &n) == nil {
				ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(n), queue, state)
			}
		}
		rows.Close()
	}
	// The kept counters, not a count of the inbox: a scrape costs the same
	// at any size.
	if counts, err := inbox.Counts(ctx, c.pool); err == nil {
		for _, s := range inbox.Statuses {
			ch <- prometheus.MustNewConstMetric(c.inbox, prometheus.GaugeValue, float64(counts[s]), string(s))
		}
	}
}
