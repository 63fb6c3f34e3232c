package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	paygatedelivery "github.com/paygate/paygate/delivery"
)

// TestReceiverTakesPaygatesDeliveries: the bench's receiver answers
// paygate's own sender 200 for each signed delivery on one kept-alive
// connection and counts them; it refuses what it cannot read (a body
// without a length, a malformed head) and closes the connection.
func TestReceiverTakesPaygatesDeliveries(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rc := &receiver{}
	done := make(chan error, 1)
	go func() { done <- rc.serve(ln) }()
	base := "http://" + ln.Addr().String()

	sender := paygatedelivery.NewSender(paygatedelivery.SenderConfig{Guard: paygatedelivery.GuardConfig{AllowPrivate: true}, Timeout: 5 * time.Second})
	var reused int
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused++
		}
	}})
	for i := range 3 {
		res := sender.Send(ctx, paygatedelivery.Request{
			URL: base + "/paygate", MessageID: fmt.Sprintf("msg_%d", i), Body: []byte(`{"type":"payment.succeeded","data":{}}`),
			Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Now: time.Now(),
		})
		require.NoError(t, res.Err)
		require.Equal(t, http.StatusOK, res.Status)
	}
	require.Equal(t, 2, reused, "one connection, kept alive")

	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := get("/count")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "3\n", body)
	status, _ = get("/healthz")
	require.Equal(t, http.StatusOK, status)
	status, _ = get("/elsewhere")
	require.Equal(t, http.StatusNotFound, status)

	raw := func(request string) string {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, request)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		b, err := io.ReadAll(bufio.NewReader(c)) // the receiver closes it
		require.NoError(t, err)
		return string(b)
	}
	require.True(t, strings.HasPrefix(raw("POST /paygate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
		"HTTP/1.1 411 "))
	require.True(t, strings.HasPrefix(raw("POST /paygate\r\n\r\n"), "HTTP/1.1 400 "))
	require.True(t, strings.HasPrefix(raw("POST /paygate HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), "HTTP/1.1 400 "))
	require.True(t, strings.HasPrefix(raw("GET /count HTTP/1.1\r\nConnection: close\r\n\r\n"), "HTTP/1.1 200 OK\r\n"))
	status, body = get("/count")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "3\n", body, "refused requests are not counted")

	require.NoError(t, ln.Close())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return once its listener closed")
	}
}

// TestReceiverCountsExportedSpans: the receiver takes the OpenTelemetry
// SDK's own OTLP/HTTP exports (protobuf, plain and gzipped) and OTLP/JSON,
// answers each 200 with an empty ExportTraceServiceResponse, counts their
// spans at GET /spans and not as deliveries, and refuses a body it cannot
// read.
func TestReceiverCountsExportedSpans(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() { _ = (&receiver{}).serve(ln) }()
	base := "http://" + ln.Addr().String()
	count := func(path string) string {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return string(b)
	}

	for _, compression := range []otlptracehttp.Compression{otlptracehttp.NoCompression, otlptracehttp.GzipCompression} {
		exporter, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(base+"/v1/traces"),
			otlptracehttp.WithCompression(compression), otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
		require.NoError(t, err)
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter, sdktrace.WithMaxExportBatchSize(4)))
		for range 10 {
			_, span := tp.Tracer("loadgen-test").Start(t.Context(), "ingest")
			span.End()
		}
		require.NoError(t, tp.ForceFlush(t.Context()), "every export answered 200")
		require.NoError(t, tp.Shutdown(t.Context()))
	}
	require.Equal(t, "20\n", count("/spans"))

	post := func(contentType, body string) *http.Response {
		resp, err := http.Post(base+"/v1/traces", contentType, strings.NewReader(body))
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := post("application/json", `{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[{"name":"a"},{"name":"b"}]},{"spans":[{"name":"c"}]}]}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.JSONEq(t, `{}`, string(b))
	require.Equal(t, "23\n", count("/spans"))

	require.Equal(t, http.StatusBadRequest, post("application/x-protobuf", "\x0a\xff").StatusCode, "a field longer than the body")
	require.Equal(t, http.StatusBadRequest, post("application/json", `{"resourceSpans":`).StatusCode)
	require.Equal(t, http.StatusUnsupportedMediaType, post("text/plain", "spans").StatusCode)
	require.Equal(t, "23\n", count("/spans"))
	require.Equal(t, "0\n", count("/count"), "exports are not deliveries")
}
