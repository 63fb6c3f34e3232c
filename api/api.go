// Package api serves paygate's ops and finance JSON API: bearer-token roles,
// the Idempotency-Key middleware, problem+json errors, health, readiness and
// metrics.
//
// It reads and acts through the packages that own the data (inbox, ledger,
// jobs, reconcile) and must never bypass them with SQL of its own on their
// tables.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/delivery/natsjs"
	"github.com/paygate/paygate/durability"
	"github.com/paygate/paygate/internal/reqlog"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
)

// Config configures the API.
type Config struct {
	Pool *pgxpool.Pool
	Jobs *jobs.Client
	// OpsTokens and FinanceTokens are the role tokens, each a bare token
	// or name:token (CheckTokens says which lists are valid).
	OpsTokens     []string
	FinanceTokens []string
	// ConsumerTokens read the feed of messages, and only it.
	ConsumerTokens []string
	// Delivery keeps the endpoints and their deliveries; nil: the
	// endpoint routes answer 503.
	Delivery *delivery.Store
	// NATS publishes the messages to JetStream; nil: publishing is off
	// (GET /v1/ops/broker says so).
	NATS     *natsjs.Publisher
	Logger   *slog.Logger
	Registry *prometheus.Registry // served at /metrics; nil: a fresh one
	// RiverUI mounts River's UI under /riverui behind the ops tokens; Start
	// starts its background services.
	RiverUI bool
	// RequestTimeout bounds each /v1 request: its work (the request's
	// context, so its queries) and the writing of its answer (a client that
	// stops reading is cut off). Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// ReconcileUnavailable, when set, is why this server cannot perform
	// reconciliation runs (no provider API key): run requests are refused
	// with it (reconcile.ErrUnavailable), nothing recorded.
	ReconcileUnavailable error
	// TrustedProxies are the proxies (PAYGATE_TRUSTED_PROXIES) whose
	// X-Forwarded-For is believed: a request's client address is its
	// connection's, unless that is one of these; then the rightmost
	// forwarded address that is not. Empty: the connection's, always.
	TrustedProxies []netip.Prefix
	// AuthFailureLimit failed authentications from one address within
	// AuthFailureWindow (from its first failure) refuse the address until
	// the window ends. Defaults DefaultAuthFailureLimit and
	// DefaultAuthFailureWindow; tests shorten the window.
	AuthFailureLimit  int
	AuthFailureWindow time.Duration
	// GLAccounts are the general ledger's codes for the chart's accounts
	// in journal exports (PAYGATE_GL_ACCOUNTS); XeroTaxRate the tax rate
	// name Xero's lines carry (PAYGATE_GL_XERO_TAX_RATE, default
	// DefaultXeroTaxRate). A close stores both with the period, so its
	// export stays the same bytes.
	GLAccounts  ledger.GLAccounts
	XeroTaxRate string
	// TracerProvider, when tracing is on, makes each request a SERVER
	// span (OpenTelemetry's Echo middleware), continuing a caller's
	// traceparent; the request's log line then carries its ids. Health,
	// readiness and metrics, polled all day, are not traced. nil: no
	// span, nothing installed.
	TracerProvider trace.TracerProvider
	// BooksCurrency is the currency Xero's and QuickBooks' exports are in
	// (PAYGATE_BOOKS_CURRENCY, default DefaultBooksCurrency), also stored
	// with a close.
	BooksCurrency string
	// Durability is what brings back events a failover lost, for
	// /readyz's answer on what a 2xx is worth.
	Durability durability.Recovery
}

// DefaultRequestTimeout is Config.RequestTimeout's default: /v1 handlers
// answer in milliseconds, and this is under serve's 30 s write timeout, so
// a stuck request gets a 503 rather than a cut connection.
const DefaultRequestTimeout = 15 * time.Second

// Server holds the API's dependencies.
type Server struct {
	config  Config
	auth    *authenticator
	limiter *authLimiter
	ops     opsState
}

