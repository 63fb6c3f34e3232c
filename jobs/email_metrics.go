package jobs

import "github.com/prometheus/client_golang/prometheus"

// emailsTotal counts the outcomes of send_email and send_emails jobs. Enqueueing is not counted: it
// happens in transactions that may roll back.
var emailsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "paygate_emails_total",
	Help: "Email outcomes by kind and status: sent, skipped (no SMTP configured), failed (rejected or out of attempts), retry.",
}, []string{"kind", "status"})

// EmailCollector is paygate_emails_total{kind,status}; register it once
// with the /metrics registry. An alert on status="failed" is the ops-visible
// side of a permanent SMTP rejection.
func EmailCollector() prometheus.Collector { return emailsTotal }
