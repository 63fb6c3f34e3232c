package reconcile

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector reports reconciliation for alerts, read from the runs at
// scrape time: when each provider's statements last reconciled, and how
// many exceptions finance has not resolved.
type Collector struct {
	pool       *pgxpool.Pool
	last       *prometheus.Desc
	exceptions *prometheus.Desc
}

// NewCollector returns a collector over pool.
func NewCollector(pool *pgxpool.Pool) *Collector {
	return &Collector{
		pool: pool,
		last: prometheus.NewDesc("paygate_reconciliation_last_success_timestamp_seconds",
			"When the last reconciliation run that completed finished, by provider and scope (day: a UTC day's "+
				"balance transactions; batch: a settlement batch's report), as a Unix time.",
			[]string{"provider", "scope"}, nil),
		exceptions: prometheus.NewDesc("paygate_reconciliation_open_exceptions",
			"Exceptions (amount or currency mismatch, a movement missing on one side) of each day's or batch's "+
				"latest completed run that finance has not resolved, by provider.",
			[]string{"provider"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.last
	ch <- c.exceptions
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, `
		SELECT provider, CASE WHEN batch IS NULL THEN 'day' ELSE 'batch' END,
		       extract(epoch FROM max(finished_at))::float8
		FROM reconciliation_runs WHERE status = 'completed' GROUP BY 1, 2`)
	if err != nil {
		return
	}
	for rows.Next() {
		var provider, scope string
		var at float64
		if rows.Scan(&provider, &scope, &at) == nil {
			ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue, at, provider, scope)
		}
	}
	rows.Close()
	// A day or batch run again supersedes its earlier runs: only the
	// latest completed run of each is finance's to resolve.
	rows, err = c.pool.Query(ctx, `
		WITH latest AS (
			SELECT DISTINCT ON (provider, date, batch) id, provider
			FROM reconciliation_runs WHERE status = 'completed'
			ORDER BY provider, date, batch, id DESC)
		SELECT l.provider, count(i.id) FILTER (WHERE i.id IS NOT NULL AND r.item_id IS NULL)
		FROM latest l
		LEFT JOIN (`+itemTables+`) ON i.run_id = l.id AND `+exceptionCondition+`
		GROUP BY l.provider`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var provider string
		var open int64
		if rows.Scan(&provider, &open) == nil {
			ch <- prometheus.MustNewConstMetric(c.exceptions, prometheus.GaugeValue, float64(open), provider)
		}
	}
}
