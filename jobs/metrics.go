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
	pool   *pgxpool.Pool
	queues []string
	jobs   *prometheus.Desc
	inbox  *prometheus.Desc
}

// unfinishedStates are the job states the depth gauge reports.
var unfinishedStates = []string{"available", "running", "retryable", "scheduled", "pending"}

// NewQueueCollector returns a collector over pool. Each of queues (those the
// server runs) is reported in every unfinished state, at zero when it holds
// no job: an idle queue reads 0 on a dashboard or in an alert, not "no
// data". A queue only the job table knows is reported as it stands.
func NewQueueCollector(pool *pgxpool.Pool, queues ...string) *QueueCollector {
	return &QueueCollector{
		pool:   pool,
		queues: queues,
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
		WHERE state = ANY($1::river_job_state[])
		GROUP BY queue, state`, unfinishedStates)
	if err == nil {
		depth := map[[2]string]int64{}
		for _, q := range c.queues {
			for _, s := range unfinishedStates {
				depth[[2]string{q, s}] = 0
			}
		}
		for rows.Next() {
			var queue, state string
			var n int64
			if rows.Scan(&queue, &state, &n) == nil {
				depth[[2]string{queue, state}] = n
			}
		}
		rows.Close()
		if rows.Err() == nil {
			for k, n := range depth {
				ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(n), k[0], k[1])
			}
		}
	}
	// The kept counters, not a count of the inbox: a scrape costs the same
	// at any size.
	if counts, err := inbox.Counts(ctx, c.pool); err == nil {
		for _, s := range inbox.Statuses {
			ch <- prometheus.MustNewConstMetric(c.inbox, prometheus.GaugeValue, float64(counts[s]), string(s))
		}
	}
}
