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
)

// DefaultMaxBodyBytes is the largest webhook body accepted by default.
const DefaultMaxBodyBytes = 1 << 20

// Config configures the webhook endpoints.
type Config struct {
	Ingester      Ingester
	StripeSecrets []string // every secret is accepted: rotation
	MaxBodyBytes  int64    // default DefaultMaxBodyBytes
	Tolerance     time.Duration
	Logger        *slog.Logger
	Registerer    prometheus.Registerer // nil: metrics are not registered
	Now           func() time.Time      // for tests; default time.Now
}

// Handler serves POST /webhooks/stripe.
type Handler struct {
	config   Config
	results  *prometheus.CounterVec
	duration prometheus.Histogram
}

// NewHandler builds the webhook handler.
func NewHandler(config Config) *Handler {
	if config.MaxBodyBytes <= 0 {
		config.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if config.Tolerance <= 0 {
		config.Tolerance = DefaultTolerance
	}
	if config.Logger == nil {
		config.Logger = slog.New(slog.DiscardHandler)
	}
	if config.Now == nil {
		config.Now = time.Now
	}
	h := &Handler{
		config: config,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paygate_webhooks_total",
			Help: "Webhook requests by provider and result.",
		}, []string{"provider", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "paygate_inbox_insert_seconds",
			Help:    "Time to commit a webhook event and its job to the inbox.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	if config.Registerer != nil {
		config.Registerer.MustRegister(h.results, h.duration)
	}
	return h
}

// Register mounts the webhook routes.
func (h *Handler) Register(e *echo.Echo) {
	e.POST("/webhooks/stripe", h.stripe)
}

// Response is the body of a 200 answer.
type Response struct {
	Received  bool `json:"received"`
	Duplicate bool `json:"duplicate"`
}

func (h *Handler) stripe(c echo.Context) error {
	result, err := h.handleStripe(c)
	h.results.WithLabelValues(ProviderStripe, result).Inc()
	return err
}

func (h *Handler) handleStripe(c echo.Context) (result string, err error) {
	if len(h.config.StripeSecrets) == 0 {
		return "not_configured", ErrNotConfigured
	}
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
	if err := VerifyStripeSignature(body, req.Header.Get("Stripe-Signature"), h.config.StripeSecrets, h.config.Now(), h.config.Tolerance); err != nil {
		return "bad_signature", err
	}
	event, err := DecodeStripeEvent(body)
	if err != nil {
		return "not_an_event", err
	}

	ctx, cancel := context.WithTimeout(req.Context(), ingestTimeout)
	defer cancel()
	start := time.Now()
	duplicate, err := h.config.Ingester.Ingest(ctx, event)
	if err != nil {
		return "unavailable", err
	}
	h.duration.Observe(time.Since(start).Seconds())
	if duplicate {
		result = "duplicate"
	} else {
		result = "received"
	}
	h.config.Logger.InfoContext(ctx, "webhook received", "provider", ProviderStripe,
		"event_id", event.ID, "type", event.Type, "duplicate", duplicate,
		"request_id", c.Response().Header().Get(echo.HeaderXRequestID))
	return result, c.JSON(http.StatusOK, Response{Received: true, Duplicate: duplicate})
}
