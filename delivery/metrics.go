package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paygate/paygate/outbox"
)

// Metrics are delivery's Prometheus metrics: attempts by result, and, read
// from the database at each scrape, what waits per endpoint.
type Metrics struct {
	attempts *prometheus.CounterVec
	disabled prometheus.Counter
	pending  *pendingCollector
}

// NewMetrics registers delivery's metrics with reg (nil: none).
func NewMetrics(pool *pgxpool.Pool, reg prometheus.Registerer, logger *slog.Logger) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paygate_delivery_attempts_total",
			Help: "Attempts at delivering a message to an endpoint, by result: succeeded (2xx), gone (410), " +
				"rejected (another status), or error (no answer: timeout, refused, private address).",
		}, []string{"result"}),
		disabled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paygate_delivery_endpoints_disabled_total",
			Help: "Endpoints disabled for failing (a 410, or every attempt failing for PAYGATE_DELIVERY_DISABLE_AFTER).",
		}),
		pending: &pendingCollector{pool: pool, logger: logger,
			count: prometheus.NewDesc("paygate_delivery_pending_messages",
				"Messages not yet delivered to an endpoint (pending), by endpoint.", []string{"endpoint_id"}, nil),
			age: prometheus.NewDesc("paygate_delivery_oldest_pending_seconds",
				"Age of the oldest message not yet delivered to an endpoint, by endpoint.", []string{"endpoint_id"}, nil),
			unplaced: prometheus.NewDesc("paygate_messages_unplaced",
				"Messages committed and not yet placed in the feed by the sequencer.", nil, nil),
			unfanned: prometheus.NewDesc("paygate_delivery_fanout_backlog_messages",
				"Messages placed in the feed after the place of the enabled endpoint furthest behind.", nil, nil),
			unfannedAge: prometheus.NewDesc("paygate_delivery_fanout_backlog_seconds",
				"Age of the oldest message placed in the feed after the place of the enabled endpoint furthest behind.", nil, nil),
		},
	}
	for _, r := range []string{"succeeded", "gone", "rejected", "error"} {
		m.attempts.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.attempts, m.disabled, m.pending)
	}
	return m
}

func (m *Metrics) attempt(r Result) {
	result := "rejected"
	switch {
	case r.Err != nil:
		result = "error"
	case r.Succeeded():
		result = "succeeded"
	case r.Gone():
		result = "gone"
	}
	m.attempts.WithLabelValues(result).Inc()
}

// pendingCollector reads what waits per endpoint when scraped.
type pendingCollector struct {
	pool                  *pgxpool.Pool
	logger                *slog.Logger
	count, age            *prometheus.Desc
	unfanned, unfannedAge *prometheus.Desc
	unplaced              *prometheus.Desc
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.age
	ch <- c.unfanned
	ch <- c.unfannedAge
	ch <- c.unplaced
}

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if n, _, err := outbox.Unplaced(ctx, c.pool); err == nil {
		ch <- prometheus.MustNewConstMetric(c.unplaced, prometheus.GaugeValue, float64(n))
	}
	if n, age, err := handOutLag(ctx, c.pool); err == nil {
		ch <- prometheus.MustNewConstMetric(c.unfanned, prometheus.GaugeValue, float64(n))
		ch <- prometheus.MustNewConstMetric(c.unfannedAge, prometheus.GaugeValue, age)
	}
	rows, err := c.pool.Query(ctx, `
		SELECT e.id, count(d.message_id), coalesce(extract(epoch FROM now() - min(d.message_created_at)), 0)::float8
		FROM endpoints e LEFT JOIN delivery_queue d ON d.endpoint_id = e.id AND d.status = 'pending'
		GROUP BY e.id`)
	if err != nil {
		c.logger.Warn("delivery metrics: read pending deliveries", "error", err.Error())
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id  string
			n   int64
			age float64
		)
		if err := rows.Scan(&id, &n, &age); err != nil {
			return
		}
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(n), id)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age, id)
	}
}

// handOutLag is how far the enabled endpoint furthest behind is in the
// feed: the messages placed after its place, and the age in seconds of the
// oldest of them.
func handOutLag(ctx context.Context, q Querier) (count int64, oldestSeconds float64, err error) {
	err = q.QueryRow(ctx, `
		SELECT count(*), coalesce(extract(epoch FROM now() - min(m.created_at)), 0)::float8
		FROM messages m
		WHERE m.position > (SELECT coalesce(min(e.handed_through), (SELECT last_position FROM message_sequencer))
		                    FROM endpoints e WHERE e.status = 'enabled')`).
		Scan(&count, &oldestSeconds)
	if err != nil {
		return 0, 0, fmt.Errorf("hand-out lag of the endpoints: %w", err)
	}
	return count, oldestSeconds, nil
}
