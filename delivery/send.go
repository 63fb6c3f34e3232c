package delivery

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const (
	// DefaultTimeout bounds one attempt, from dialling to the last byte
	// of the bounded response read.
	DefaultTimeout = 15 * time.Second
	// DefaultUserAgent is sent when SenderConfig.UserAgent is empty.
	DefaultUserAgent = "paygate-webhooks/1"

	// MaxResponseBody is how much of a response body an attempt keeps:
	// enough to show a merchant their error page, little enough to store.
	MaxResponseBody = 4 << 10
	// maxDrain is how much more we read and throw away so the connection
	// can go back to the pool; past it closing is cheaper than reading.
	maxDrain = 64 << 10
	// maxConnectTimeout caps dialling and the TLS handshake; a server that
	// takes longer to accept will not answer well either.
	maxConnectTimeout = 10 * time.Second
	// maxResponseHeader bounds the response header bytes we parse
	// (net/http's default is 1 MiB).
	maxResponseHeader = 64 << 10
)

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Guard decides which addresses may be connected to.
	Guard GuardConfig
	// Timeout bounds a whole attempt including reading the bounded
	// response; zero means DefaultTimeout.
	Timeout time.Duration
	// UserAgent is sent on every request; empty means DefaultUserAgent.
	UserAgent string
	// TracerProvider, when tracing is on, makes each attempt a CLIENT
	// span (OpenTelemetry's net/http instrumentation) whose POST carries
	// its traceparent, so an endpoint that traces continues the trace;
	// nil: nothing is traced or added.
	TracerProvider trace.TracerProvider
}

// Sender makes signed HTTP attempts. It is safe for concurrent use and
// keeps connections alive across attempts, so build one and share it.
type Sender struct {
	client    *http.Client
	timeout   time.Duration
	userAgent string
}

// NewSender returns a Sender whose connections go only where cfg.Guard
// allows, never through an environment proxy (the proxy would make the
// connection and the guard would only ever see the proxy's address), and
// which never follows redirects (a redirect would let an endpoint send us
// somewhere CheckURL never saw; it counts as a failed attempt).
func NewSender(cfg SenderConfig) *Sender {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ua := cfg.UserAgent
	if ua == "" {
		ua = DefaultUserAgent
	}
	connect := min(timeout, maxConnectTimeout)
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            cfg.Guard.dialer(connect).DialContext,
		TLSHandshakeTimeout:    connect,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: maxResponseHeader,
		MaxIdleConns:           256,
		// Each request an endpoint has in flight keeps its connection for
		// the next one: with fewer idle connections than requests in
		// flight, every batch would open (and close) the difference anew.
		MaxIdleConnsPerHost: DefaultMaxInFlight,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	var rt http.RoundTripper = transport
	if cfg.TracerProvider != nil {
		rt = otelhttp.NewTransport(transport, otelhttp.WithTracerProvider(cfg.TracerProvider),
			otelhttp.WithPropagators(propagation.TraceContext{}))
	}
	return &Sender{
		client: &http.Client{
			Transport: rt,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		timeout:   timeout,
		userAgent: ua,
	}
}

// Request is one attempt to deliver one message to one endpoint.
type Request struct {
	URL       string
	MessageID string
	Body      []byte
	// Secrets sign the message, current first (see Sign).
	Secrets []string
	// Now is the signed webhook-timestamp.
	Now time.Time
}

// Result is the outcome of one attempt.
type Result struct {
	// Status is the response's status code, 0 when no response came.
	Status int
	// Body is the first MaxResponseBody bytes of the response body as
	// valid UTF-8 without NUL bytes (both replaced by U+FFFD), so it can
	// be stored in a text column as is. If the body could not be read in
	// time it holds what was read: the status already answered.
	Body string
	// Duration is the time from the start of the attempt to the end of
	// reading the response.
	Duration time.Duration
	// RetryAfter is the delay a 429 or 503 asked for in Retry-After
	// (seconds or an HTTP date); 0 if absent, invalid or in the past.
	RetryAfter time.Duration
	// Err is why no response came (signing, timeout, refused connection,
	// ErrPrivateAddress, ...); nil when a response came, whatever its
	// status. It never contains a secret or the message body.
	Err error
}

// Succeeded reports whether the endpoint accepted the message (2xx).
func (r Result) Succeeded() bool { return r.Err == nil && r.Status >= 200 && r.Status < 300 }

// Gone reports whether the endpoint answered 410 Gone, which Standard
// Webhooks senders take as "stop sending to me".
func (r Result) Gone() bool { return r.Err == nil && r.Status == http.StatusGone }

// Send makes one signed POST of r.Body to r.URL with the Standard Webhooks
// headers, within the Sender's timeout, and reports what happened. It
// never retries and never follows a redirect.
func (s *Sender) Send(ctx context.Context, r Request) Result {
	start := time.Now()
	res := s.send(ctx, r)
	res.Duration = time.Since(start)
	return res
}

func (s *Sender) send(ctx context.Context, r Request) Result {
	sig, err := Sign(r.Secrets, r.MessageID, r.Now, r.Body)
	if err != nil {
		return Result{Err: fmt.Errorf("sign message: %w", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return Result{Err: fmt.Errorf("build request: %w", err)}
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("user-agent", s.userAgent)
	req.Header.Set("webhook-id", r.MessageID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(r.Now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)

	resp, err := s.client.Do(req)
	if err != nil {
		// *url.Error names the method and URL, never the body or headers.
		return Result{Err: fmt.Errorf("post webhook: %w", err)}
	}
	defer resp.Body.Close()
	// The request the transport sent carries the attempt's CLIENT span,
	// open until the body is closed: name the message on it, so that a
	// delivery is found by its webhook-id.
	if span := trace.SpanFromContext(resp.Request.Context()); span.IsRecording() {
		span.SetAttributes(attribute.String("paygate.message_id", r.MessageID))
	}

	// A read error here is not the attempt's error: the status line is
	// the endpoint's answer, the body only helps a human read it.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody))
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)

	res := Result{Status: resp.StatusCode, Body: cleanBody(body, len(body) == MaxResponseBody)}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		res.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return res
}

// cleanBody makes a response body storable as text. A body cut at the
// limit may end inside a character; that tail is dropped rather than
// shown as a replacement character the merchant never sent.
func cleanBody(b []byte, truncated bool) string {
	if truncated {
		for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
			if utf8.RuneStart(b[len(b)-i]) {
				if !utf8.FullRune(b[len(b)-i:]) {
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	// PostgreSQL text refuses NUL even though it is valid UTF-8.
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "\uFFFD")
}

// maxRetryAfter keeps a hostile Retry-After from overflowing a Duration;
// the dispatcher applies its own, smaller cap.
const maxRetryAfter = 365 * 24 * time.Hour

// parseRetryAfter reads a Retry-After value (RFC 9110 §10.2.3): delay
// seconds or an HTTP date, relative to now. It returns 0 for anything
// else and for a date in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}
