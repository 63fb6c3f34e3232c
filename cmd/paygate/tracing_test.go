package main

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
)

// otlpReceiver is an OTLP/HTTP trace receiver speaking the real protocol:
// POST /v1/traces with a protobuf ExportTraceServiceRequest, answered with
// an ExportTraceServiceResponse.
type otlpReceiver struct {
	t        *testing.T
	srv      *httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services map[string]bool
	requests int
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{t: t, services: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces application/x-protobuf", http.StatusBadRequest)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests++
	for _, rs := range export.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				r.services[a.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	answer, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(answer)
}

func (r *otlpReceiver) snapshot() ([]*tracepb.Span, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...), r.requests
}

func attr(s *tracepb.Span, key string) (string, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.GetValue().GetStringValue(), true
		}
	}
	return "", false
}

// traceparentEndpoint is a merchant's endpoint that keeps the traceparent
// of every message delivered to it.
type traceparentEndpoint struct {
	srv     *httptest.Server
	mu      sync.Mutex
	parents map[string]string // webhook-id → traceparent
}

func newTraceparentEndpoint(t *testing.T) *traceparentEndpoint {
	e := &traceparentEndpoint{parents: map[string]string{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		e.mu.Lock()
		e.parents[req.Header.Get("webhook-id")] = req.Header.Get("traceparent")
		e.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *traceparentEndpoint) received() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]string, len(e.parents))
	for k, v := range e.parents {
		out[k] = v
	}
	return out
}

// registerEndpoint adds an endpoint for every message type at url.
func registerEndpoint(t *testing.T, s *server, url string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/v1/endpoints",
		strings.NewReader(fmt.Sprintf(`{"url":%q,"event_types":["*"],"description":"traces"}`, url)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testOps)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("endpoint-%d", time.Now().UnixNano()))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(raw))
}

// goroutines is the server's goroutine dump, read through its pprof.
func goroutines(t *testing.T, s *server) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.addr+"/debug/pprof/goroutine?debug=2", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testOps)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	return string(raw)
}

// exporterFrame is in the stack of the SDK's batch span processor, the
// goroutine that exports.
const exporterFrame = "go.opentelemetry.io/otel/sdk/trace.(*batchSpanProcessor)"

// requestLines are the server's log lines of POST /webhooks/stripe.
func requestLines(t *testing.T, s *server) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(s.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["route"] == "/webhooks/stripe" {
			lines = append(lines, m)
		}
	}
	return lines
}

