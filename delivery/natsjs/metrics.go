package natsjs

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	published *prometheus.CounterVec
	errors    prometheus.Counter
}

func newMetrics(p *Publisher, reg prometheus.Registerer) *metrics {
	m := &metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paygate_nats_published_messages_total",
			Help: "Messages JetStream acknowledged, by result: stored, or duplicate (it held the id already: published again after a crash or a failed batch).",
		}, []string{"result"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paygate_nats_publish_errors_total",
			Help: "Batches that failed to publish to JetStream (NATS down, an acknowledgement missing or refused, a full stream); each is retried.",
		}),
	}
	m.published.WithLabelValues("stored")
	m.published.WithLabelValues("duplicate")
	if reg != nil {
		reg.MustRegister(m.published, m.errors, &backlogCollector{p: p,
			count: prometheus.NewDesc("paygate_nats_backlog_messages",
				"Messages placed in the feed and not yet published to JetStream.", nil, nil),
			age: prometheus.NewDesc("paygate_nats_backlog_seconds",
				"Age of the oldest message placed in the feed and not yet published to JetStream.", nil, nil),
			failing: prometheus.NewDesc("paygate_nats_failing_seconds",
				"How long publishing to JetStream has failed without a success (0 while it works).", nil, nil),
		})
	}
	return m
}

// backlogCollector reads the backlog from the database when scraped.
type backlogCollector struct {
	p                   *Publisher
	count, age, failing *prometheus.Desc
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.age
	ch <- c.failing
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.p.Status(ctx)
	if err != nil {
		c.p.config.Logger.Warn("nats metrics: read the backlog", "error", err.Error())
		return
	}
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(s.Backlog))
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, s.OldestSeconds)
	var failing float64
	if s.FailingSince != nil {
		failing = time.Since(*s.FailingSince).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, failing)
}
