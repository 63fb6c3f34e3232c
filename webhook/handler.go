package webhook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/internal/reqlog"
	"github.com/paygate/paygate/provider"
)

// DefaultMaxBodyBytes is the largest webhook body accepted by default.
const DefaultMaxBodyBytes = 1 << 20

// Config configures the webhook endpoints.
type Config struct {
	Ingester Ingester
	// Receivers are the providers, each served at POST /webhooks/{Name}.
	// A provider without keys is still given (it answers 503), so that its
	// sender is told to retry rather than that the route does not exist.
	Receivers []provider.Receiver
	// Sources are the Standard Webhooks senders, each served at
	// POST /webhooks/standard/{Name}. With none, that route answers 503;
	// with some, an unknown name answers 404.
	Sources      []provider.Receiver
	MaxBodyBytes int64 // default DefaultMaxBodyBytes
	Logger       *slog.Logger
	Registerer   prometheus.Registerer // nil: metrics are not registered
	Now          func() time.Time      // for tests; default time.Now
}

// Handler serves the webhook routes.
type Handler struct {
	config   Config
	sources  map[string]provider.Receiver
	results  *prometheus.CounterVec
	duration prometheus.Histogram
}

// NewHandler builds the webhook handler.
func NewHandler(config Config) *Handler {
	if config.MaxBodyBytes <= 0 {
		config.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if config.Logger == nil {
		config.Logger = slog.New(slog.DiscardHandler)
	}
	if config.Now == nil {
		config.Now = time.Now
	}
	h := &Handler{
		config:  config,
		sources: make(map[string]provider.Receiver, len(config.Sources)),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paygate_webhooks_total",
			Help: "Webhook requests by provider and result.",
		}, []string{"provider", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "paygate_inbox_insert_seconds",
			Help:    "Time to commit a webhook request's events and their jobs to the inbox.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	for _, s := range config.Sources {
		h.sources[s.Name()] = s
	}
	if config.Registerer != nil {
		config.Registerer.MustRegister(h.results, h.duration)
	}
	return h
}

// Register mounts the webhook routes.
func (h *Handler) Register(e *echo.Echo) {
	for _, r := range h.config.Receivers {
		e.POST("/webhooks/"+r.Name(), func(c echo.Context) error { return h.serve(c, r.Name(), r) })
	}
	e.POST("/webhooks/standard/:source", h.standard)
}

// standardLabel is the metrics label of Standard Webhooks requests to no
// configured source: a sender must not be able to mint label values.
const standardLabel = "standard"

func (h *Handler) standard(c echo.Context) error {
	name := c.Param("source")
	r, ok := h.sources[name]
	switch {
	case len(h.sources) == 0:
		h.results.WithLabelValues(standardLabel, "not_configured").Inc()
		return ErrNotConfigured
	case !ok:
		h.results.WithLabelValues(standardLabel, "unknown_source").Inc()
		return ErrUnknownSource
	}
	return h.serve(c, name, r)
}

func (h *Handler) serve(c echo.Context, label string, r provider.Receiver) error {
	result, err := h.handle(c, r)
	h.results.WithLabelValues(label, result).Inc()
	if span := trace.SpanFromContext(c.Request().Context()); span.IsRecording() {
		span.SetAttributes(attribute.String("paygate.provider", label), attribute.String("paygate.result", result))
	}
	return err
}

func (h *Handler) handle(c echo.Context, r provider.Receiver) (result string, err error) {
	req := c.Request()
	if req.ContentLength > h.config.MaxBodyBytes {
		return "too_large", ErrBodyTooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, h.config.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "too_large", ErrBodyTooLarge
		}
		return "read_error", echo.NewHTTPError(http.StatusBadRequest, "could not read the request body")
	}
	events, err := r.Receive(req.Header, body, h.config.Now())
	if err != nil {
		return resultOf(err), err
	}
	if span := trace.SpanFromContext(req.Context()); span.IsRecording() {
		spanEvents(span, events)
	}

	ctx, cancel := context.WithTimeout(req.Context(), ingestTimeout)
	defer cancel()
	start := time.Now()
	duplicate, err := h.config.Ingester.IngestAll(ctx, events)
	if err != nil {
		return "unavailable", err
	}
	h.duration.Observe(time.Since(start).Seconds())
	result = "duplicate"
	fresh := 0
	for _, dup := range duplicate {
		if !dup {
			result = "received"
			fresh++
		}
	}
	switch {
	case len(events) == 1:
		// The request's own line names its event: one line a webhook.
		reqlog.Add(c, slog.String("provider", events[0].Provider), slog.String("event_id", events[0].ID),
			slog.String("type", events[0].Type), slog.Bool("duplicate", duplicate[0]))
	case len(events) > 1:
		// A batch (an Adyen notification of several items): the
		// request's line counts them, and each event has a line of its
		// own.
		reqlog.Add(c, slog.String("provider", events[0].Provider), slog.Int("events", len(events)),
			slog.Int("new", fresh))
		for i, ev := range events {
			h.config.Logger.InfoContext(ctx, "webhook received", "provider", ev.Provider,
				"event_id", ev.ID, "type", ev.Type, "duplicate", duplicate[i],
				"request_id", c.Response().Header().Get(echo.HeaderXRequestID))
		}
	}
	answer := r.Acknowledge(events, duplicate)
	return result, c.Blob(answer.Status, answer.ContentType, answer.Body)
}

// spanEvents names a request's events on its span, the SERVER span the
// HTTP middleware started: paygate.event_id for one event, as a provider's
// webhook is; paygate.event_ids for a batch of them (an Adyen
// notification of several items).
func spanEvents(span trace.Span, events []Event) {
	switch len(events) {
	case 0:
	case 1:
		span.SetAttributes(attribute.String("paygate.event_id", events[0].ID), attribute.String("paygate.event_type", events[0].Type))
	default:
		ids := make([]string, len(events))
		for i, e := range events {
			ids[i] = e.ID
		}
		span.SetAttributes(attribute.StringSlice("paygate.event_ids", ids))
	}
}

// resultOf is the metrics label of a refused request.
func resultOf(err error) string {
	switch {
	case errors.Is(err, ErrNotConfigured):
		return "not_configured"
	case errors.Is(err, ErrNotAnEvent):
		return "not_an_event"
	case errors.Is(err, ErrUnauthenticated):
		return "unauthenticated"
	}
	return "bad_signature"
}