// TestTracesFromWebhookToDelivery: with an OTLP endpoint configured by the
// standard variables, a payment's webhooks give SERVER spans naming their
// events, the batch that applies each event links to its webhook's span,
// statements are spans of PostgreSQL, and each delivery is a CLIENT span
// whose traceparent reached the endpoint; the request lines carry their
// trace's ids.
func TestTracesFromWebhookToDelivery(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	otlp := newOTLPReceiver(t)
	endpoint := newTraceparentEndpoint(t)
	s := startServer(t, dbURL,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+otlp.srv.URL,
		"OTEL_SERVICE_NAME=paygate-traces-test",
		"OTEL_TRACES_SAMPLER=always_on",
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"PAYGATE_DELIVERY_ALLOW_PRIVATE=true",
	)
	registerEndpoint(t, s, endpoint.srv.URL)

	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	sim.Pay(stripesim.PayOpts{Amount: 2500, Currency: "eur"})
	_, err := sim.Deliver(context.Background(), "http://"+s.addr+"/webhooks/stripe", sim.Events(), &stripesim.DeliverOpts{Concurrency: 1})
	require.NoError(t, err)
	s.awaitProcessed(t, len(sim.Events()))

	type spanKey struct{ trace, span string }
	var (
		spans     []*tracepb.Span
		servers   map[string]*tracepb.Span // event id → its webhook's SERVER span
		linked    map[spanKey]bool         // spans an apply batch links to
		byID      map[spanKey]*tracepb.Span
		delivered map[string]string
	)
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans, _ = otlp.snapshot()
		servers, linked, byID = map[string]*tracepb.Span{}, map[spanKey]bool{}, map[spanKey]*tracepb.Span{}
		for _, sp := range spans {
			byID[spanKey{hex.EncodeToString(sp.TraceId), hex.EncodeToString(sp.SpanId)}] = sp
			if id, ok := attr(sp, "paygate.event_id"); ok && sp.Kind == tracepb.Span_SPAN_KIND_SERVER {
				servers[id] = sp
			}
			if sp.Name == "apply events" {
				for _, l := range sp.Links {
					linked[spanKey{hex.EncodeToString(l.TraceId), hex.EncodeToString(l.SpanId)}] = true
				}
			}
		}
		delivered = endpoint.received()
		done := len(servers) == len(sim.Events()) && len(delivered) > 0
		for _, sp := range servers {
			done = done && linked[spanKey{hex.EncodeToString(sp.TraceId), hex.EncodeToString(sp.SpanId)}]
		}
		for _, tp := range delivered {
			parts := strings.Split(tp, "-")
			done = done && len(parts) == 4 && byID[spanKey{parts[1], parts[2]}] != nil
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans incomplete: %d spans, servers %d of %d events, %d deliveries %v\n%s",
				len(spans), len(servers), len(sim.Events()), len(delivered), delivered, s.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, e := range sim.Events() {
		sp := servers[e.ID]
		require.NotNil(t, sp, "a SERVER span names event %s", e.ID)
		provider, _ := attr(sp, "paygate.provider")
		require.Equal(t, "stripe", provider)
		require.Equal(t, "POST /webhooks/stripe", sp.Name)
	}
	// Every delivery's traceparent is a CLIENT span paygate exported: the
	// endpoint can continue paygate's trace.
	for msg, tp := range delivered {
		parts := strings.Split(tp, "-")
		client := byID[spanKey{parts[1], parts[2]}]
		require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, client.Kind, "message %s: %s", msg, client.Name)
		id, _ := attr(client, "paygate.message_id")
		require.Equal(t, msg, id)
	}
	statements := 0
	for _, sp := range spans {
		if v, _ := attr(sp, "db.system"); v == "postgresql" {
			statements++
			require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, sp.Kind)
		}
	}
	require.Positive(t, statements, "PostgreSQL statements are spans")
	otlp.mu.Lock()
	require.True(t, otlp.services["paygate-traces-test"], "OTEL_SERVICE_NAME names the service: %v", otlp.services)
	otlp.mu.Unlock()

	// The request's own log line is in its trace.
	lines := requestLines(t, s)
	require.Len(t, lines, len(sim.Events()))
	for _, l := range lines {
		sp := servers[fmt.Sprint(l["event_id"])]
		require.NotNil(t, sp, "line %v", l)
		require.Equal(t, hex.EncodeToString(sp.TraceId), l["trace_id"])
		require.Equal(t, hex.EncodeToString(sp.SpanId), l["span_id"])
	}
	require.Contains(t, goroutines(t, s), exporterFrame, "tracing on: the exporter runs")
}

// TestTracingOffWithoutEndpoint: with the other OTEL_* variables set but
// no OTLP endpoint, nothing is set up: no SDK goroutine, nothing exported,
// no trace ids in the log lines, no traceparent on deliveries.
func TestTracingOffWithoutEndpoint(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	otlp := newOTLPReceiver(t)
	endpoint := newTraceparentEndpoint(t)
	s := startServer(t, dbURL,
		"OTEL_SERVICE_NAME=paygate-off-test",
		"OTEL_TRACES_SAMPLER=always_on",
		"PAYGATE_DELIVERY_ALLOW_PRIVATE=true",
	)
	registerEndpoint(t, s, endpoint.srv.URL)
	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	sim.Pay(stripesim.PayOpts{Amount: 2500, Currency: "eur"})
	_, err := sim.Deliver(context.Background(), "http://"+s.addr+"/webhooks/stripe", sim.Events(), &stripesim.DeliverOpts{Concurrency: 1})
	require.NoError(t, err)
	s.awaitProcessed(t, len(sim.Events()))
	waitUntil(t, "a message delivered", 30*time.Second, func() bool { return len(endpoint.received()) > 0 })

	require.NotContains(t, goroutines(t, s), "go.opentelemetry.io/otel/sdk", "tracing off: no SDK goroutine")
	for msg, tp := range endpoint.received() {
		require.Empty(t, tp, "message %s carries no traceparent", msg)
	}
	lines := requestLines(t, s)
	require.Len(t, lines, len(sim.Events()))
	for _, l := range lines {
		require.NotContains(t, l, "trace_id")
	}
	require.NotContains(t, s.logs.String(), "tracing on")
	_, requests := otlp.snapshot()
	require.Zero(t, requests)
}