// NewEcho builds the Echo instance with paygate's error handler, request ids,
// request logging, latency metrics, health and metrics routes, and the /v1
// API. Callers mount the webhook routes on it.
func NewEcho(config Config) (*echo.Echo, *Server) {
	if config.Logger == nil {
		config.Logger = slog.New(slog.DiscardHandler)
	}
	if config.Registry == nil {
		config.Registry = prometheus.NewRegistry()
	}
	if config.RequestTimeout <= 0 {
		config.RequestTimeout = DefaultRequestTimeout
	}
	auth, err := newAuthenticator(config.OpsTokens, config.FinanceTokens, config.ConsumerTokens)
	if err != nil {
		config.Logger.Error("role tokens refused: no /v1 caller is admitted", "error", err.Error())
	}
	s := &Server{config: config, auth: auth, limiter: newAuthLimiter(config)}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = ipExtractor(config.TrustedProxies)
	e.HTTPErrorHandler = ErrorHandler(config.Logger)
	e.Use(middleware.RequestID())
	if config.TracerProvider != nil {
		// Before observeRequests, whose log line is written with the
		// request's context: inside the span.
		e.Use(otelecho.Middleware("paygate", otelecho.WithTracerProvider(config.TracerProvider),
			otelecho.WithSkipper(untraced)))
	}
	e.Use(observeRequests(config.Logger, config.Registry))
	e.Use(middleware.Recover())
	e.Use(refuseUnstorableText)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(config.Registry, promhttp.HandlerOpts{})))

	// Every POST under /v1, present and future, goes through the
	// Idempotency-Key middleware (after authentication: keys are per caller).
	v1 := e.Group("/v1", s.bounded, s.authenticate, s.idempotency)
	anyRole := requireRole(RoleOps, RoleFinance)
	opsOnly := requireRole(RoleOps)
	v1.GET("/me", s.me, anyRole)
	v1.GET("/events/:provider/:event_id", s.getEvent, anyRole)
	v1.GET("/ops/stats", s.opsStats, opsOnly)
	s.routes(v1)
	s.refundRoutes(v1)
	s.downstreamRoutes(v1)
	s.opsRoutes(e, v1)
	s.mountPprof(e)
	return e, s
}

// untraced are the routes polled by machines all day: a span each would
// bury the requests that matter.
func untraced(c echo.Context) bool {
	switch c.Path() {
	case "/healthz", "/readyz", "/metrics":
		return true
	}
	return false
}

// observeRequests times every request, with its route, method and status,
// and writes one log line for it. The line never holds headers, query
// strings or bodies: they carry tokens, signatures and payment data.
func observeRequests(logger *slog.Logger, reg prometheus.Registerer) echo.MiddlewareFunc {
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "paygate_http_request_duration_seconds",
		Help:    "HTTP request latency by route, method and status.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"route", "method", "status"})
	reg.MustRegister(hist)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			took := time.Since(start)
			status := c.Response().Status
			if err != nil {
				status = statusOf(err)
			}
			hist.WithLabelValues(c.Path(), c.Request().Method, http.StatusText(status)).Observe(took.Seconds())
			level := slog.LevelInfo
			if status >= 500 {
				level = slog.LevelError
			}
			added := reqlog.Attrs(c)
			attrs := make([]slog.Attr, 0, 5+len(added)) // one allocation a request
			attrs = append(attrs, slog.String("method", c.Request().Method), slog.String("route", c.Path()),
				slog.Int("status", status), slog.Int64("duration_ms", took.Milliseconds()))
			attrs = append(attrs, added...)
			attrs = append(attrs, slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)))
			logger.LogAttrs(c.Request().Context(), level, "request", attrs...)
			return err
		}
	}
}

// bounded gives a /v1 request RequestTimeout in all: its context ends then
// (its queries are cancelled, answered 503), and so does the writing of its
// answer, so neither a slow query nor a client that stops reading holds a
// handler longer.
func (s *Server) bounded(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		deadline := time.Now().Add(s.config.RequestTimeout)
		if c.Path() == "/v1/feed" {
			// A feed request may wait for messages (wait=, up to 30 s)
			// before its work begins.
			deadline = deadline.Add(feedMaxWait)
		}
		if isJournalExport(c.Path()) {
			deadline = time.Now().Add(max(s.config.RequestTimeout, journalExportTimeout))
		}
		// Not every writer has a deadline (a test's recorder does not):
		// the context's still holds.
		_ = http.NewResponseController(c.Response()).SetWriteDeadline(deadline)
		ctx, cancel := context.WithDeadline(c.Request().Context(), deadline)
		defer cancel()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}
