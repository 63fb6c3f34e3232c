package sweep

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the sweep's Prometheus metrics. A nil *Metrics counts
// nothing.
type Metrics struct {
	events       *prometheus.CounterVec
	failures     *prometheus.CounterVec
	lastFinished *prometheus.GaugeVec
}

// NewMetrics returns the metrics, registered with reg when it is not nil:
//
//	paygate_sweep_events_total{provider,result="new|known"}  events listed by sweeps: ingested, or already in the inbox
//	paygate_sweep_errors_total{provider}                     list requests that failed (after the API client's own retries)
//	paygate_sweep_last_finished_timestamp_seconds{provider}  when a sweep last reached the end of its window
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paygate_sweep_events_total",
			Help: "Events the missed-event sweep listed: new (ingested: their webhook never arrived) or known (already in the inbox).",
		}, []string{"provider", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paygate_sweep_errors_total",
			Help: "List requests of the missed-event sweep that failed, after the API client's own retries.",
		}, []string{"provider"}),
		lastFinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "paygate_sweep_last_finished_timestamp_seconds",
			Help: "When the missed-event sweep last reached the end of its window (Unix seconds).",
		}, []string{"provider"}),
	}
	if reg != nil {
		reg.MustRegister(m.events, m.failures, m.lastFinished)
	}
	return m
}

func (m *Metrics) count(provider string, fresh, known int) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(provider, "new").Add(float64(fresh))
	m.events.WithLabelValues(provider, "known").Add(float64(known))
}

func (m *Metrics) failed(provider string) {
	if m == nil {
		return
	}
	m.failures.WithLabelValues(provider).Inc()
}

func (m *Metrics) finished(provider string, at time.Time) {
	if m == nil {
		return
	}
	m.lastFinished.WithLabelValues(provider).Set(float64(at.Unix()))
}
